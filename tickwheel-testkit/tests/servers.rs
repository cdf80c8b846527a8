//! The server harnesses: start, kill -9, restart, stop by PID.

use std::io::{Read, Write};
use std::net::TcpStream;

use tickwheel_testkit::etcd::{self, EtcdServer};
use tickwheel_testkit::redis;

fn command(port: u16, cmd: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.write_all(cmd.as_bytes()).expect("write");
    s.write_all(b"\r\n").expect("write");
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).expect("read");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn restart_reloads_the_aof_and_drop_stops_the_pid() {
    let Some(mut server) = redis::start_for_test() else {
        return;
    };
    let port = server.port();
    assert_eq!(command(port, "SET k v"), "+OK\r\n");
    let pid = server.pid().expect("running");
    server.kill9().expect("kill");
    assert_eq!(server.pid(), None);
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "killed server still listens"
    );
    server.restart().expect("restart");
    assert_ne!(server.pid(), Some(pid));
    assert_eq!(server.port(), port);
    assert_eq!(command(port, "GET k"), "$1\r\nv\r\n");
    assert!(command(port, "CONFIG GET appendfsync").contains("always"));
    let pid = server.pid().expect("running");
    drop(server);
    // The process is gone (reaped), so its /proc entry is too.
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}

/// `INFO` read whole (a reply longer than one read) and `used_memory` growing with what is
/// stored; a killed server is an error, not a number.
#[test]
fn info_reads_the_whole_reply_and_used_memory_follows_the_data() {
    let Some(mut server) = redis::start_for_test() else {
        return;
    };
    let all = server.info("all").expect("info all");
    // Its first section and its last: the reply was read to its end.
    assert!(
        all.starts_with("# Server") && all.contains("# Keyspace"),
        "{all}"
    );
    assert_eq!(
        redis::info_field::<u16>(&all, "tcp_port"),
        Some(server.port())
    );
    let before = server.used_memory().expect("used_memory");
    // A value too long for an inline command: the request in RESP.
    let big = "x".repeat(1 << 20);
    let set = format!("*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${}\r\n{big}", big.len());
    assert_eq!(command(server.port(), &set), "+OK\r\n");
    let after = server.used_memory().expect("used_memory");
    assert!(after >= before + (1 << 20), "{before} -> {after}");
    server.kill9().expect("kill");
    assert!(server.used_memory().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_data_and_port() {
    let Some(mut etcd) = etcd::start_for_test() else {
        return;
    };
    let url = etcd.url();
    let mut c = match etcd_client::Client::connect([url.as_str()], None).await {
        Ok(c) => c,
        Err(e) => panic!("connect: {e}"),
    };
    if let Err(e) = c.put("k", "v", None).await {
        panic!("put: {e}");
    }
    let pid = etcd.pid();
    assert!(pid.is_some());
    if let Err(e) = etcd.restart() {
        panic!("restart: {e}");
    }
    assert_eq!(etcd.url(), url);
    assert_ne!(etcd.pid(), pid, "a new process");
    let mut c = match etcd_client::Client::connect([url.as_str()], None).await {
        Ok(c) => c,
        Err(e) => panic!("reconnect: {e}"),
    };
    let got = match c.get("k", None).await {
        Ok(r) => r.kvs().first().map(|kv| kv.value().to_vec()),
        Err(e) => panic!("get: {e}"),
    };
    assert_eq!(got.as_deref(), Some(&b"v"[..]));
    if let Err(e) = etcd.stop() {
        panic!("stop: {e}");
    }
    assert_eq!(etcd.pid(), None);
    let dropped = EtcdServer::start();
    assert!(dropped.is_ok(), "{dropped:?}");
}
