//! The journal's dispatcher thread hands out every due timer once, in deadline order, and
//! its hand-outs and ends are on disk.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tickwheel_journal::{Durability, Durable, Options};

#[test]
fn dispatcher_delivers_in_order_and_records_the_ends() {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = Options::new().durability(Durability::Batched(Duration::from_millis(1)));
    let j: Arc<Durable<String, u64, u64>> =
        Arc::new(Durable::open(dir.path(), options.clone()).expect("open"));
    // All scheduled before the thread starts, due by then: one batch, in deadline order.
    let t0 = Instant::now();
    j.schedule("q".into(), 99, t0 + Duration::from_secs(3600), 99)
        .expect("journal")
        .expect("new");
    let items = (0..20u64)
        .rev()
        .map(|id| ("q".to_string(), id, t0 + Duration::from_millis(id), id));
    assert!(j.schedule_many(items).expect("journal").is_empty());
    while Instant::now() < t0 + Duration::from_millis(25) {
        std::thread::yield_now();
    }
    let (tx, rx) = mpsc::channel();
    let dispatcher = j
        .spawn_dispatcher(move |due| {
            let id = *due.id();
            let attempt = due.attempt();
            if id == 13 {
                panic!("a handler that panics loses no other timer");
            }
            due.done().expect("journal");
            tx.send((id, attempt)).expect("the test listens");
        })
        .expect("spawn");
    let got: Vec<(u64, u32)> = (0..19)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(30))
                .expect("a delivery")
        })
        .collect();
    let want: Vec<(u64, u32)> = (0..20u64)
        .filter(|&id| id != 13)
        .map(|id| (id, 1))
        .collect();
    assert_eq!(got, want);
    // The panicking one was dropped while unwinding: delivered.
    while dispatcher.panics() == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(dispatcher.delivered(), 20);
    // Now it sleeps towards the far timer: a timer due at once must still come out.
    j.schedule("q".into(), 50, Instant::now(), 50)
        .expect("journal")
        .expect("new");
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(30)).expect("woken"),
        (50, 1)
    );
    assert!(dispatcher.error().is_none());
    dispatcher.shutdown();
    j.flush().expect("flush");
    assert_eq!(j.len(), 1);
    drop(j);
    let j: Durable<String, u64, u64> = Durable::open(dir.path(), options).expect("reopen");
    assert_eq!(j.len(), 1, "only the far timer is left on disk");
    assert!(j.scheduler().lookup(&99).is_some());
}
