//! Layer 4: the concurrent scheduler. (Being built: issue 3.)
