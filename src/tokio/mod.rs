//! Layer 5: tokio integration. (Being built: issue 5.)
