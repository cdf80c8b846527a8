//! Adversarial checks of the journal's documented error cases and round trips: bad
//! directories, values that fail to serialize, a second handle on one directory, records
//! that do not decode as the types given, and `Due`s that outlive their journal.

use std::time::{Duration, Instant};

use serde::{Serialize, Serializer};
use tickwheel::sync::Cancel;
use tickwheel_journal::{Durability, Durable, Error, Options};

type J = Durable<String, u64, String>;

fn opts() -> Options {
    Options::new().durability(Durability::Sync)
}

fn ids(j: &J) -> Vec<u64> {
    let mut v: Vec<u64> = j
        .scheduler()
        .queues()
        .into_iter()
        .flat_map(|q| j.scheduler().queue_members(&q).into_iter().map(|m| m.id))
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn reopen_round_trips_many_times() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let mut want: Vec<u64> = Vec::new();
    for round in 0..5u64 {
        let j: J = Durable::open(dir.path(), opts()).unwrap();
        assert_eq!(ids(&j), want, "round {round}");
        for k in 0..20 {
            let id = round * 100 + k;
            j.schedule(
                format!("q{}", k % 3),
                id,
                t0 + Duration::from_secs(3600),
                format!("v{id}"),
            )
            .unwrap()
            .unwrap();
            want.push(id);
        }
        // Cancel one, reschedule one; values survive.
        let gone = round * 100 + 7;
        assert!(
            matches!(j.cancel(&gone).unwrap(), Cancel::Cancelled(v) if v == format!("v{gone}"))
        );
        want.retain(|&i| i != gone);
        j.reschedule(&(round * 100 + 3), t0 + Duration::from_secs(7200))
            .unwrap()
            .unwrap();
        if round % 2 == 0 {
            j.close().unwrap();
        } else {
            drop(j);
        }
    }
    let j: J = Durable::open(dir.path(), opts()).unwrap();
    assert_eq!(ids(&j), want);
    // Values and queues came back: flush far in the future and take them.
    let far = Instant::now() + Duration::from_secs(8000);
    let mut got = Vec::new();
    for due in j.pop_due(far, usize::MAX).unwrap() {
        assert_eq!(due.value(), &format!("v{}", due.id()));
        assert_eq!(due.queue(), &format!("q{}", (due.id() % 100) % 3));
        got.push(*due.id());
        due.done().unwrap();
    }
    got.sort_unstable();
    assert_eq!(got, want);
    j.close().unwrap();
    let j: J = Durable::open(dir.path(), opts()).unwrap();
    assert!(j.is_empty(), "all done before close");
}

#[test]
fn opening_a_file_path_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain");
    std::fs::write(&file, b"not a directory").unwrap();
    let r: Result<J, _> = Durable::open(&file, opts());
    assert!(r.is_err(), "a file as the journal directory");
}

#[test]
fn opening_an_empty_dir_gives_an_empty_journal() {
    let dir = tempfile::tempdir().unwrap();
    let j: J = Durable::open(dir.path(), opts()).unwrap();
    assert!(j.is_empty());
    // A missing directory is created (documented).
    let sub = dir.path().join("a/b/c");
    let k: J = Durable::open(&sub, opts()).unwrap();
    assert!(k.is_empty());
}

#[test]
fn a_garbage_journal_file_is_an_engine_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("journal.redb"), vec![0xA5u8; 10_000]).unwrap();
    let r: Result<J, _> = Durable::open(dir.path(), opts());
    assert!(matches!(r, Err(Error::Engine(_))), "{:?}", r.err());
}

#[test]
fn a_directory_where_the_journal_file_goes_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("journal.redb")).unwrap();
    let r: Result<J, _> = Durable::open(dir.path(), opts());
    assert!(r.is_err());
}

