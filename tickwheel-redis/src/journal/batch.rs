//! Group commit: the task that gathers callers' ops for a window and sends them as one
//! pipeline, one script call per queue (and token), and answers each caller once Redis
//! acknowledged its call.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Instant;

use redis::{Script, Value};
use tokio::sync::{mpsc, oneshot};

use super::record::{Op, encode};
use super::{JournalError, JournalOptions, Written};
use crate::connect::map_redis;
use crate::error::Error;
use crate::keys::JournalKeys;
use crate::protocol::{Protocol, number};

pub(crate) static WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/journal_prelude.lua"),
        include_str!("../lua/journal_write.lua")
    ))
});

/// One caller's ops for one queue, applied together in one script call.
pub(crate) struct Request {
    pub(crate) queue: Vec<u8>,
    pub(crate) token: u64,
    pub(crate) ops: Vec<Op>,
    pub(crate) reply: oneshot::Sender<Result<Written, JournalError>>,
}

/// Consecutive requests of one (queue, token), sent as one `EVALSHA`.
struct Call {
    group: usize,
    requests: Vec<usize>,
    ops: usize,
}

/// A batch encoded as one pipeline, waiting for its turn on the connection.
struct Prepared {
    pipe: redis::Pipeline,
    /// Per script call, in pipeline order: the requests it carries, its queue and token.
    calls: Vec<(Vec<usize>, Vec<u8>, u64)>,
    /// Whether the pipeline ends with the durability settings read back (`CONFIG GET`).
    checked: bool,
    batch: Vec<Request>,
}

/// The settings a batch is read back against, after its scripts ran.
const DURABLE: [(&str, &str); 2] = [("appendonly", "yes"), ("appendfsync", "always")];

/// Runs until every [`Journal`](super::Journal) handle is dropped, after answering what was
/// sent before. Two stages, so that encoding the next batch overlaps Redis applying this one:
/// this task gathers and encodes; a second sends one pipeline at a time, in order, and
/// answers. While a pipeline is in flight the next batch keeps gathering (group commit).
pub(crate) async fn run(
    mut rx: mpsc::UnboundedReceiver<Request>,
    protocol: Protocol,
    options: JournalOptions,
) {
    let (tx, ready) = mpsc::channel::<Prepared>(1);
    let sender = tokio::spawn(deliver_all(ready, protocol.clone()));
    let mut checked = Instant::now();
    while let Some(first) = rx.recv().await {
        // Nothing else waiting: wait the window so that concurrent callers share this batch.
        // A backlog gathered while the last batch was in flight goes at once: it has waited.
        if rx.is_empty() && !options.window.is_zero() {
            tokio::time::sleep(options.window).await;
        }
        let mut ops = first.ops.len();
        let mut batch = vec![first];
        while ops < options.max_batch_ops {
            match rx.try_recv() {
                Ok(r) => {
                    ops += r.ops.len();
                    batch.push(r);
                }
                Err(_) => break,
            }
        }
        if checked.elapsed() >= options.durability_recheck {
            if let Err(e) = protocol.check_durability().await {
                for r in batch {
                    let _ = r.reply.send(Err(JournalError::Redis(copy(&e))));
                }
                continue;
            }
            checked = Instant::now();
        }
        if tx.send(prepare(&protocol, &options, batch)).await.is_err() {
            break;
        }
    }
    drop(tx);
    let _ = sender.await;
}

async fn deliver_all(mut ready: mpsc::Receiver<Prepared>, protocol: Protocol) {
    while let Some(p) = ready.recv().await {
        deliver(&protocol, p).await;
    }
}

/// Encodes one batch as one pipeline: grouped by (queue, token), each group in arrival
/// order, a request never split across calls.
fn prepare(protocol: &Protocol, options: &JournalOptions, batch: Vec<Request>) -> Prepared {
    let mut calls: Vec<Call> = Vec::new();
    let mut groups: Vec<(usize, JournalKeys, String)> = Vec::new();
    {
        let mut index: HashMap<(&[u8], u64), usize> = HashMap::new();
        let mut open: HashMap<usize, usize> = HashMap::new();
        let mut last: Option<(&[u8], u64, usize)> = None;
        for (i, r) in batch.iter().enumerate() {
            // Most batches carry runs of one queue: skip the map for a run.
            let g = match last {
                Some((q, t, g)) if q == r.queue.as_slice() && t == r.token => g,
                _ => *index.entry((&r.queue, r.token)).or_insert_with(|| {
                    let prefix = &protocol.options().prefix;
                    groups.push((
                        i,
                        JournalKeys::new(prefix, &r.queue),
                        protocol.keys(&r.queue).owner,
                    ));
                    groups.len() - 1
                }),
            };
            last = Some((&r.queue, r.token, g));
            match open.get(&g) {
                Some(&c) if calls[c].ops + r.ops.len() <= options.max_call_ops => {
                    calls[c].ops += r.ops.len();
                    calls[c].requests.push(i);
                }
                _ => {
                    open.insert(g, calls.len());
                    calls.push(Call {
                        group: g,
                        requests: vec![i],
                        ops: r.ops.len(),
                    });
                }
            }
        }
    }

    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    // Cheap when the script is cached (a hash lookup), and it makes a flushed cache (a
    // restarted server) harmless: no EVALSHA of this pipeline can meet NOSCRIPT.
    pipe.load_script(&WRITE);
    let load = options.bucket_load.max(1).to_string();
    let mut routed = Vec::with_capacity(calls.len());
    for call in calls {
        let (first, keys, owner) = &groups[call.group];
        let r = &batch[*first];
        let token = r.token.to_string();
        let cmd = pipe
            .cmd("EVALSHA")
            .arg(WRITE.get_hash())
            .arg(2)
            .arg(owner)
            .arg(&keys.meta)
            .arg(&keys.bucket_prefix)
            .arg(&token)
            .arg(&load);
        for &i in &call.requests {
            for op in &batch[i].ops {
                match op {
                    Op::Put {
                        id,
                        deadline_us,
                        value,
                    } => {
                        cmd.arg("P").arg(id).arg(encode(*deadline_us, value));
                    }
                    Op::End { id } => {
                        cmd.arg("D").arg(id);
                    }
                    Op::Clear => {
                        cmd.arg("C");
                    }
                }
            }
        }
        routed.push((call.requests, r.queue.clone(), r.token));
    }
    // Read back after the scripts, in the same pipeline: a server switched away from
    // `appendfsync always` before or while they ran fails the whole batch, so no caller is
    // told "durable" for a write that may not be (a switch between two rechecks would
    // otherwise slip through).
    let checked = !protocol.options().allow_unsafe_durability;
    if checked {
        for (name, _) in DURABLE {
            pipe.cmd("CONFIG").arg("GET").arg(name);
        }
    }
    Prepared {
        pipe,
        calls: routed,
        checked,
        batch,
    }
}

