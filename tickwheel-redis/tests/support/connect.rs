//! Connecting one member with the default options.

use tickwheel_redis::{Error, Member, Options, Protocol};
use tickwheel_testkit::redis::start_for_test_with;

/// [`Protocol::connect`] of a member named `a` (a fresh boot) to `url` with the default
/// options: the connection, or why it was refused.
pub async fn connect_a(url: &str) -> Result<Protocol, Error> {
    Protocol::connect(url, Member::new_boot("a"), Options::default()).await
}

/// Against a server of the test's own requiring `password`: the text (`Display | Debug`) of
/// the error a connect with the URL user info `wrong` (`user:password`) gets, and the `Debug`
/// of the member a connect with the user info `right` gives. `None`: skip (no redis-server).
pub async fn wrong_and_right(password: &str, wrong: &str, right: &str) -> Option<(String, String)> {
    let server = start_for_test_with(&[("requirepass", password)])?;
    let url = |userinfo: &str| format!("redis://{userinfo}@127.0.0.1:{}/", server.port());
    let err = connect_a(&url(wrong)).await.expect_err("wrong password");
    let p = connect_a(&url(right)).await.expect("right password");
    Some((format!("{err} | {err:?}"), format!("{p:?}")))
}
