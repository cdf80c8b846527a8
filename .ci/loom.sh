#!/usr/bin/env bash
# loom: runs the models of the scheduler's atomics and locks (the tests named `loom_*`,
# in src/sync/tests/loom.rs; see src/loom.rs) under every interleaving loom explores, within
# LOOM_MAX_PREEMPTIONS preemptions per run.
#
# A target directory of its own: `--cfg loom` changes every crate's flags, so sharing
# target/ would rebuild everything on each switch. Measured on 2 shared cores from an empty
# target/loom: 2m35s to build (dev-dependencies included), 60 s for the models at the
# default bound of 20 (the dispatcher's shutdown takes nearly all of it), 3m36s in all.
# No feature is needed: the stream's waker model runs on the signal the stream arms.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
export RUSTFLAGS="--cfg loom"
export CARGO_TARGET_DIR=target/loom
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-20}"
cargo test --release --lib loom -- --test-threads=1
