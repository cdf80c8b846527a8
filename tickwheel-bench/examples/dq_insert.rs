//! Fresh `DelayQueue`s filled by `insert_at`, for instruction counts per insert
//! (`valgrind --tool=callgrind`): tickwheel's drop-in beside tokio-util's.
//!
//! `cargo run --release -p tickwheel-bench --features tokio --example dq_insert -- QUEUE [rounds] [n]`
//! with `QUEUE` one of `tickwheel`, `tokio-util`: `rounds` times (default 100), makes a queue
//! `with_capacity(n)` (default 1 000), inserts `n` values at deadlines uniform over the next
//! minute (the same pseudo-random ones every round, converted to `Instant`s beforehand), and
//! drops it, all on a paused current-thread runtime. Construction and drop are counted with the
//! inserts: the difference between two runs of different `rounds`, divided by the extra
//! inserts, is the cost per insert of a queue's whole life. The inserts alone, as `compare`
//! times them: `valgrind --tool=callgrind --toggle-collect='*fill_*' ...`.

use std::time::Duration;

use tokio::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let queue = args.next().unwrap_or_default();
    let rounds: u64 = args.next().map_or(100, |s| s.parse().expect("rounds"));
    let n: usize = args.next().map_or(1000, |s| s.parse().expect("n"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("tokio runtime");
    let _entered = rt.enter();
    let start = Instant::now();
    // xorshift64: deterministic, no dependency.
    let mut rng = 0x5eed_u64;
    let deadlines: Vec<Instant> = (0..n)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            start + Duration::from_millis(rng % 60_000)
        })
        .collect();
    let mut held = 0usize;
    match queue.as_str() {
        "tickwheel" => {
            for _ in 0..rounds {
                let mut q = tickwheel::tokio::DelayQueue::with_capacity(n);
                fill_tickwheel(&mut q, &deadlines);
                held += std::hint::black_box(&q).len();
            }
        }
        "tokio-util" => {
            for _ in 0..rounds {
                let mut q = tokio_util::time::DelayQueue::with_capacity(n);
                fill_tokio_util(&mut q, &deadlines);
                held += std::hint::black_box(&q).len();
            }
        }
        other => panic!("QUEUE: tickwheel or tokio-util, not {other:?}"),
    }
    assert_eq!(held, rounds as usize * n, "every insert held");
    println!("{queue}: {rounds} rounds of {n} inserts");
}

#[inline(never)]
fn fill_tickwheel(q: &mut tickwheel::tokio::DelayQueue<u64>, deadlines: &[Instant]) {
    for (i, &at) in deadlines.iter().enumerate() {
        std::hint::black_box(q.insert_at(i as u64, at));
    }
}

#[inline(never)]
fn fill_tokio_util(q: &mut tokio_util::time::DelayQueue<u64>, deadlines: &[Instant]) {
    for (i, &at) in deadlines.iter().enumerate() {
        std::hint::black_box(q.insert_at(i as u64, at));
    }
}
