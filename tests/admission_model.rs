//! The wait queue against a sequential model: two queues sharing a global limit, random
//! registrations, cancellations (of live, granted and stale tickets), detaches, releases
//! and time advancing. Each operation must resolve the same tickets, the same way, in the
//! same order, and leave the same capacity everywhere.

use proptest::prelude::*;
use tickwheel::admission::{
    Cancel, Limit, Order, Outcome, RegisterError, Resolved, Ticket, WaitQueue,
};

#[derive(Debug, Clone)]
enum Op {
    Register { q: usize, amount: u64, ttl: u64 },
    Cancel { pick: usize },
    Detach { pick: usize },
    Release { q: usize, amount: u64 },
    Advance { by: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 0..12u64, 0..40u64).prop_map(|(q, amount, ttl)| Op::Register { q, amount, ttl }),
        2 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Detach { pick }),
        1 => (0..2usize, 0..12u64).prop_map(|(q, amount)| Op::Release { q, amount }),
        2 => (0..20u64).prop_map(|by| Op::Advance { by }),
    ]
}

/// What happened to a ticket, by its id: granted, expired (deadline, at) or cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Granted(u32),
    Expired(u32, u64, u64),
    Cancelled(u32),
    Released(u32, u64),
}

#[derive(Debug, Clone)]
struct MTicket {
    id: u32,
    amount: u64,
    deadline: u64,
}

#[derive(Debug)]
struct MQueue {
    cap: u64,
    available: u64,
    waiting: Vec<MTicket>,
    granted: Vec<(u32, u64)>,
    detached: u64,
}

#[derive(Debug)]
struct Model {
    order: Order,
    global_cap: u64,
    global: u64,
    now: u64,
    queues: [MQueue; 2],
}

impl Model {
    fn fits(&self, q: usize, amount: u64) -> bool {
        amount <= self.queues[q].available && amount <= self.global
    }

    fn take(&mut self, q: usize, amount: u64) {
        self.queues[q].available -= amount;
        self.global -= amount;
    }

    fn grant_pass(&mut self, q: usize, ev: &mut Vec<Event>) {
        let mut i = 0;
        while i < self.queues[q].waiting.len() && self.queues[q].available > 0 {
            let t = self.queues[q].waiting[i].clone();
            if self.fits(q, t.amount) {
                self.take(q, t.amount);
                self.queues[q].waiting.remove(i);
                self.queues[q].granted.push((t.id, t.amount));
                ev.push(Event::Granted(t.id));
            } else if self.order == Order::Strict {
                break;
            } else {
                i += 1;
            }
        }
    }

    fn register(
        &mut self,
        q: usize,
        id: u32,
        amount: u64,
        deadline: u64,
        ev: &mut Vec<Event>,
    ) -> Result<(), RegisterError> {
        if amount == 0 {
            return Err(RegisterError::ZeroAmount);
        }
        let limit = self.queues[q].cap.min(self.global_cap);
        if amount > limit {
            return Err(RegisterError::TooLarge { amount, limit });
        }
        let may_pass = self.queues[q].waiting.is_empty() || self.order == Order::Passing;
        if may_pass && self.fits(q, amount) {
            self.take(q, amount);
            self.queues[q].granted.push((id, amount));
            ev.push(Event::Granted(id));
            return Ok(());
        }
        if deadline <= self.now {
            return Err(RegisterError::DeadlinePassed {
                deadline,
                now: self.now,
            });
        }
        self.queues[q].waiting.push(MTicket {
            id,
            amount,
            deadline,
        });
        Ok(())
    }

    fn give_back(&mut self, q: usize, amount: u64, ev: &mut Vec<Event>) {
        self.queues[q].available += amount;
        self.global += amount;
        self.grant_pass(q, ev);
    }

    fn cancel(&mut self, q: usize, id: u32, ev: &mut Vec<Event>) {
        if let Some(i) = self.queues[q].waiting.iter().position(|t| t.id == id) {
            self.queues[q].waiting.remove(i);
            ev.push(Event::Cancelled(id));
            if i == 0 || self.order == Order::Passing {
                self.grant_pass(q, ev);
            }
        } else if let Some(i) = self.queues[q].granted.iter().position(|g| g.0 == id) {
            let (_, amount) = self.queues[q].granted.remove(i);
            ev.push(Event::Released(id, amount));
            self.give_back(q, amount, ev);
        }
    }

    fn detach(&mut self, q: usize, id: u32) -> Option<u64> {
        let i = self.queues[q].granted.iter().position(|g| g.0 == id)?;
        let (_, amount) = self.queues[q].granted.remove(i);
        self.queues[q].detached += amount;
        Some(amount)
    }