#[test]
fn a_second_handle_on_one_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let j: J = Durable::open(dir.path(), opts()).unwrap();
    j.schedule("q".into(), 1, Instant::now(), "a".into())
        .unwrap()
        .unwrap();
    let second: Result<J, _> = Durable::open(dir.path(), opts());
    assert!(
        matches!(second, Err(Error::Engine(_))),
        "{:?}",
        second.as_ref().err()
    );
    // The first handle is unharmed.
    j.schedule("q".into(), 2, Instant::now(), "b".into())
        .unwrap()
        .unwrap();
    j.close().unwrap();
    let j: J = Durable::open(dir.path(), opts()).unwrap();
    assert_eq!(ids(&j), [1, 2]);
}

#[test]
fn records_of_other_types_are_a_decode_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let j: J = Durable::open(dir.path(), opts()).unwrap();
        j.schedule(
            "a queue name".into(),
            u64::MAX,
            Instant::now(),
            "x".repeat(300),
        )
        .unwrap()
        .unwrap();
    }
    let r: Result<Durable<bool, bool, bool>, _> = Durable::open(dir.path(), opts());
    assert!(matches!(r, Err(Error::Decode(_))), "{:?}", r.err());
}

/// A value whose `Serialize` fails when asked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fussy(bool);

impl Serialize for Fussy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 {
            s.serialize_bool(true)
        } else {
            Err(serde::ser::Error::custom("refuses to serialize"))
        }
    }
}

impl<'de> serde::Deserialize<'de> for Fussy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        bool::deserialize(d).map(Fussy)
    }
}

#[test]
fn a_value_that_fails_to_serialize_is_an_error_and_not_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now() + Duration::from_secs(3600);
    {
        let j: Durable<String, u64, Fussy> = Durable::open(dir.path(), opts()).unwrap();
        j.schedule("q".into(), 1, t0, Fussy(true)).unwrap().unwrap();
        let bad = j.schedule("q".into(), 2, t0, Fussy(false));
        assert!(matches!(bad, Err(Error::Decode(_))), "{bad:?}");
        // Decode does not close the journal (only Engine and Closed do).
        j.schedule("q".into(), 3, t0, Fussy(true)).unwrap().unwrap();
        j.flush().unwrap();
        j.close().unwrap();
    }
    let j: Durable<String, u64, Fussy> = Durable::open(dir.path(), opts()).unwrap();
    let mut got: Vec<u64> = j
        .scheduler()
        .queue_members("q")
        .into_iter()
        .map(|m| m.id)
        .collect();
    got.sort_unstable();
    assert_eq!(got, [1, 3], "the refused timer is not on disk");
}

/// After a failed encoding, memory and disk must agree: either the refused timer is not
/// pending in memory, or it is and was recorded. Documented: "the timer may then be
/// pending in memory but is not acknowledged". Checks that it is not left pending in
/// memory only (fired now, lost on a restart).
#[test]
fn a_refused_value_is_not_pending_in_memory_only() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let j: Durable<String, u64, Fussy> = Durable::open(dir.path(), opts()).unwrap();
    let bad = j.schedule("q".into(), 2, t0, Fussy(false));
    assert!(bad.is_err());
    // Whatever the memory holds, handing it out must not panic, and ending it must not.
    let batch = j.pop_due(Instant::now() + Duration::from_secs(1), 10);
    if let Ok(batch) = batch {
        for due in batch {
            let _ = due.done();
        }
    }
    let _ = j.cancel(&2);
    assert!(j.is_empty());
}

#[test]
fn a_due_that_outlives_its_journal_errs_without_panic() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let j: J = Durable::open(dir.path(), opts()).unwrap();
    for id in 0..4 {
        j.schedule("q".into(), id, now, format!("v{id}"))
            .unwrap()
            .unwrap();
    }
    let mut batch = j
        .pop_due(Instant::now() + Duration::from_millis(50), 10)
        .unwrap();
    let a = batch.next().unwrap();
    let b = batch.next().unwrap();
    let c = batch.next().unwrap();
    j.close().unwrap();
    // The journal is closed: ending, retrying and putting back must not panic.
    let _ = a.done();
    let _ = b.retry_at(now + Duration::from_secs(1));
    drop(c);
    drop(batch); // one untaken
    // Recovery: every timer whose end was not acknowledged is back.
    let j: J = Durable::open(dir.path(), opts()).unwrap();
    let back = ids(&j);
    assert!(back.contains(&2) && back.contains(&3), "{back:?}");
    assert!(back.len() >= 2);
}

