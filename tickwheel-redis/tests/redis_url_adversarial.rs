//! Redis URLs with hostile passwords (`@`, `:`, `%40`, unicode, empty user): `redact_url`
//! echoes what was typed with only the password hidden, and no error of `Protocol::connect`
//! repeats the password, typed or percent-decoded.

mod support;

use support::connect::{connect_a, wrong_and_right};

use tickwheel_redis::{Error, redact_url};

#[test]
fn redact_url_hides_only_the_password() {
    for (typed, shown) in [
        ("redis://u:p@ss@db:6379/0", "redis://u:***@db:6379/0"),
        ("redis://u:p:a:ss@db", "redis://u:***@db"),
        ("redis://u:p%40ss@db/1", "redis://u:***@db/1"),
        ("redis://:pässwörd@db", "redis://:***@db"),
        ("redis://üser:pässwörd@dß:1/", "redis://üser:***@dß:1/"),
        ("redis://:@db", "redis://:***@db"),
        ("redis://u:p/a?s#s@db:1/2", "redis://u:***@db:1/2"),
        (
            "rediss://u:pw@db/0?password=pw2&x=1",
            "rediss://u:***@db/0?password=***&x=1",
        ),
        ("u:p@ss@db", "u:***@db"),
        ("redis://db:6379", "redis://db:6379"),
        ("", ""),
    ] {
        assert_eq!(redact_url(typed), shown, "{typed}");
    }
}

#[tokio::test]
async fn unparsable_urls_never_repeat_a_hostile_password() {
    for (typed, secret, decoded) in [
        ("redis://u:pw%40sec-1@[::1", "pw%40sec-1", "pw@sec-1"),
        ("redis://:pw@sec-2@[::1", "pw@sec-2", "pw@sec-2"),
        ("redis://u:pw:sec-3@[::1", "pw:sec-3", "pw:sec-3"),
        ("redis://u:pwsëc-4@[::1", "pwsëc-4", "pwsëc-4"),
        ("u:pw%3Asec-5@db:notaport", "pw%3Asec-5", "pw:sec-5"),
    ] {
        let err = connect_a(typed).await.expect_err("not a usable URL");
        let text = format!("{err} | {err:?}");
        assert!(!text.contains(secret), "{typed}: {text}");
        assert!(!text.contains(decoded), "{typed}: {text}");
        if let Error::Url { .. } = err {
            assert!(text.contains(&redact_url(typed)), "{typed}: {text}");
        }
    }
}

/// A wrong password holding `@` and `:`, given percent-encoded, against a real server.
#[tokio::test]
async fn a_wrong_encoded_password_never_shows() {
    let Some((text, debug)) = wrong_and_right(
        "right@pw:1",
        "default:wr%40ng%3Apw",
        "default:right%40pw%3A1",
    )
    .await
    else {
        return;
    };
    for secret in ["wr%40ng%3Apw", "wr@ng:pw", "right@pw:1"] {
        assert!(!text.contains(secret), "{text}");
    }
    assert!(
        !debug.contains("right%40pw%3A1") && !debug.contains("right@pw:1"),
        "{debug}"
    );
}
