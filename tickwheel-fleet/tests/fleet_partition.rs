//! Runs the `fleet` example's `--scenario partition` (members under user ids of their own,
//! links cut and healed by nftables rules): it must end `ownership: OK`, and with the planted
//! fault (dispatch without the lease check: the member cut from etcd goes on dispatching while
//! the others adopt its queues) `ownership: FAILED` with an overlap. The rules need root and
//! `nft`: outside CI (`CI` unset) their absence skips the test with the reason; in CI it fails.

mod support;

use support::{FLEET, SERVERS, SMALL, overlap_caught, ownership_ok};
use tickwheel_testkit::example::{can_run, missing};

const PARTITION: [&str; 2] = ["--scenario", "partition"];

/// Why partitions cannot run here, if they cannot.
fn why_not() -> Option<String> {
    let mut why = Vec::new();
    if !rustix::process::geteuid().is_root() {
        why.push("nftables rules need root".to_owned());
    }
    why.extend(missing(&[("nft", "nftables")]));
    why.extend(missing(SERVERS));
    (!why.is_empty()).then(|| why.join("; "))
}

#[test]
fn partitions_keep_one_owner_and_the_planted_fault_is_caught() {
    if !can_run(why_not()) {
        return;
    }
    let out = FLEET.run(SMALL.iter().chain(&PARTITION));
    let last = ownership_ok(&out);
    assert!(out.status.success(), "{last}");

    let out = FLEET.run(
        SMALL
            .iter()
            .chain(&PARTITION)
            .chain(&["--plant", "no-lease-check"]),
    );
    overlap_caught(&out);
}
