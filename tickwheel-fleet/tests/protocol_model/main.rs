//! The owner-record protocol and the fleet's lease timing, model-checked with `stateright`
//! (the model: `tests/protocol_model/model/`). Every state up to the model's horizon is explored
//! (breadth-first): custody, one dispatching owner at a time, no write by a fenced epoch and no
//! record taken from a holder within its lease hold in all of them; a survivor's takeover and a
//! handoff are reachable. Each planted protocol fault is found.

mod model;

use model::{Faults, Mode, ProtocolModel};
use stateright::{Checker, HasDiscoveries, Model};

const ALWAYS: [&str; 4] = [
    "custody: every timer in exactly one place",
    "one dispatching owner at a time",
    "no write by a fenced epoch",
    "no record taken from a holder within its lease",
];

/// Explores every state of `model`; returns the names of the properties with a discovery
/// (a counterexample for "always", an example for "sometimes").
/// With `stop_at`, the search ends once that property has a discovery (breadth-first: a
/// shortest counterexample).
fn check(name: &str, mut model: ProtocolModel, stop_at: Option<&'static str>) -> Vec<&'static str> {
    if let Some(h) = std::env::var("MODEL_HORIZON")
        .ok()
        .and_then(|h| h.parse().ok())
    {
        model.horizon = h;
    }
    let horizon = model.horizon;
    let mut builder = model.checker().threads(2);
    if let Some(p) = stop_at {
        builder = builder.finish_when(HasDiscoveries::AnyOf([p].into_iter().collect()));
    }
    let checker = builder.spawn_bfs().join();
    let found: Vec<&'static str> = checker.discoveries().keys().copied().collect();
    eprintln!(
        "{name}: horizon {horizon} ticks, {} states ({} unique), depth {}; found: {found:?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
    );
    for p in ALWAYS {
        if let Some(path) = checker.discovery(p) {
            eprintln!("counterexample to {p:?}:");
            for (state, action) in path.into_vec() {
                eprintln!(
                    "  t={} robbed={} stale={} rec={:?} {action:?}",
                    state.now, state.robbed, state.stale_write, state.record
                );
            }
        }
    }
    found
}

fn assert_holds(found: &[&str]) {
    for p in ALWAYS {
        assert!(!found.contains(&p), "{p} violated");
    }
    assert!(found.contains(&"a survivor dispatches after the owner crashed"));
    assert!(found.contains(&"the queue moves to B"));
}

#[test]
fn handoff_protocol_holds() {
    assert_holds(&check("handoff", ProtocolModel::new(Mode::Handoff), None));
}

#[test]
fn fleet_protocol_holds() {
    assert_holds(&check("fleet", ProtocolModel::new(Mode::Fleet), None));
}

#[test]
fn skipped_epoch_check_is_caught() {
    for mode in [Mode::Handoff, Mode::Fleet] {
        let mut m = ProtocolModel::new(mode);
        m.faults = Faults {
            skip_epoch_check: true,
            ..Faults::default()
        };
        if mode == Mode::Fleet {
            // A stale `adopt` needs two generations of the owner key: one member's adopt left
            // in the network, its lease lapsed, the key deleted and taken by the other.
            m.horizon = 10;
        }
        let p = "no write by a fenced epoch";
        let found = check(
            &format!("{mode:?}, scripts skip the epoch check"),
            m,
            Some(p),
        );
        assert!(found.contains(&p), "{mode:?}: {found:?}");
    }
}

#[test]
fn grace_of_zero_is_caught() {
    let mut m = ProtocolModel::new(Mode::Fleet);
    m.grace = 0;
    let p = "one dispatching owner at a time";
    let found = check("fleet, grace 0", m, Some(p));
    assert!(found.contains(&p), "{found:?}");
}

#[test]
fn reclaim_without_lease_check_is_caught() {
    let mut m = ProtocolModel::new(Mode::Handoff);
    m.faults = Faults {
        reclaim_ignores_lease: true,
        ..Faults::default()
    };
    let p = "no record taken from a holder within its lease";
    let found = check("handoff, reclaim ignores the lease", m, Some(p));
    assert!(found.contains(&p), "{found:?}");
}
