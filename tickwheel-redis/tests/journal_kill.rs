//! A writer process SIGKILLed while it journals loses nothing Redis acknowledged to it, and
//! neither does redis-server, stopped (SIGSTOP) with batches in flight, killed with SIGKILL and
//! restarted from its AOF: an answer is given only once Redis applied and fsynced a batch.
//!
//! The child (this test binary run again as `journal_writer_child`) puts new ids in rounds of
//! concurrent submits, several rounds outstanding, and prints `ACK <id>` once a put's `Pending` resolved.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use support::*;
use tickwheel_redis::journal::{Journal, JournalOptions, Op};
use tickwheel_redis::{Member, Token};
use tickwheel_testkit::child::TestChild;

const WRITER: &str = "TICKWHEEL_JOURNAL_WRITER";
const QUEUE: &[u8] = b"killed.example";
const TOKEN: u64 = 17;

fn value(id: u64) -> Vec<u8> {
    format!("message {id}").into_bytes()
}

/// The child: runs only when the parent set `TICKWHEEL_JOURNAL_WRITER` to the server's URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_writer_child() {
    let Ok(url) = std::env::var(WRITER) else {
        return;
    };
    let p = connect(&url, Member::new_boot("writer")).await;
    let j = Journal::start(p, JournalOptions::default()).expect("runtime");
    // Up to four rounds of 2 000 single-put submits outstanding, so that Redis always has a
    // batch to apply when the parent stops it.
    let mut rounds = std::collections::VecDeque::new();
    let mut next = 0u64;
    loop {
        let round: Vec<_> = (next..next + 2000)
            .map(|id| {
                let put = Op::Put {
                    id: id.to_be_bytes().to_vec(),
                    deadline_us: 1_765_000_000_000_000 + id,
                    value: value(id),
                };
                (id, j.submit(QUEUE, TOKEN, vec![put]))
            })
            .collect();
        next += 2000;
        rounds.push_back(round);
        if rounds.len() < 4 {
            continue;
        }
        for (id, w) in rounds.pop_front().into_iter().flatten() {
            match w.await {
                Ok(_) => println!("ACK {id}"),
                Err(e) => println!("ERR {id} {e}"),
            }
        }
    }
}

/// The ids `child` printed as acknowledged, once its output stopped growing.
async fn acked(child: &TestChild) -> BTreeSet<u64> {
    let mut last = usize::MAX;
    loop {
        let lines = child.lines();
        if lines.len() == last {
            return lines
                .iter()
                .filter_map(|l| l.strip_prefix("ACK ")?.parse().ok())
                .collect();
        }
        last = lines.len();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_writer_loses_nothing_it_was_acknowledged() {
    if std::env::var_os(WRITER).is_some() {
        return;
    }
    let Some(mut server) = server() else {
        return;
    };
    let url = server.url();
    let adopter = connect(&url, Member::new_boot("adopter")).await;
    adopter
        .adopt(QUEUE, TOKEN, &Token::generate())
        .await
        .expect("adopt");
    let mut child = TestChild::spawn("journal_writer_child", WRITER, &url);
    let started = Instant::now();
    while child.count("ACK ") < 20_000 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the writer acknowledged only {} puts in 60 s: {:?}",
            child.count("ACK "),
            child.lines().iter().rev().take(3).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Freeze Redis with batches in flight: nothing of them may be acknowledged until Redis
    // runs again, which it never does (killed below).
    let pid = server.pid().expect("redis pid");
    tickwheel_testkit::send_signal(pid, "STOP").expect("stop redis");
    tokio::time::sleep(Duration::from_millis(300)).await;
    child.kill9();
    let acked = acked(&child).await;
    assert_eq!(
        child.count("ERR "),
        0,
        "{:?}",
        child.lines().iter().find(|l| l.starts_with("ERR "))
    );
    // Redis too: what it acknowledged is in its AOF (appendfsync always).
    server.kill9().expect("kill redis");
    server.restart().expect("restart redis");
    let p = connect(&url, Member::new_boot("reader")).await;
    let j = Journal::start(p, JournalOptions::default()).expect("runtime");
    let records = retry(100, || async {
        j.load(QUEUE, TOKEN).await.map_err(|e| match e {
            tickwheel_redis::journal::JournalError::Redis(e) => e,
            other => panic!("load: {other}"),
        })
    })
    .await
    .expect("load");
    let mut held = BTreeSet::new();
    for r in &records {
        let id = u64::from_be_bytes(r.id.as_slice().try_into().expect("8-byte id"));
        assert_eq!(r.deadline_us, 1_765_000_000_000_000 + id);
        assert_eq!(r.value, value(id));
        held.insert(id);
    }
    let lost: Vec<_> = acked.difference(&held).take(10).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged puts lost, e.g. {lost:?}",
        acked.difference(&held).count()
    );
    eprintln!(
        "{} puts acknowledged before the kill, {} in Redis after its restart",
        acked.len(),
        held.len()
    );
}