#[test]
fn done_after_close_is_closed_error() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let j: J = Durable::open(dir.path(), opts()).unwrap();
    j.schedule("q".into(), 1, now, "v".into()).unwrap().unwrap();
    let due = j
        .pop_due(Instant::now() + Duration::from_millis(50), 10)
        .unwrap()
        .next()
        .unwrap();
    j.close().unwrap();
    let r = due.done();
    assert!(matches!(r, Err(Error::Closed(_))), "{r:?}");
    let j: J = Durable::open(dir.path(), opts()).unwrap();
    assert_eq!(
        ids(&j),
        [1],
        "an end not acknowledged: recovery brings it back"
    );
    let due = j.pop_due(Instant::now(), 10).unwrap().next().unwrap();
    assert_eq!(due.attempt(), 2);
}

#[test]
fn async_mode_flush_then_reopen_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now() + Duration::from_secs(3600);
    {
        let j: J = Durable::open(
            dir.path(),
            Options::new().durability(Durability::Async(Duration::from_millis(50))),
        )
        .unwrap();
        for id in 0..500 {
            j.schedule("q".into(), id, t0, String::new())
                .unwrap()
                .unwrap();
        }
        j.flush().unwrap();
        std::mem::forget(j); // no close: as a crash right after the flush
    }
    // forget leaks the engine's lock in this process; a re-open may be refused, as two
    // handles would. Only check it does not panic, and recovers all if it opens.
    if let Ok(j) = Durable::<String, u64, String>::open(dir.path(), opts()) {
        assert_eq!(j.len(), 500);
    }
}

/// Runs `full_disk_child(strict)` in a child run of this test binary under a file-size
/// limit (`ulimit -f`, SIGXFSZ ignored): a full disk. Returns the child's output and the
/// journal directory.
fn run_full_disk_child(test: &str) -> (String, tempfile::TempDir) {
    let exe = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "trap '' XFSZ; ulimit -f 4096; exec '{}' --exact {test} --nocapture --test-threads 1 --include-ignored",
        exe.display()
    );
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .env("JOURNAL_FSIZE_CHILD", dir.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed: {text}");
    assert!(text.contains("CHILD-OK"), "{text}");
    (text, dir)
}

/// A full disk: the journal's writes start failing. Every later change returns `Err`
/// without a panic, and what was acknowledged comes back on a re-open.
#[test]
fn a_failing_engine_errs_without_panic() {
    if std::env::var_os("JOURNAL_FSIZE_CHILD").is_some() {
        return full_disk_child(false);
    }
    let (text, dir) = run_full_disk_child("a_failing_engine_errs_without_panic");
    let j: J = Durable::open(dir.path(), opts()).unwrap();
    let after = text.split("CHILD-OK ").nth(1).unwrap();
    let acked: usize = after.split_whitespace().next().unwrap().parse().unwrap();
    assert!(acked > 0);
    assert!(j.len() >= acked, "{} back, {acked} acknowledged", j.len());
}

/// As above, and "the journal refuses every later change": a refused call changes
/// nothing in memory (a refused cancel or drain leaves its timers pending rather than
/// dropping them with the error), and `pop_due` refuses too.
#[test]
fn a_failing_engine_refuses_every_later_change() {
    if std::env::var_os("JOURNAL_FSIZE_CHILD").is_some() {
        return full_disk_child(true);
    }
    let _ = run_full_disk_child("a_failing_engine_refuses_every_later_change");
}