    fn advance(&mut self, q: usize, now: u64, ev: &mut Vec<Event>) {
        self.now = self.now.max(now);
        // Deadline order, then registration order (ids rise with registration).
        let mut due: Vec<MTicket> = self.queues[q]
            .waiting
            .iter()
            .filter(|t| t.deadline <= self.now)
            .cloned()
            .collect();
        due.sort_by_key(|t| (t.deadline, t.id));
        let mut head_went = false;
        for t in due {
            let i = self.queues[q]
                .waiting
                .iter()
                .position(|w| w.id == t.id)
                .unwrap();
            head_went |= i == 0;
            self.queues[q].waiting.remove(i);
            ev.push(Event::Expired(t.id, t.deadline, self.now));
        }
        if head_went || self.order == Order::Passing {
            self.grant_pass(q, ev);
        }
    }
}

fn events(out: &mut Vec<Resolved<u32>>) -> Vec<Event> {
    out.drain(..)
        .map(|r| match r.outcome {
            Outcome::Granted => Event::Granted(r.waiter),
            Outcome::Expired { deadline, at } => Event::Expired(r.waiter, deadline, at),
        })
        .collect()
}

fn run(order: Order, caps: (u64, u64, u64), ops: Vec<Op>) -> Result<(), TestCaseError> {
    let global = Limit::new(caps.2);
    let mut real = [
        WaitQueue::<u32>::with_options(caps.0, Some(global.clone()), order),
        WaitQueue::<u32>::with_options(caps.1, Some(global.clone()), order),
    ];
    let mq = |cap| MQueue {
        cap,
        available: cap,
        waiting: Vec::new(),
        granted: Vec::new(),
        detached: 0,
    };
    let mut model = Model {
        order,
        global_cap: caps.2,
        global: caps.2,
        now: 0,
        queues: [mq(caps.0), mq(caps.1)],
    };
    let mut handed_out: Vec<(usize, u32, Ticket)> = Vec::new();
    let mut next_id = 0u32;
    let mut out = Vec::new();
    for op in ops {
        let mut want = Vec::new();
        let mut got = Vec::new();
        // The queue the operation is on; the other one gets a grant pass afterwards (what
        // the thread-safe queue's signal does when global capacity comes back).
        let q = match op {
            Op::Register { q, amount, ttl } => {
                let id = next_id;
                next_id += 1;
                let deadline = model.now + ttl;
                let r = real[q].register(amount, deadline, id, &mut out);
                let m = model.register(q, id, amount, deadline, &mut want);
                prop_assert_eq!(r.map(|_| ()), m);
                if let Ok(t) = r {
                    handed_out.push((q, id, t));
                }
                q
            }
            Op::Cancel { pick } | Op::Detach { pick } if handed_out.is_empty() => {
                let _ = pick;
                continue;
            }
            Op::Cancel { pick } => {
                let (q, id, t) = handed_out[pick % handed_out.len()];
                match real[q].cancel(t, &mut out) {
                    Cancel::Cancelled(w) => got.push(Event::Cancelled(w)),
                    Cancel::Released(a) => got.push(Event::Released(id, a)),
                    Cancel::NotFound => {}
                }
                model.cancel(q, id, &mut want);
                q
            }
            Op::Detach { pick } => {
                let (q, id, t) = handed_out[pick % handed_out.len()];
                prop_assert_eq!(real[q].detach(t), model.detach(q, id));
                q
            }
            Op::Release { q, amount } => {
                let r = real[q].release(amount, &mut out);
                prop_assert_eq!(r.is_ok(), amount <= model.queues[q].detached);
                if r.is_ok() {
                    model.queues[q].detached -= amount;
                    model.give_back(q, amount, &mut want);
                }
                q
            }
            Op::Advance { by } => {
                let now = model.now + by;
                real[0].advance(now, &mut out);
                model.advance(0, now, &mut want);
                got.extend(events(&mut out));
                real[1].advance(now, &mut out);
                model.advance(1, now, &mut want);
                0
            }
        };
        got.extend(events(&mut out));
        let other = 1 - q;
        real[other].grant_pass(&mut out);
        model.grant_pass(other, &mut want);
        got.extend(events(&mut out));
        // Cancel answers come before the grants they cause, in both.
        prop_assert_eq!(&got, &want);
        for (i, rq) in real.iter().enumerate() {
            let m = &model.queues[i];
            prop_assert_eq!(rq.available(), m.available);
            prop_assert_eq!(rq.waiting(), m.waiting.len());
            prop_assert_eq!(rq.held(), m.granted.iter().map(|g| g.1).sum::<u64>());
            prop_assert_eq!(
                rq.available() + rq.held() + rq.detached(),
                m.cap,
                "local units add up"
            );
        }
        prop_assert_eq!(global.available(), model.global);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn strict_matches_the_model(caps in (1..16u64, 1..16u64, 1..24u64), ops in proptest::collection::vec(op(), 1..120)) {
        run(Order::Strict, caps, ops)?;
    }

    #[test]
    fn passing_matches_the_model(caps in (1..16u64, 1..16u64, 1..24u64), ops in proptest::collection::vec(op(), 1..120)) {
        run(Order::Passing, caps, ops)?;
    }
}
