//! Connecting: URL redaction, the server's durability checks, and what a failed call or
//! connection becomes ([`Error::Unavailable`] when a retry may pass).

use crate::error::Error;
use redis::aio::ConnectionManager;

/// `url` with its password replaced by `***`: the password of `user:pass@`, a lone `pass@`
/// user-info, and the `pass`/`password` query parameters (`redis+unix:///s.sock?pass=...`).
/// Text without a `scheme://` is read the same way (user-info up to the last `@`, then the
/// host, path and query), so a mistyped URL is echoed as typed with only its password
/// hidden. O(length).
///
/// # Example
/// ```
/// use tickwheel_redis::redact_url;
/// assert_eq!(redact_url("rediss://app:s3cret@db:6380/0"), "rediss://app:***@db:6380/0");
/// assert_eq!(redact_url("redis://:s3cret@db/"), "redis://:***@db/");
/// assert_eq!(redact_url("notaurl"), "notaurl");
/// assert_eq!(redact_url("app:s3cret@db"), "app:***@db");
/// ```
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(scheme_end) => url.split_at(scheme_end + 3),
        None => ("", url),
    };
    // The user information ends at the *last* `@`: a password typed unencoded may hold `/`,
    // `?`, `#` or `@`, and must not be taken for the start of the path. (An `@` that is only
    // in the path or query then hides more than needed: never less.)
    let (userinfo, after) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let host_end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (host, tail) = after.split_at(host_end);
    let authority = match userinfo {
        Some(userinfo) => match userinfo.find(':') {
            Some(colon) => format!("{}:***@{host}", &userinfo[..colon]),
            None => format!("***@{host}"),
        },
        None => host.to_owned(),
    };
    let tail = match tail.find('?') {
        Some(q) => {
            let (path, query) = tail.split_at(q + 1);
            let query: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _))
                        if k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password") =>
                    {
                        format!("{k}=***")
                    }
                    _ => kv.to_owned(),
                })
                .collect();
            format!("{path}{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}{authority}{tail}")
}

/// The password as typed in `url`'s user information (between the first `:` after `://` and
/// the last `@`), whether or not the URL parses: what an error about the URL must not repeat.
pub(crate) fn typed_password(url: &str) -> Option<&str> {
    let rest = url.find("://").map_or(url, |i| &url[i + 3..]);
    let userinfo = &rest[..rest.rfind('@')?];
    let (_, password) = userinfo.split_once(':')?;
    Some(password)
}

/// `text` with every occurrence of `secret` replaced by `***` (a client error may quote what
/// it was given).
pub(crate) fn scrub(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(s) if !s.is_empty() => text.replace(s, "***"),
        _ => text.to_owned(),
    }
}

/// Checks that the server is a primary with `appendonly yes` and `appendfsync always`.
/// Returns the problems found (empty when safe); a denied `CONFIG GET` is a problem too.
pub(crate) async fn durability_problems(
    conn: &mut ConnectionManager,
) -> Result<Vec<String>, redis::RedisError> {
    let mut problems = Vec::new();
    for (name, want) in [("appendonly", "yes"), ("appendfsync", "always")] {
        let got: Result<Vec<String>, _> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query_async(conn)
            .await;
        match got {
            Ok(pair) => match pair.get(1) {
                Some(v) if v == want => {}
                Some(v) => problems.push(format!("{name} is {v:?}, needs {want:?}")),
                None => problems.push(format!("CONFIG GET {name} returned nothing")),
            },
            // Unreachable, or still loading its AOF after a restart: the caller may retry.
            Err(e)
                if e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || matches!(
                        e.kind(),
                        redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
                    ) =>
            {
                return Err(e);
            }
            Err(e) => problems.push(format!(
                "cannot check {name} (CONFIG GET denied?): {e}; needs {want:?}"
            )),
        }
    }
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await?;
    let role = info
        .lines()
        .find_map(|l| l.strip_prefix("role:"))
        .map(str::trim);
    if role != Some("master") {
        problems.push(format!(
            "role is {}, needs a primary (master)",
            role.unwrap_or("unknown")
        ));
    }
    Ok(problems)
}

