//! Assertions over what a test collected.

use std::fmt::Debug;

/// Asserts that `v` is empty; else panics saying how many it holds, `what` they are, and
/// the first five.
#[track_caller]
pub fn assert_none<T: Debug>(v: &[T], what: &str) {
    assert!(
        v.is_empty(),
        "{} {what}, e.g. {:?}",
        v.len(),
        &v[..v.len().min(5)]
    );
}
