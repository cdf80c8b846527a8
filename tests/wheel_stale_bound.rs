//! The stale bound of `WheelStats::stale` (`stale <= live + run + 8 x 706`, below
//! `2 x live + 8 x 706`) at every moment, through the public API.
//!
//! First, while cancels and moving resets wait as pending unlinks, whatever flushes them: a
//! poll that fires a timer, an idle poll, `poll_into(.., 1, ..)`, or nothing (the list
//! filling up). Every deadline there stays inside the 4096-tick block the wheel started in,
//! so no level-2 slot is ever processed and the run stays empty: the bound is
//! `live + 8 x 706`, checked after every single call. Then the sorted run, whose timers moved
//! later and filed again when the run reaches them must not leave it over its own bound.
//! (The run's case failed before `settle_run_head` checked the bound.)

use tickwheel::{IndexedWheel, Wheel};

const SLACK: usize = 8 * 706;

#[derive(Clone, Copy, Debug)]
enum Flush {
    /// Nothing between chunks: only a full list of pending unlinks flushes.
    None,
    /// A timer filed at `elapsed`, then a poll that fires it (a busy poll, no slot processed).
    FirePast,
    /// A poll with nothing due (at or behind `elapsed`).
    Idle,
    /// A past timer taken by `poll_into` with limit 1.
    PollInto,
    /// `next_expiration`, `len`, `stats`: `&self` reads.
    Reads,
}

#[derive(Clone, Copy, Debug)]
enum Unlink {
    Cancel,
    /// Reset to an earlier slot: one stale reference left per move.
    MoveEarlier,
}

fn check(w: &Wheel<u64>, what: &str) {
    let s = w.stats();
    assert_eq!(s.live, w.len());
    assert!(s.stale <= s.live + SLACK, "{what}: {s:?}");
}

/// `SLACK + 300` timers in one slot (kept occupied by one that stays), unlinked `chunk` at a
/// time with `flush` between chunks; returns the largest `stale - live` seen.
fn run(base: u64, chunk: usize, flush: Flush, unlink: Unlink) -> i64 {
    let what = format!("base {base} chunk {chunk} {flush:?} {unlink:?}");
    let mut w: Wheel<u64> = Wheel::starting_at(base);
    let slot = base + 4000; // level 1
    let keep = w.insert(slot, u64::MAX);
    let keys: Vec<_> = (0..SLACK as u64 + 300).map(|i| w.insert(slot, i)).collect();
    let mut fired = 0u64;
    let mut worst = i64::MIN;
    for (round, part) in keys.chunks(chunk).enumerate() {
        for (i, &k) in part.iter().enumerate() {
            match unlink {
                Unlink::Cancel => assert!(w.cancel(k).is_some()),
                // Earlier level-1 slots, all ahead of `elapsed` (which stays at `base`).
                Unlink::MoveEarlier => assert!(w.reset(k, base + 64 + 64 * (i as u64 % 60))),
            }
            check(&w, &what);
            let s = w.stats();
            worst = worst.max(s.stale as i64 - s.live as i64);
        }
        let v = 1 << 40 | round as u64;
        match flush {
            Flush::None => {}
            Flush::FirePast => {
                let k = w.insert(base, v);
                let e = w.poll(base).expect("the past timer is due");
                assert_eq!((e.key, e.value), (k, v));
                fired += 1;
            }
            Flush::Idle => {
                assert!(w.poll(base).is_none());
                assert!(w.poll(base.saturating_sub(1)).is_none());
            }
            Flush::PollInto => {
                w.insert(base, v);
                let mut out = Vec::new();
                assert_eq!(w.poll_into(base, 1, &mut out), 1);
                assert_eq!(out[0].value, v);
                fired += 1;
            }
            Flush::Reads => {
                let next = w.next_expiration().expect("timers pending");
                assert!(next > base && next <= slot, "{what}: next {next}");
            }
        }
        check(&w, &what);
    }
    // What is left fires once, in order, at its deadlines, and nothing stale stays behind.
    assert_eq!(w.deadline(keep), Some(slot));
    let mut last = 0;
    let mut n = 0;
    while let Some(e) = w.poll(base + 4095) {
        assert!(e.deadline >= last && e.deadline <= base + 4095, "{what}");
        last = e.deadline;
        n += 1;
        check(&w, &what);
    }
    let moved = match unlink {
        Unlink::Cancel => 0,
        Unlink::MoveEarlier => keys.len(),
    };
    assert_eq!(n, 1 + moved, "{what}: fired {fired} past timers before");
    assert!(w.is_empty());
    assert_eq!(w.stats().stale, 0, "{what}");
    worst
}

