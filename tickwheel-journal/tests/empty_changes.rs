//! A call that changes nothing on disk (a drain of an empty queue, a cancel of an unknown
//! id, a flush with nothing queued) returns in every durability mode: it must not wait for
//! a commit that an idle writer never makes.

use std::sync::mpsc;
use std::time::Duration;

use tickwheel::sync::Cancel;
use tickwheel_journal::{Durability, Durable, Options};

type J = Durable<String, u64, String>;

fn returns(mode: Durability) {
    let dir = tempfile::tempdir().expect("temp dir");
    let j: J = Durable::open(dir.path(), Options::new().durability(mode)).expect("open");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let drained = j.drain_queue(&"nobody".to_string()).expect("drain");
        assert!(drained.cancelled.is_empty());
        assert!(matches!(j.cancel(&7).expect("cancel"), Cancel::NotFound));
        j.flush().expect("flush");
        let frozen = j.freeze_queue(&"nobody".to_string()).expect("freeze");
        assert!(frozen.pending.is_empty());
        j.flush().expect("flush");
        let _ = tx.send(());
    });
    // A generous bound: each call takes a few milliseconds; a hang never ends.
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{mode:?}: a call with nothing to record never returned"));
}

#[test]
fn empty_changes_return_in_sync_mode() {
    returns(Durability::Sync);
}

#[test]
fn empty_changes_return_in_batched_mode() {
    returns(Durability::Batched(Duration::from_millis(1)));
}

#[test]
fn empty_changes_return_in_async_mode() {
    returns(Durability::Async(Duration::from_millis(1)));
}