fn full_disk_child(strict: bool) {
    let dir = std::env::var_os("JOURNAL_FSIZE_CHILD").unwrap();
    let j: J = Durable::open(&dir, opts()).unwrap();
    let far = Instant::now() + Duration::from_secs(3600);
    let mut acked = 0usize;
    let mut failed_at = None;
    for id in 0..10_000u64 {
        match j.schedule("q".into(), id, far, "x".repeat(20_000)) {
            Ok(r) => {
                r.unwrap();
                acked += 1;
            }
            Err(e) => {
                failed_at = Some((id, e));
                break;
            }
        }
    }
    let (id, e) = failed_at.expect("the file-size limit was never hit");
    eprintln!("first error at {id}: {e:?}");
    assert!(matches!(e, Error::Engine(_) | Error::Closed(_)), "{e:?}");
    let len0 = j.len();
    let later = j.schedule("q".into(), 1_000_000, far, "small".into());
    assert!(later.is_err(), "a change after the failure was accepted");
    let len1 = j.len();
    assert!(j.cancel(&0).is_err(), "cancel after the failure");
    let len2 = j.len();
    assert!(
        j.reschedule(&1, far).is_err(),
        "reschedule after the failure"
    );
    assert!(
        j.drain_queue(&"q".to_string()).is_err(),
        "drain after the failure"
    );
    let len3 = j.len();
    let popped = j
        .pop_due(far + Duration::from_secs(1), 10)
        .map(|b| b.count());
    assert!(j.flush().is_err(), "flush after the failure");
    eprintln!("lens {len0} {len1} {len2} {len3}, pop_due {popped:?}");
    if strict {
        assert_eq!(len1, len0, "a refused schedule is pending in memory");
        assert_eq!(len2, len0, "a refused cancel took the timer out of memory");
        assert_eq!(len3, len0, "a refused drain took the timers out of memory");
        assert!(popped.is_err(), "pop_due after the failure: {popped:?}");
    }
    assert!(j.close().is_err(), "close after the failure");
    println!("CHILD-OK {acked}");
}

#[test]
fn a_duplicate_id_is_refused_and_not_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let far = Instant::now() + Duration::from_secs(3600);
    {
        let j: J = Durable::open(dir.path(), opts()).unwrap();
        j.schedule("q".into(), 1, far, "first".into())
            .unwrap()
            .unwrap();
        let dup = j.schedule("r".into(), 1, far, "second".into()).unwrap();
        assert!(dup.is_err(), "the scheduler refuses a live id");
        j.close().unwrap();
    }
    let j: J = Durable::open(dir.path(), opts()).unwrap();
    assert_eq!(j.len(), 1);
    let due = j
        .pop_due(far + Duration::from_secs(1), 10)
        .unwrap()
        .next()
        .unwrap();
    assert_eq!((due.queue().as_str(), due.value().as_str()), ("q", "first"));
}

#[test]
fn concurrent_batched_producers_all_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let far = Instant::now() + Duration::from_secs(3600);
    {
        let j: std::sync::Arc<J> =
            std::sync::Arc::new(Durable::open(dir.path(), Options::new()).unwrap());
        let hs: Vec<_> = (0..4u64)
            .map(|t| {
                let j = std::sync::Arc::clone(&j);
                std::thread::spawn(move || {
                    for k in 0..300u64 {
                        let id = t * 10_000 + k;
                        j.schedule(format!("q{t}"), id, far, id.to_string())
                            .unwrap()
                            .unwrap();
                        if k % 10 == 0 {
                            assert!(matches!(j.cancel(&id).unwrap(), Cancel::Cancelled(_)));
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        // Dropped without close: documented to write and sync as close does.
    }
    let mut last = (0, 0);
    let j: J = Durable::open_with_progress(dir.path(), opts(), |done, total| last = (done, total))
        .unwrap();
    assert_eq!(j.len(), 4 * 270);
    assert_eq!(
        last.0,
        4 * 270,
        "the last progress call counts every timer ({last:?})"
    );
}
