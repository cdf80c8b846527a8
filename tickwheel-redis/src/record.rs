//! The owner record of a queue, members and retry tokens.

use std::fmt;

/// The state of a queue's owner record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// A member owns the queue and may dispatch it.
    Owned,
    /// The owner is writing an offer (chunks); it still owns the queue until its deadline.
    Preparing,
    /// The offer is sealed and complete; the source dropped its copy. Claimable.
    Offered,
    /// A member claimed the offer and imports it; the data stays in Redis until it commits.
    Claimed,
}

impl State {
    /// The name stored in Redis (`OWNED`, `PREPARING`, `OFFERED`, `CLAIMED`).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Owned => "OWNED",
            State::Preparing => "PREPARING",
            State::Offered => "OFFERED",
            State::Claimed => "CLAIMED",
        }
    }

    fn parse(s: &[u8]) -> Option<State> {
        Some(match s {
            b"OWNED" => State::Owned,
            b"PREPARING" => State::Preparing,
            b"OFFERED" => State::Offered,
            b"CLAIMED" => State::Claimed,
            _ => return None,
        })
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A member's identity: a stable name (a host) and the id of its current boot. A restarted
/// process is the same name with a new boot id; every boot gets its own epoch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Member {
    /// The member's stable name, e.g. a host name. Any UTF-8.
    pub name: String,
    /// The id of this run of the member; new at every process start (see [`Member::new_boot`]).
    pub boot_id: String,
}

impl Member {
    /// A member named `name` with a fresh random boot id (128 bits, hex).
    ///
    /// # Example
    /// ```
    /// let m = tickwheel_redis::Member::new_boot("mx1.example.com");
    /// assert_eq!(m.boot_id.len(), 32);
    /// ```
    pub fn new_boot(name: impl Into<String>) -> Self {
        Member {
            name: name.into(),
            boot_id: Token::generate().to_string(),
        }
    }
}

/// A caller-chosen retry token. Each mutating call gets a new one; a call whose outcome is
/// unknown (a timeout, a dropped connection) is retried with the same token, and the script
/// then reports [`Effect::Repeated`](crate::Effect::Repeated) instead of acting twice.
///
/// Tokens must be unique per call; [`Token::generate`] draws 128 random bits.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token(String);

impl Token {
    /// A fresh random token (128 bits from the thread-local CSPRNG, as 32 hex digits).
    pub fn generate() -> Self {
        let bits: u128 = rand::random();
        Token(format!("{bits:032x}"))
    }

    /// A token from caller text (e.g. derived from a durable log). `None` if empty or longer
    /// than 128 bytes (an empty token would mean "no token" to the scripts).
    pub fn from_text(text: impl Into<String>) -> Option<Self> {
        let text = text.into();
        (!text.is_empty() && text.len() <= 128).then_some(Token(text))
    }

    /// The token's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({})", self.0)
    }
}

/// A queue's owner record as the script saw it, read in the same atomic step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The state.
    pub state: State,
    /// The owning member (in [`State::Offered`]: still the source).
    pub owner: Member,
    /// The fencing token: rises on every change of owner, a new boot of the same name included.
    pub epoch: u64,
    /// The member an offer is meant for, if any.
    pub target: Option<String>,
    /// Until when (reference clock, ms since the Unix epoch) the holder of the state has the
    /// exclusive right to act; `None` in [`State::Owned`] unless renewed.
    pub deadline_ms: Option<u64>,
    /// Chunks in the offer (appended so far in [`State::Preparing`]).
    pub chunks: u64,
    /// Entries in those chunks.
    pub entries: u64,
    /// The offering member and the epoch it offered under (the epoch the chunks carry); kept
    /// through [`State::Claimed`], `None` in [`State::Owned`].
    pub source: Option<(Member, u64)>,
    /// The raw queue name the record belongs to.
    pub queue: Vec<u8>,
    /// The flow policy the offer was sealed with, as stored (decode it with
    /// [`PolicyText::decode`](crate::PolicyText::decode)); kept through
    /// [`State::Claimed`], `None` in [`State::Owned`] and [`State::Preparing`], and for an
    /// offer sealed without one (nothing is applied then).
    pub policy: Option<String>,
}

impl Record {
    /// Parses the `HGETALL` field/value pairs; `None` if a required field is missing or bad.
    pub(crate) fn parse(pairs: &[(Vec<u8>, Vec<u8>)]) -> Option<Record> {
        let get = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name.as_bytes())
                .map(|(_, v)| v.as_slice())
        };
        let text = |name: &str| get(name).and_then(|v| std::str::from_utf8(v).ok());
        let number = |name: &str| text(name).and_then(|v| v.parse::<u64>().ok());
        let source = match (text("source"), text("source_boot"), number("source_epoch")) {
            (Some(name), Some(boot), Some(epoch)) => Some((
                Member {
                    name: name.to_owned(),
                    boot_id: boot.to_owned(),
                },
                epoch,
            )),
            _ => None,
        };
        Some(Record {
            state: State::parse(get("state")?)?,
            owner: Member {
                name: text("owner")?.to_owned(),
                boot_id: text("boot")?.to_owned(),
            },
            epoch: number("epoch")?,
            target: text("target").map(str::to_owned),
            deadline_ms: number("deadline_ms"),
            chunks: number("chunks").unwrap_or(0),
            entries: number("entries").unwrap_or(0),
            source,
            queue: get("queue")?.to_vec(),
            policy: text("policy").map(str::to_owned),
        })
    }

    /// Whether `member` (name and boot) holds this record.
    pub fn is_held_by(&self, member: &Member) -> bool {
        &self.owner == member
    }
}
