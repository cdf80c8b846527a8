//! A step script's reply and the result its status maps to.

use redis::Value;

use super::{Applied, Effect};
use crate::error::{Error, Rejection};
use crate::record::Record;

/// A step script's reply: `[status, record fields, Redis TIME in ms, extra]`.
pub(crate) struct Reply {
    pub(super) status: Vec<u8>,
    pub(super) record: Option<Record>,
    pub(super) now_ms: u64,
    pub(super) extra: Value,
}

/// An integer reply, or a decimal one in a bulk string; `None` for anything else.
pub(crate) fn number(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// Reads a step script's reply; `Error::UnexpectedReply` for any other shape.
pub(super) fn parse_reply(value: Value) -> Result<Reply, Error> {
    let bad = |what: &str| Error::UnexpectedReply(what.to_owned());
    let Value::Array(mut items) = value else {
        return Err(bad("not an array"));
    };
    if items.len() != 4 {
        return Err(bad("not 4 items"));
    }
    let extra = items.pop().unwrap_or(Value::Nil);
    let now_ms = items
        .pop()
        .as_ref()
        .and_then(number)
        .ok_or_else(|| bad("no time"))?;
    let fields = match items.pop() {
        Some(Value::Array(f)) => f,
        _ => return Err(bad("no record array")),
    };
    let status = match items.pop() {
        Some(Value::BulkString(s)) => s,
        Some(Value::SimpleString(s)) => s.into_bytes(),
        _ => return Err(bad("no status")),
    };
    let mut pairs = Vec::with_capacity(fields.len() / 2);
    let mut it = fields.into_iter();
    while let (Some(Value::BulkString(k)), Some(Value::BulkString(v))) = (it.next(), it.next()) {
        pairs.push((k, v));
    }
    let record = if pairs.is_empty() {
        None
    } else {
        Some(Record::parse(&pairs).ok_or_else(|| bad("malformed owner record"))?)
    };
    Ok(Reply {
        status,
        record,
        now_ms,
        extra,
    })
}

/// Maps a script status to the call's result. `index` is the chunk index the call was about.
pub(crate) fn applied(r: Reply, index: u64) -> Result<Applied, Error> {
    let status = String::from_utf8_lossy(&r.status).into_owned();
    let effect = match status.as_str() {
        "OK" => Some(Effect::Changed),
        "REPEATED" => Some(Effect::Repeated),
        "UNCHANGED" => Some(Effect::Unchanged),
        _ => None,
    };
    if status == "BAD_EPOCH" {
        return Err(Error::UnexpectedReply(
            "an external epoch must be an integer of at least 1".into(),
        ));
    }
    if status == "ABSENT" {
        return Err(Error::Rejected(Box::new(Rejection::Absent)));
    }
    let Some(record) = r.record else {
        return Err(Error::UnexpectedReply(format!("{status} without a record")));
    };
    if let Some(effect) = effect {
        return Ok(Applied {
            record,
            now_ms: r.now_ms,
            effect,
        });
    }
    let extra = number(&r.extra);
    let rejection = match status.as_str() {
        "TAKEN" => Rejection::Taken(record),
        "FENCED" => Rejection::Fenced {
            record,
            taken_chunks: extra,
        },
        "STATE" => Rejection::WrongState(record),
        "NOT_OFFERED" => Rejection::NotOffered(record),
        "NOT_EXPIRED" => Rejection::NotExpired(record),
        "ORDER" => Rejection::OutOfOrder {
            expected: extra.unwrap_or(0),
            record,
        },
        "CONFLICT" => Rejection::ChunkConflict { index, record },
        "COUNT" => Rejection::CountMismatch {
            chunks_in_redis: extra.unwrap_or(0),
            record,
        },
        "MISSING" => Rejection::MissingChunk { index, record },
        "OTHER_QUEUE" => Rejection::OtherQueue(record),
        "TOKEN_REUSED" => Rejection::TokenReused {
            step: match &r.extra {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            },
            record,
        },
        other => return Err(Error::UnexpectedReply(format!("status {other:?}"))),
    };
    Err(Error::Rejected(Box::new(rejection)))
}
