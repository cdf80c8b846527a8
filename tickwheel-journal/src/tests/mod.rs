//! Tests that need the crate's insides: the journal over a simulated disk.

mod disk;
mod power_loss;
