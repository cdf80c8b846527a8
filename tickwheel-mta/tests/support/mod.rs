//! What the tests of the `mta` example share, included by each as `mod support;`: the
//! example (built with the test's profile and this package's `tokio` feature when the test
//! has it), a small workload, and reading its output.
#![allow(dead_code)] // each test uses its own subset

use tickwheel_testkit::example::Example;
pub use tickwheel_testkit::example::text;

/// The `mta` example of this package.
pub const MTA: Example = if cfg!(feature = "tokio") {
    Example::new("tickwheel-mta", "mta").with_features(&["tokio"])
} else {
    Example::new("tickwheel-mta", "mta")
};

/// A small workload of `messages` over 300 queues in 2 h, suspending `suspend_rate` queues an
/// hour: a few seconds a run in a debug build.
pub fn workload(messages: &'static str, suspend_rate: &'static str) -> Vec<&'static str> {
    vec![
        "--messages",
        messages,
        "--queues",
        "300",
        "--duration",
        "2h",
        "--arrival",
        "30m",
        "--bounce-rate",
        "20",
        "--drain-rate",
        "2",
        "--suspend-rate",
        suspend_rate,
    ]
}
