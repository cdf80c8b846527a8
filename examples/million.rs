//! Inserts, cancels and polls a million timers on the core `Wheel` and prints how long each
//! phase took. A quick look at the core's cost; `tickwheel-bench/examples/compare/` is the side-by-side
//! benchmark against other wheels.
//!
//! ```text
//! cargo run --release --example million [-- COUNT]
//! ```

use std::time::Instant;

use tickwheel::Wheel;

fn main() {
    let count: u64 = match std::env::args().nth(1).map(|s| s.parse()) {
        None => 1_000_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: million [COUNT]  (COUNT: a positive whole number of timers)");
            std::process::exit(2);
        }
    };
    // Deadlines spread over 60 s of 1 ms ticks, scrambled so inserts are not in order.
    let deadline = |i: u64| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) % 60_000;

    let mut wheel = Wheel::with_capacity(count as usize);
    let t = Instant::now();
    let keys: Vec<_> = (0..count).map(|i| wheel.insert(deadline(i), i)).collect();
    let insert = t.elapsed();

    let t = Instant::now();
    let mut cancelled = 0u64;
    for key in keys.iter().step_by(2) {
        cancelled += u64::from(wheel.cancel(*key).is_some());
    }
    let cancel = t.elapsed();

    let t = Instant::now();
    let mut fired = 0u64;
    let mut late = 0u64;
    for now in 0..60_000u64 {
        while let Some(expired) = wheel.poll(now) {
            late = late.max(now - expired.deadline);
            fired += 1;
        }
    }
    let poll = t.elapsed();

    let per = |d: std::time::Duration, n: u64| d.as_nanos() as f64 / n.max(1) as f64;
    println!("timers:    {count}");
    println!(
        "insert:    {insert:>10.2?}  ({:.1} ns/timer)",
        per(insert, count)
    );
    println!(
        "cancel:    {cancel:>10.2?}  ({:.1} ns/timer, {cancelled} cancelled)",
        per(cancel, cancelled)
    );
    println!(
        "poll:      {poll:>10.2?}  ({:.1} ns/timer, {fired} fired over 60 000 ticks, max lateness {late})",
        per(poll, fired)
    );
    if cancelled + fired != count || !wheel.is_empty() {
        eprintln!("lost timers: {cancelled} cancelled + {fired} fired != {count}");
        std::process::exit(1);
    }
}
