//! Layer 3: `IndexedWheel<K, T>`, a wheel addressed by the caller's id. (Being built: issue 3.)
