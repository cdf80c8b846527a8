//! Member registration under a lease.
