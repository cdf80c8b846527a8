//! The shard's invariant checker (test-only).

use std::hash::Hash;

use hashbrown::HashSet;

use super::{Place, ShardState};

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> ShardState<Q, K, T> {
    /// Walks the whole shard and asserts that the stores, the in-flight count, the queue
    /// lists and the done list (`done`, not settled yet) agree. Test-only.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self, done: &[u32]) {
        let mut seen = HashSet::new();
        for &index in done {
            assert!(seen.insert(index), "an entry is done once");
            let entry = self.entries.get(index as usize).and_then(Option::as_ref);
            assert!(
                entry.is_some_and(|e| e.place == Place::InFlight),
                "a done entry stays in flight until settled"
            );
        }
        let used = self.entries.iter().flatten().count();
        assert_eq!(used, self.ids.len(), "one entry per id");
        assert_eq!(
            used + self.free_entries.len(),
            self.entries.len(),
            "every entry is used or free"
        );
        for (id, index) in self.ids.iter() {
            let entry = self.entry(index);
            assert!(entry.id == *id, "an id's entry carries that id");
            match entry.place {
                Place::Wheel(key) => assert_eq!(self.wheel.get(key), Some(&index)),
                Place::Staged => assert_eq!(self.staged.get(&entry.order()), Some(&index)),
                Place::Polled => panic!("no entry stays polled outside a pop_due"),
                Place::InFlight => assert!(entry.payload.is_none(), "in flight: the Due has it"),
                Place::Parked => {
                    let q = self.queue_rec(entry.queue);
                    assert!(
                        q.held || q.flow.is_some(),
                        "parked only while held or limited"
                    );
                    assert_eq!(q.parked.get(&entry.order()), Some(&index));
                }
                Place::Forwarded => {
                    assert!(entry.payload.is_some(), "forwarded: held with its value");
                    let name = &self.queue_rec(entry.queue).name;
                    assert!(self.frozen.contains(name), "forwarded only while frozen");
                }
            }
        }
        let in_flight = self.entries.iter().flatten();
        let in_flight = in_flight.filter(|e| e.place == Place::InFlight).count();
        assert_eq!(in_flight, self.in_flight, "in-flight count");
        let forwarded = self.entries.iter().flatten();
        let forwarded = forwarded.filter(|e| e.place == Place::Forwarded).count();
        assert_eq!(forwarded, self.forwarded, "forwarded count");
        let parked = self.entries.iter().flatten();
        let parked = parked.filter(|e| e.place == Place::Parked).count();
        assert_eq!(parked, self.parked, "parked count");
        assert_eq!(
            self.wheel.len() + self.staged.len() + self.parked,
            self.pending_len()
        );
        let mut members = 0;
        for (name, &rec) in &self.queue_ids {
            let q = self.queue_rec(rec);
            assert!(q.name == *name, "a queue's record carries its name");
            let list: Vec<_> = self.members(q.head).collect();
            let flying = list.iter().filter(|e| e.place == Place::InFlight).count();
            let parked = list.iter().filter(|e| e.place == Place::Forwarded).count();
            assert!(!list.is_empty(), "a listed queue has members");
            assert_eq!(
                q.held,
                self.held.contains(name),
                "the record copies the mark"
            );
            assert_eq!(
                (q.pending, q.in_flight, q.forwarded),
                (list.len() - flying - parked, flying, parked)
            );
            if self.frozen.contains(name) {
                assert_eq!(q.pending, 0, "a frozen queue has no pending member");
            }
            assert!(
                list.iter().all(|e| e.queue == rec),
                "members point at their queue"
            );
            members += list.len();
        }
        assert_eq!(members, self.ids.len(), "every id is a member of one queue");
    }
}