/// What is wrong with the durability settings read back at the end of a pipeline (`tail`:
/// the replies to its `CONFIG GET`s, in [`DURABLE`]'s order); empty when all is well.
fn durability_problems(tail: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    for ((name, want), reply) in DURABLE.iter().zip(tail) {
        // RESP2 answers `[name, value]`, RESP3 a map of one entry.
        let got = match reply {
            Value::Array(pair) => pair.get(1).and_then(text),
            Value::Map(pairs) => pairs.first().and_then(|(_, v)| text(v)),
            _ => None,
        };
        match got {
            Some(v) if v == *want => {}
            Some(v) => problems.push(format!("{name} is {v:?}, needs {want:?}")),
            None => problems.push(format!("CONFIG GET {name} answered {reply:?}")),
        }
    }
    problems
}

/// Sends one pipeline and answers every request in it.
async fn deliver(protocol: &Protocol, prepared: Prepared) {
    let Prepared {
        pipe,
        calls,
        checked,
        batch,
    } = prepared;
    let mut conn = protocol.conn.clone();
    let replies: Result<Vec<Value>, _> = pipe.query_async(&mut conn).await;
    let mut answers: Vec<Option<Result<Written, JournalError>>> =
        batch.iter().map(|_| None).collect();
    let expected = calls.len() + 1 + if checked { DURABLE.len() } else { 0 };
    match replies {
        Ok(values) if values.len() == expected => {
            let problems = durability_problems(&values[calls.len() + 1..]);
            if !problems.is_empty() {
                let e = Error::UnsafeServer {
                    url: protocol.url.clone(),
                    problems: problems.join("; "),
                };
                for a in &mut answers {
                    *a = Some(Err(JournalError::Redis(copy(&e))));
                }
            } else {
                let scripts = values.into_iter().skip(1);
                for ((requests, queue, token), value) in calls.iter().zip(scripts) {
                    for &i in requests {
                        answers[i] = Some(answer(protocol, queue, *token, &value));
                    }
                }
            }
        }
        Ok(values) => {
            let e = Error::UnexpectedReply(format!(
                "{} replies to a pipeline of {expected}",
                values.len(),
            ));
            for a in &mut answers {
                *a = Some(Err(JournalError::Redis(copy(&e))));
            }
        }
        Err(e) => {
            let e = map_redis(e, &protocol.url, protocol.password.as_deref());
            for a in &mut answers {
                *a = Some(Err(JournalError::Redis(copy(&e))));
            }
        }
    }
    for (r, a) in batch.into_iter().zip(answers) {
        let a = a.unwrap_or(Err(JournalError::Closed));
        // A caller that stopped waiting (dropped its `Pending`) does not mind.
        let _ = r.reply.send(a);
    }
}

/// One script call's answer, for each request in it.
fn answer(
    protocol: &Protocol,
    queue: &[u8],
    token: u64,
    value: &Value,
) -> Result<Written, JournalError> {
    let bad = |what: &str| JournalError::Redis(Error::UnexpectedReply(what.to_owned()));
    let items = match value {
        Value::Array(items) => items,
        Value::ServerError(e) => {
            let e: redis::RedisError = e.clone().into();
            return Err(JournalError::Redis(map_redis(
                e,
                &protocol.url,
                protocol.password.as_deref(),
            )));
        }
        _ => return Err(bad("journal write: not an array")),
    };
    match (items.first().and_then(text), items.get(1)) {
        (Some("OK"), Some(n)) => Ok(Written {
            live: number(n).ok_or_else(|| bad("journal write: no count"))?,
        }),
        (Some("FENCED"), Some(cur)) => Err(JournalError::Fenced {
            queue: queue.to_vec(),
            token,
            current: number(cur),
        }),
        (Some("BAD_OP"), _) => Err(bad("journal write: malformed op list")),
        _ => Err(bad("journal write: unknown status")),
    }
}

pub(crate) fn text(v: &Value) -> Option<&str> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// The same error again, for each caller of a failed batch (`Error` is not `Clone`).
pub(crate) fn copy(e: &Error) -> Error {
    match e {
        Error::Unavailable { url, message } => Error::Unavailable {
            url: url.clone(),
            message: message.clone(),
        },
        Error::UnsafeServer { url, problems } => Error::UnsafeServer {
            url: url.clone(),
            problems: problems.clone(),
        },
        Error::UnexpectedReply(m) => Error::UnexpectedReply(m.clone()),
        Error::Redis { url, message } => Error::Redis {
            url: url.clone(),
            message: message.clone(),
        },
        other => Error::Redis {
            url: String::new(),
            message: other.to_string(),
        },
    }
}