#[test]
fn pending_unlinks_keep_the_stale_bound_whatever_flushes_them() {
    let flushes = [
        Flush::None,
        Flush::FirePast,
        Flush::Idle,
        Flush::PollInto,
        Flush::Reads,
    ];
    let mut worst = i64::MIN;
    for base in [0, !4095] {
        for chunk in [1, 63, 64, 65, 128] {
            for flush in flushes {
                for unlink in [Unlink::Cancel, Unlink::MoveEarlier] {
                    worst = worst.max(run(base, chunk, flush, unlink));
                }
            }
        }
    }
    // The levels did get up to their sweep bound (so the bound was what was tested).
    assert!(
        worst > (SLACK - 2 * 64 - 100) as i64,
        "worst stale - live {worst}"
    );
}

/// The same through `IndexedWheel`: 63 cancels then an idle poll, and 65 cancels with no
/// poll, checked after every call.
#[test]
fn indexed_wheel_pending_unlinks_keep_the_stale_bound() {
    for chunk in [63usize, 65] {
        let mut w: IndexedWheel<u64, u64> = IndexedWheel::new();
        w.insert(u64::MAX, 4000, 0);
        let ids: Vec<u64> = (0..SLACK as u64 + 300).collect();
        for &id in &ids {
            w.insert(id, 4000, id);
        }
        for part in ids.chunks(chunk) {
            for &id in part {
                assert_eq!(w.cancel(&id), Some(id));
                let s = w.stats();
                assert!(s.stale <= s.live + SLACK, "chunk {chunk}: {s:?}");
            }
            if chunk == 63 {
                assert!(w.poll(0).is_none());
            }
        }
        assert_eq!(w.next_expiration(), Some(4000 & !63));
        let fired: Vec<_> = std::iter::from_fn(|| w.poll(4000)).collect();
        assert_eq!(fired.len(), 1);
        assert_eq!(w.stats().stale, 0);
    }
}

/// Timers waiting in the sorted run and moved later stay there; when the run reaches them,
/// `settle_run_head` files them again one by one (each `due.unlink(true)` lowers the run's
/// live count) and never checks `run_over_bound`. The run keeps the stale references it was
/// made with while its live count drops to 1.
#[test]
fn run_heads_moved_later_keep_the_stale_bound() {
    let n = 3000u64;
    let mut w: Wheel<u64> = Wheel::new();
    // One level-2 slot, [4096, 8192): n timers at 4106, one at 6096, 2n + 8 at 7096.
    let a: Vec<_> = (0..n).map(|i| w.insert(4106, i)).collect();
    w.insert(6096, n);
    let c: Vec<_> = (0..2 * n + 8).map(|i| w.insert(7096, i)).collect();
    for &k in &c {
        assert!(w.cancel(k).is_some()); // under the levels' bound: no sweep
    }
    assert!(w.poll(4096).is_none()); // the slot becomes the run: 2n + 8 stale <= 2 (n + 1) + 8
    for &k in &a {
        assert!(w.reset(k, 7596)); // later, within the run's span: they stay in the run
    }
    assert!(w.poll(4106).is_none()); // the run reaches them: all filed again
    for &k in &a {
        assert!(w.cancel(k).is_some());
    }
    w.insert(0, u64::MAX);
    assert_eq!(w.poll(4106).map(|e| e.value), Some(u64::MAX)); // applies pending unlinks
    let s = w.stats();
    assert_eq!(s.live, 1);
    // WheelStats::stale: at most live + run + 8 x 706 <= 2 x live + 8 x 706 (run <= live).
    assert!(s.stale <= 2 * s.live + 8 * 706, "{s:?}");
}
