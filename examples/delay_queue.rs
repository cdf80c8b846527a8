//! Idle timeouts with `tickwheel::tokio::DelayQueue`.
//!
//! A server keeps one timer per connection and closes a connection that has been quiet for
//! `IDLE`. Each message resets the connection's timer; the queue's `Stream` yields the
//! connections whose timer ran out. Four simulated clients send 1, 2, 3 and 4 messages,
//! 100 ms apart, then go quiet, so they are closed about 300, 400, 500 and 600 ms after they
//! started.
//!
//! Run: `cargo run --example delay_queue --features tokio`

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use tickwheel::tokio::{DelayQueue, Key};
use tokio::sync::mpsc;
use tokio::time::Instant;

const IDLE: Duration = Duration::from_millis(300);
const GAP: Duration = Duration::from_millis(100);

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let start = Instant::now();
    let (tx, mut messages) = mpsc::channel::<u32>(64);
    for id in 1..=4u32 {
        let tx = tx.clone();
        tokio::spawn(async move {
            for _ in 0..id {
                if tx.send(id).await.is_err() {
                    return;
                }
                tokio::time::sleep(GAP).await;
            }
        });
    }
    drop(tx);

    let mut timeouts = DelayQueue::new();
    let mut open: HashMap<u32, Key> = HashMap::new();
    let stamp = || format!("{:>4} ms", start.elapsed().as_millis());
    loop {
        tokio::select! {
            Some(id) = messages.recv() => match open.get(&id) {
                // Activity: the connection is idle again only IDLE from now.
                Some(key) => timeouts.reset(key, IDLE),
                None => {
                    open.insert(id, timeouts.insert(id, IDLE));
                    println!("{}  connection {id} opened", stamp());
                }
            },
            // `next()` is `None` while no connection is open; `select!` then waits for messages.
            Some(idle) = timeouts.next() => {
                let id = idle.into_inner();
                open.remove(&id);
                println!("{}  connection {id} closed after {IDLE:?} idle", stamp());
            }
            else => break,
        }
    }
    assert!(open.is_empty() && timeouts.is_empty());
    println!("{}  all connections closed", stamp());
}
