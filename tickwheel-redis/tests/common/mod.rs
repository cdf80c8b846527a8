//! Shared by the integration tests: a server of the test's own and connected members.
#![allow(dead_code)]

use tickwheel_redis::server::{RedisServer, start_for_test};
use tickwheel_redis::{Member, Options, Protocol};

pub fn server() -> Option<RedisServer> {
    start_for_test()
}

pub async fn member(server: &RedisServer, name: &str) -> Protocol {
    connect(&server.url(), Member::new_boot(name)).await
}

pub async fn connect(url: &str, member: Member) -> Protocol {
    match Protocol::connect(url, member, Options::default()).await {
        Ok(p) => p,
        Err(e) => panic!("connect: {e}"),
    }
}

/// Moves the record's deadline into the past with a raw command (tests only): what waiting
/// out a lease would do, without timing in the test.
pub async fn expire(url: &str, owner_key: &str) {
    let client = redis::Client::open(url).expect("url");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let _: () = redis::cmd("HSET")
        .arg(owner_key)
        .arg("deadline_ms")
        .arg("0")
        .query_async(&mut c)
        .await
        .expect("hset");
}