pub(crate) fn unsafe_server(url: &str, problems: &[String]) -> Error {
    Error::UnsafeServer {
        url: redact_url(url),
        problems: problems.join("; "),
    }
}

/// `text` with every copy of `url` redacted ([`redact_url`]).
pub(crate) fn scrub_url(text: &str, url: &str) -> String {
    if url.is_empty() {
        text.to_owned()
    } else {
        text.replace(url, &redact_url(url))
    }
}

/// A failed call's error: [`Error::Unavailable`] where a retry may succeed (I/O, timeouts,
/// a server loading or failing over), [`Error::Redis`] otherwise. The message never repeats
/// the password.
pub(crate) fn map_redis(e: redis::RedisError, url: &str, password: Option<&str>) -> Error {
    use redis::{ErrorKind, ServerErrorKind};
    let message = scrub(&e.to_string(), password);
    let transient = e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
            )
        );
    let url = url.to_owned();
    if transient {
        Error::Unavailable { url, message }
    } else {
        Error::Redis { url, message }
    }
}

/// A failed first connection: a refused certificate or a refused password will not pass on a
/// retry ([`Error::Tls`], [`Error::Redis`]); anything else may ([`Error::Unavailable`]). The
/// message never repeats the URL or the password.
pub(crate) fn connect_error(
    e: &redis::RedisError,
    redacted: &str,
    url: &str,
    password: Option<&str>,
) -> Error {
    let message = scrub(&scrub_url(&e.to_string(), url), password);
    let lower = message.to_ascii_lowercase();
    if e.kind() == redis::ErrorKind::AuthenticationFailed
        || lower.contains("wrongpass")
        || lower.contains("noauth")
    {
        return Error::Redis {
            url: redacted.to_owned(),
            message: format!("authentication refused: {message}"),
        };
    }
    // rustls's verdicts on a certificate, either side's (an alert from the server).
    let tls = ["certificate", "unknownissuer", "handshake", "alert", "tls"];
    if tls.iter().any(|w| lower.contains(w)) {
        return Error::Tls {
            url: redacted.to_owned(),
            message,
        };
    }
    Error::Unavailable {
        url: redacted.to_owned(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_every_password_form() {
        let cases = [
            ("redis://u:pw1@h:1/0", "redis://u:***@h:1/0"),
            ("redis://:pw1@h", "redis://:***@h"),
            ("redis://pw1@h", "redis://***@h"),
            ("rediss://u:p@w1@h/", "rediss://u:***@h/"),
            (
                "redis+unix:///tmp/s.sock?db=1&pass=pw1",
                "redis+unix:///tmp/s.sock?db=1&pass=***",
            ),
            ("redis://h:1/?password=pw1", "redis://h:1/?password=***"),
            ("redis://h:1/", "redis://h:1/"),
            ("redis://u:pa/ss1@h:6379/", "redis://u:***@h:6379/"),
            ("redis://u:pa?ss1@h:6379/0", "redis://u:***@h:6379/0"),
            ("redis://u:pa#ss1@h", "redis://u:***@h"),
            ("redis://u:p@ss1@h/?x=1", "redis://u:***@h/?x=1"),
            ("notaurl", "notaurl"),
            ("u:pw1@h:1", "u:***@h:1"),
            ("pw1@h", "***@h"),
            ("redis:/u:pw1@h", "redis:***@h"),
            ("h:1/?pass=pw1", "h:1/?pass=***"),
        ];
        for (url, want) in cases {
            let got = redact_url(url);
            assert_eq!(got, want);
            assert!(!got.contains("pw1"), "{got}");
        }
        assert_eq!(scrub("bad pw1 here", Some("pw1")), "bad *** here");
        assert_eq!(typed_password("redis://u:pa/ss@h:1/"), Some("pa/ss"));
        assert_eq!(typed_password("redis://h:1/"), None);
    }
}
