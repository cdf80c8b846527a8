//! Runs `examples/drain.rs` (two producers, the thread dispatcher, a draining operator) at a
//! smaller size and checks the counts it prints: every message delivered or drained, exactly
//! once.

#[allow(dead_code)] // the example's `main` is not called here
#[path = "../examples/drain.rs"]
mod drain;

#[test]
fn drain_example_ends_every_message_exactly_once() {
    let c = drain::run(4_000);
    assert_eq!((c.lost, c.doubled), (0, 0), "{c:?}");
    assert_eq!(c.delivered + c.drained, c.scheduled, "{c:?}");
    assert!(
        c.drained > 0 && c.delivered > 0 && c.drains > 0,
        "both ends were exercised: {c:?}"
    );
}
