//! The proof programs of tickwheel's scale-out crates. Nothing here is a library: the
//! package is not published, and its examples are the programs.
//!
//! - `cargo run --release -p tickwheel-proofs --example handoff`: the custody proof of
//!   `tickwheel-redis`. A source and a target host, child processes, hand scheduled queues
//!   over through a redis-server of their own, killed at the protocol steps asked for. It
//!   ends with `custody: OK (…)` when every timer is held or delivered exactly once.
//! - `cargo run --release -p tickwheel-proofs --example fleet`: the ownership proof of
//!   `tickwheel-fleet`. Member processes share queues through etcd leases and Redis
//!   handoffs, through joins, orderly leaves, `kill -9`, SIGSTOP past the lease, partitions
//!   and restarts of the servers. It ends with `ownership: OK (…)` when no queue had two
//!   owners and every timer was delivered exactly once.
//!
//! Each program's `--help` lists its scenarios, faults and planted bugs.

#![forbid(unsafe_code)]
