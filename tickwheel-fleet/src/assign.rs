//! Placement by rendezvous hashing and the owner-key transactions.
