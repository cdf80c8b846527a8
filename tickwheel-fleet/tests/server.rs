//! The etcd harness: start, keys survive a restart on the same port, stop by PID.

use tickwheel_fleet::server::{EtcdServer, start_for_test};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_data_and_port() {
    let Some(mut etcd) = start_for_test() else {
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
