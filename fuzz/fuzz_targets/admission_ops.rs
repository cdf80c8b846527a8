//! Two `admission::WaitQueue`s sharing a global limit under an arbitrary sequence of
//! registrations (any amount and deadline, zero and too large included), cancellations and
//! detaches of live, granted, stale and foreign tickets, releases (too large included) and
//! time moving forwards and backwards. Checked after every step: no panic; capacity adds
//! up in each queue and in the global limit; every ticket resolves at most once, never
//! expires before its deadline, and is granted only what fits.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use tickwheel::admission::{Cancel, Limit, Order, Outcome, Resolved, Ticket, WaitQueue};

#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
enum Seen {
    #[default]
    Waiting,
    Granted,
    Ended,
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, ops)) = data.split_first() else {
        return;
    };
    let order = if head & 1 == 0 {
        Order::Strict
    } else {
        Order::Passing
    };
    let caps = [u64::from(head >> 4) + 1, u64::from(head & 0x0e) + 1];
    let global_cap = u64::from(head >> 2) % 24 + 1;
    let global = Limit::new(global_cap);
    let mut queues = [
        WaitQueue::<u32>::with_options(caps[0], Some(global.clone()), order),
        WaitQueue::<u32>::with_options(caps[1], Some(global.clone()), order),
    ];
    let mut tickets: Vec<(usize, Ticket, u64)> = Vec::new();
    let mut seen: HashMap<u32, Seen> = HashMap::new();
    let mut out: Vec<Resolved<u32>> = Vec::new();
    let mut next = 0u32;
    for chunk in ops.chunks(3) {
        let [op, a, b] = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let q = usize::from(op >> 7);
        match op % 6 {
            0 | 1 => {
                let amount = u64::from(a % 20);
                let deadline = queues[q]
                    .now()
                    .saturating_add(u64::from(b))
                    .wrapping_sub(u64::from(op >> 6 & 1) * 3);
                if let Ok(t) = queues[q].register(amount, deadline, next, &mut out) {
                    tickets.push((q, t, amount));
                    seen.entry(next).or_default();
                }
                next += 1;
            }
            2 if !tickets.is_empty() => {
                let (tq, t, _) = tickets[usize::from(a) % tickets.len()];
                // Sometimes on the wrong queue: a foreign ticket.
                let on = if b & 1 == 1 { 1 - tq } else { tq };
                match queues[on].cancel(t, &mut out) {
                    Cancel::Cancelled(id) => {
                        assert_eq!(on, tq, "a foreign ticket cancelled nothing");
                        let s = seen.insert(id, Seen::Ended);
                        assert_eq!(s, Some(Seen::Waiting), "cancelled once, while waiting");
                    }
                    Cancel::Released(_) | Cancel::NotFound => {}
                }
            }
            3 if !tickets.is_empty() => {
                let (tq, t, amount) = tickets[usize::from(a) % tickets.len()];
                if let Some(got) = queues[tq].detach(t) {
                    assert_eq!(got, amount);
                }
            }
            4 => {
                let _ = queues[q].release(u64::from(a % 24), &mut out);
            }
            _ => {
                let now = queues[0]
                    .now()
                    .wrapping_add(u64::from(a))
                    .wrapping_sub(u64::from(b & 3));
                queues[0].advance(now, &mut out);
                queues[1].advance(now, &mut out);
            }
        }
        queues
            .iter_mut()
            .for_each(|queue| queue.grant_pass(&mut out));
        for r in out.drain(..) {
            let s = seen.entry(r.waiter).or_default();
            match r.outcome {
                Outcome::Granted => {
                    assert_eq!(*s, Seen::Waiting, "granted once, only while waiting");
                    *s = Seen::Granted;
                }
                Outcome::Expired { deadline, at } => {
                    assert!(at >= deadline, "never early");
                    assert_eq!(*s, Seen::Waiting, "expired once, only while waiting");
                    *s = Seen::Ended;
                }
            }
        }
        let mut taken = 0;
        for (i, queue) in queues.iter().enumerate() {
            assert_eq!(
                queue.available() + queue.held() + queue.detached(),
                caps[i],
                "local units add up"
            );
            taken += queue.held() + queue.detached();
        }
        assert_eq!(
            global.available() + taken,
            global_cap,
            "global units add up"
        );
    }
});
