//! Shared by the integration tests: a server of the test's own and connected members.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use tickwheel_redis::{Custody, CustodyOptions, Error, Member, Options, Protocol};
use tickwheel_testkit::redis::{RedisServer, start_for_test};

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

/// A `Custody` member with short retry and in-flight bounds, `chunk_entries` timers a chunk.
pub async fn custody_member(url: &str, name: &str, chunk_entries: usize) -> Custody {
    let opts = CustodyOptions {
        chunk_entries,
        retry_for: Duration::from_secs(2),
        in_flight_timeout: Duration::from_secs(5),
        ..CustodyOptions::default()
    };
    Custody::connect(url, Member::new_boot(name), Options::default(), opts)
        .await
        .expect("connect")
}

/// Retries a call while Redis is unreachable or loading (a restart), at most `tries` times,
/// 100 ms apart.
pub async fn retry<T, F, Fut>(tries: u32, mut call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut done = 0;
    loop {
        match call().await {
            Err(e) if e.is_retryable() && done < tries => {
                done += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}
