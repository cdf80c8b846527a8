//! Connecting one member with the default options.

use tickwheel_redis::{Error, Member, Options, Protocol};

/// [`Protocol::connect`] of a member named `a` (a fresh boot) to `url` with the default
/// options: the connection, or why it was refused.
pub async fn connect_a(url: &str) -> Result<Protocol, Error> {
    Protocol::connect(url, Member::new_boot("a"), Options::default()).await
}
