//! A queue's flow policy as it travels with an offer: held or not, its concurrency limit
//! and its rate limit (see `tickwheel::sync::Scheduler::hold_queue`, `set_concurrency`,
//! `set_rate`).
//!
//! The source reads the policy from its scheduler at `seal` and the seal script stores it in
//! the owner record's `policy` field, in the same atomic step that makes the offer OFFERED
//! (so an offer is never sealed without it, nor it written without the seal) and under the
//! same fencing check. The target applies it to its own scheduler before it imports any
//! timer of the offer. An offer sealed without one (by an older build, or through
//! [`Protocol::seal`](crate::Protocol::seal)) has no `policy` field: nothing is applied.
//!
//! The stored text is versioned, `v1;held=0|1;concurrency=N|-;rate=NANOS/BURST|-` (for
//! example `v1;held=1;concurrency=4;rate=250000000/2`), readable with `redis-cli HGET`. A
//! reader refuses a version or a field it does not know ([`PolicyError`]) rather than drop a
//! hold or a limit it cannot read.

use std::time::Duration;

/// The policy format this crate writes and reads.
pub const POLICY_VERSION: u32 = 1;

/// A queue's flow policy: the core's [`tickwheel::sync::FlowPolicy`], under the name this
/// crate has always exported it by. Read it with
/// [`Scheduler::flow_policy`](tickwheel::sync::Scheduler::flow_policy), apply it with
/// [`Scheduler::apply_flow_policy`](tickwheel::sync::Scheduler::apply_flow_policy) (hold
/// first, then the limits, a release last), store it as text with [`PolicyText`].
pub use tickwheel::sync::FlowPolicy;

/// The format this crate writes and reads: [`FlowPolicy`] as the owner record's `policy`
/// text (see the module doc).
///
/// ```
/// use std::time::Duration;
/// use tickwheel::sync::{RateLimit, Scheduler};
/// use tickwheel_redis::{FlowPolicy, PolicyText};
///
/// let src: Scheduler<String, u64, ()> = Scheduler::new();
/// src.hold_queue("q");
/// src.set_concurrency("q", Some(4));
/// src.set_rate("q", Some(RateLimit::per_second(4).with_burst(2)));
/// let policy = src.flow_policy("q");
/// assert_eq!(policy.encode(), "v1;held=1;concurrency=4;rate=250000000/2");
///
/// let dst: Scheduler<String, u64, ()> = Scheduler::new();
/// dst.apply_flow_policy("q", &FlowPolicy::decode(&policy.encode()).unwrap());
/// assert!(dst.is_held("q"));
/// assert_eq!(dst.concurrency("q"), Some(4));
/// assert_eq!(dst.rate("q"), Some((Duration::from_millis(250), 2)));
/// ```
pub trait PolicyText: Sized {
    /// The stored text (see the module doc). Never fails. O(1).
    fn encode(&self) -> String;

    /// Reads a stored text. O(length of `text`).
    ///
    /// # Errors
    /// [`PolicyError::UnknownVersion`] unless it starts with `v1;`;
    /// [`PolicyError::Malformed`] if a field is missing, unknown, repeated or not a number
    /// in range (a burst over `u32::MAX`, which the scheduler cannot apply, is refused
    /// rather than cut; an interval or a burst of 0 is refused).
    fn decode(text: &str) -> Result<Self, PolicyError>;
}

/// Why a stored policy could not be read. Reading changes nothing anywhere.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A policy of a format this build does not know (written by a newer one).
    #[error("unknown flow policy version {found:?} (this build reads v{POLICY_VERSION})")]
    UnknownVersion {
        /// The version text found.
        found: String,
    },
    /// Not a policy of the known version: a field missing, unknown, repeated or malformed.
    #[error("malformed flow policy {text:?}")]
    Malformed {
        /// The stored text (it holds no user data: numbers and field names only).
        text: String,
    },
}

impl PolicyText for FlowPolicy {
    fn encode(&self) -> String {
        let concurrency = self
            .concurrency
            .map_or_else(|| "-".to_owned(), |n| n.to_string());
        let rate = self.rate.map_or_else(
            || "-".to_owned(),
            |(interval, burst)| format!("{}/{burst}", interval.as_nanos()),
        );
        format!(
            "v{POLICY_VERSION};held={};concurrency={concurrency};rate={rate}",
            u8::from(self.held)
        )
    }

    fn decode(text: &str) -> Result<FlowPolicy, PolicyError> {
        let malformed = || PolicyError::Malformed {
            text: text.chars().take(200).collect(),
        };
        let mut parts = text.split(';');
        let version = parts.next().unwrap_or_default();
        if version != format!("v{POLICY_VERSION}") {
            return Err(PolicyError::UnknownVersion {
                found: version.chars().take(32).collect(),
            });
        }
        let (mut held, mut concurrency, mut rate) = (None, None, None);
        for part in parts {
            let (key, value) = part.split_once('=').ok_or_else(malformed)?;
            let slot_filled = match key {
                "held" => held
                    .replace(match value {
                        "0" => false,
                        "1" => true,
                        _ => return Err(malformed()),
                    })
                    .is_some(),
                "concurrency" => concurrency
                    .replace(match value {
                        "-" => None,
                        n => Some(n.parse::<usize>().map_err(|_| malformed())?),
                    })
                    .is_some(),
                "rate" => rate
                    .replace(match value {
                        "-" => None,
                        r => {
                            let (ns, burst) = r.split_once('/').ok_or_else(malformed)?;
                            let ns = ns.parse::<u64>().map_err(|_| malformed())?;
                            // The scheduler's burst is a u32: a larger one cannot be
                            // applied, and is refused rather than cut.
                            let burst = burst.parse::<u32>().map_err(|_| malformed())?;
                            let burst = u64::from(burst);
                            if ns == 0 || burst == 0 {
                                return Err(malformed());
                            }
                            Some((Duration::from_nanos(ns), burst))
                        }
                    })
                    .is_some(),
                _ => return Err(malformed()),
            };
            if slot_filled {
                return Err(malformed());
            }
        }
        match (held, concurrency, rate) {
            (Some(held), Some(concurrency), Some(rate)) => Ok(FlowPolicy {
                held,
                concurrency,
                rate,
            }),
            _ => Err(malformed()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_it_cannot_read() {
        let all = FlowPolicy {
            held: true,
            concurrency: Some(7),
            rate: Some((Duration::from_nanos(123_456_789), 3)),
        };
        for p in [FlowPolicy::default(), all] {
            assert_eq!(FlowPolicy::decode(&p.encode()), Ok(p));
        }
        assert_eq!(
            FlowPolicy::default().encode(),
            "v1;held=0;concurrency=-;rate=-"
        );
        assert!(matches!(
            FlowPolicy::decode("v2;held=1;concurrency=-;rate=-"),
            Err(PolicyError::UnknownVersion { .. })
        ));
        for bad in [
            "",
            "v1",
            "v1;held=1;concurrency=-",
            "v1;held=2;concurrency=-;rate=-",
            "v1;held=1;concurrency=x;rate=-",
            "v1;held=1;concurrency=-;rate=5",
            "v1;held=1;concurrency=-;rate=0/1",
            "v1;held=1;concurrency=-;rate=-;held=0",
            "v1;held=1;concurrency=-;rate=-;paused=1",
        ] {
            assert!(FlowPolicy::decode(bad).is_err(), "{bad:?} accepted");
        }
    }
}
