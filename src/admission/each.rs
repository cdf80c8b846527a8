//! Running a batch of callers' code to the end when one call in it panics.
//!
//! After the queue lock is released, an operation wakes the waiters it resolved and tells the
//! queues short of the global limit (whose grant passes wake theirs). A waker may panic. The
//! resolutions are already written, so skipping the rest of the batch would lose nothing from
//! the counts, but a waiter granted or expired would never be woken, and a queue never told
//! would keep a waiter that fits waiting until its deadline.
//!
//! **Why a drop guard.** The calls run plainly on the way that does not panic: a guard's cost
//! is one look at an exhausted iterator, nothing per call. Only when a call panics does the
//! guard, while that panic unwinds, run the calls left. Each of those runs under
//! `catch_unwind`: a second panic escaping a destructor during unwinding aborts the process.
//! The second panic is dropped (its message was printed by the hook); the first goes on to
//! the caller, as it would have without the guard. `AssertUnwindSafe` is sound here: each
//! call owns what it consumes (a waker, a thread handle, a queue's `Weak`), and no lock is
//! held nor any count half-written when they run, so a caught panic leaves nothing of ours
//! torn for the next call to see. Catching every call instead would cost a landing pad per
//! call and would have to resume the first panic by hand. A batch run while a panic already
//! unwinds (a permit dropped by it) goes through the guard's path from its first call.
//!
//! The guards: [`each`] and `DropLast` here, `Finish` (`finish.rs`, a call's wake-ups and
//! tells) and the grant-pass runner (`Running`, `signal.rs`, which runs the passes owed).
//! All run what is left through [`while_unwinding`].

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Calls `f` on every item, in order. If a call panics, the items left are still handed to
/// `f` (one at a time, any further panic dropped), and then the first panic unwinds on.
/// Called while a panic unwinds, every call is made as the items left are.
pub(super) fn each<I: IntoIterator>(items: I, f: impl FnMut(I::Item)) {
    let mut rest = Rest {
        items: items.into_iter(),
        f,
    };
    if std::thread::panicking() {
        return; // `rest`'s drop makes every call, catching: a panic escaping now would abort
    }
    for item in rest.items.by_ref() {
        (rest.f)(item);
    }
}

/// The items not yet handed to `f`: none unless a call panicked.
struct Rest<I: Iterator, F: FnMut(I::Item)> {
    items: I,
    f: F,
}

impl<I: Iterator, F: FnMut(I::Item)> Drop for Rest<I, F> {
    fn drop(&mut self) {
        for item in self.items.by_ref() {
            let f = &mut self.f;
            while_unwinding(|| f(item));
        }
    }
}

/// A value dropped at the end of its scope, after the calls that follow it there: if one of
/// them panics, it is dropped while that panic unwinds, a panic of its own drop caught. For
/// a waker, whose drop may run any code.
#[cfg(feature = "tokio")]
pub(super) struct DropLast<T>(pub(super) Option<T>);

#[cfg(feature = "tokio")]
impl<T> Drop for DropLast<T> {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            if std::thread::panicking() {
                while_unwinding(|| drop(value));
            } else {
                drop(value);
            }
        }
    }
}

/// Runs `f` from a guard's `drop` while a first panic unwinds: a panic of `f` is caught and
/// dropped (see the module doc), and the first one unwinds on.
pub(super) fn while_unwinding(f: impl FnOnce()) {
    if let Err(second) = catch_unwind(AssertUnwindSafe(f)) {
        // A payload's own drop may panic too, which would abort here: dropped under a catch,
        // and a payload of that one forgotten (a leak of one box, only on that path).
        if let Err(third) = catch_unwind(AssertUnwindSafe(|| drop(second))) {
            std::mem::forget(third);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn every_item_is_handed_over_and_the_first_panic_goes_on() {
        let seen = RefCell::new(Vec::new());
        let unwound = catch_unwind(AssertUnwindSafe(|| {
            each(0..6, |i| {
                seen.borrow_mut().push(i);
                if i % 2 == 1 {
                    panic!("item {i}");
                }
            });
        }));
        let payload = unwound.expect_err("the panic reaches the caller");
        assert_eq!(
            payload.downcast_ref::<String>().map(String::as_str),
            Some("item 1")
        );
        assert_eq!(*seen.borrow(), [0, 1, 2, 3, 4, 5]);
    }

    /// Called from a destructor while a panic unwinds: a call's panic is caught (escaping,
    /// it would abort), and every item is handed over.
    #[test]
    fn while_a_panic_unwinds_every_item_is_handed_over() {
        struct Calls<'a>(&'a RefCell<Vec<i32>>);
        impl Drop for Calls<'_> {
            fn drop(&mut self) {
                each(0..3, |i| {
                    self.0.borrow_mut().push(i);
                    assert_ne!(i, 1, "a call that panics");
                });
            }
        }
        let seen = RefCell::new(Vec::new());
        let unwound = catch_unwind(AssertUnwindSafe(|| {
            let _calls = Calls(&seen);
            panic!("first");
        }));
        assert!(unwound.is_err());
        assert_eq!(*seen.borrow(), [0, 1, 2]);
    }
}
