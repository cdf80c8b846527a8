//! Credentials never reach a log line: a member runs against an etcd with authentication
//! enabled and a password-protected redis-server, through an etcd outage and a Redis restart
//! (which make it log warnings with the underlying errors), while every log line of every
//! crate is captured and searched for the passwords.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use support::*;
use tickwheel_fleet::Error;

const ETCD_PASSWORD: &str = "etcd-pw/?#@7f3a";
const REDIS_PASSWORD: &str = "redis-pw-9c1e";

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture() -> Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let c = Captured::default();
        let w = c.clone();
        let sub = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || w.clone())
            .finish();
        let _ = tracing::subscriber::set_global_default(sub);
        c
    })
    .clone()
}

fn logs(c: &Captured) -> String {
    c.0.lock()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn passwords_never_reach_a_log_line_through_outages() {
    let cap = capture();
    let Some(mut etcd) = tickwheel_testkit::etcd::start_for_test() else {
        return;
    };
    let Some(mut redis) =
        tickwheel_testkit::redis::start_for_test_with(&[("requirepass", REDIS_PASSWORD)])
    else {
        return;
    };
    // Enable etcd authentication: a root user with the password.
    enable_etcd_auth(&etcd.url(), ETCD_PASSWORD, None).await;
    let mut opts = tickwheel_fleet::FleetOptions::new(
        etcd.url(),
        format!("redis://:{REDIS_PASSWORD}@127.0.0.1:{}/", redis.port()),
    )
    .with_lease_ttl(Duration::from_secs(2));
    opts.poll_interval = Duration::from_millis(100);
    opts.custody.retry_for = Duration::from_secs(2);
    opts.etcd_user = Some(("root".into(), ETCD_PASSWORD.into()));
    let qs = queues(4);
    if let Err(e) = tickwheel_fleet::register_queues(&opts, &qs).await {
        panic!("register with credentials: {e}");
    }
    // A wrong etcd password: the error names no password.
    let mut wrong = opts.clone();
    wrong.etcd_user = Some(("root".into(), format!("{ETCD_PASSWORD}x")));
    let r = try_join(&wrong, "w").await;
    match r {
        Err(e) => {
            let s = format!("{e} {e:?}");
            assert!(!s.contains(ETCD_PASSWORD), "{s}");
        }
        Ok(_) => panic!("a wrong etcd password joined"),
    }
    let a = join(&opts, "a", 2).await;
    assert!(!format!("{a:?}").contains(ETCD_PASSWORD));
    assert!(!format!("{a:?}").contains(REDIS_PASSWORD));
    wait_until(Duration::from_secs(30), "a owns every queue", || {
        a.owned().len() == qs.len()
    })
    .await;
    // Outages: the member logs its failures.
    if let Err(e) = redis.restart() {
        panic!("restart redis: {e}");
    }
    if let Err(e) = etcd.stop() {
        panic!("stop etcd: {e}");
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    if let Err(e) = etcd.start_again() {
        panic!("start etcd: {e}");
    }
    // Let the member log its failures for a while (whether it rejoins is the next test's).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let b = join(&opts, "b", 2).await;
    let r = try_join(&opts, "b").await;
    if let Err(e @ Error::NameTaken { .. }) = &r {
        assert!(!format!("{e} {e:?}").contains(ETCD_PASSWORD));
    }
    drop(r);
    drop(b);
    drop(a);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let text = logs(&cap);
    assert!(!text.is_empty(), "nothing was logged");
    for pw in [ETCD_PASSWORD, REDIS_PASSWORD] {
        if let Some(line) = text.lines().find(|l| l.contains(pw)) {
            panic!("a log line holds a password: {line}");
        }
    }
}

/// With etcd authentication on, a member fenced by an etcd restart must rejoin when etcd is
/// back (docs/fleet.md: "each rejoins when etcd answers"). etcd's simple auth tokens do not
/// survive a restart, so the member has to authenticate again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_with_etcd_credentials_rejoins_after_etcd_was_down_past_its_lease() {
    let cap = capture();
    let Some((mut etcd, redis)) = servers() else {
        return;
    };
    enable_etcd_auth(&etcd.url(), ETCD_PASSWORD, None).await;
    let mut opts = options(&etcd, &redis);
    opts.etcd_user = Some(("root".into(), ETCD_PASSWORD.into()));
    let (qs, _, a) = start_with_a(&opts, 4, 2, Duration::from_secs(30), false).await;
    // etcd down for longer than the lease: the member fences itself, then must rejoin.
    if let Err(e) = etcd.stop() {
        panic!("stop etcd: {e}");
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    if let Err(e) = etcd.start_again() {
        panic!("start etcd: {e}");
    }
    let until = std::time::Instant::now() + Duration::from_secs(40);
    while !(a.owned().len() == qs.len() && a.fence().is_valid()) {
        if std::time::Instant::now() > until {
            let text = logs(&cap);
            let warns: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
            let tail = &warns[warns.len().saturating_sub(3)..];
            panic!(
                "a never owned its queues again after etcd came back; last warnings:\n{}",
                tail.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
