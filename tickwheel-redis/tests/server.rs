//! The server harness: start, kill -9, restart from the AOF, stop by PID.

use std::io::{Read, Write};
use std::net::TcpStream;
use tickwheel_redis::server::start_for_test;

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
    let Some(mut server) = start_for_test() else {
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
