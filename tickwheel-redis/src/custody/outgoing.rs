//! The source side of a handoff, one method per step.

use std::hash::Hash;
use std::time::Instant;

use serde::Serialize;
use tickwheel::sync::snapshot::to_reference;
use tickwheel::sync::{FrozenEntry, Imported, Scheduler};

use super::{Custody, CustodyError, fenced_of};
use crate::chunk::{CHUNK_VERSION, Chunk, SnapshotEntry};
use crate::error::Error;
use crate::record::{Record, Token};

/// The source's steps, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Freeze,
    Prepare,
    Append,
    InFlight,
    Forward,
    Seal,
    Finish,
    Ended,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Freeze => "freeze",
            Step::Prepare => "prepare",
            Step::Append => "append_pending",
            Step::InFlight => "await_in_flight",
            Step::Forward => "forward",
            Step::Seal => "seal",
            Step::Finish => "finish",
            Step::Ended => "(none: ended)",
        }
    }
}

/// One chunk of the offer: its timers (kept until the seal, to hand back what no claimer
/// took) and, until Redis acknowledged it, its bytes (re-sent unchanged on a retry).
struct Part<K, T> {
    entries: Vec<FrozenEntry<K, T>>,
    bytes: Option<Vec<u8>>,
}

/// A sealed offer: what [`Outgoing::finish`] and [`Custody::offer`] return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offered {
    /// The record after the seal (OFFERED; `epoch` is the offer's).
    pub record: Record,
    /// Chunks in the offer.
    pub chunks: u64,
    /// Timers in the offer.
    pub entries: u64,
}

/// The source side of moving one queue: created by [`Custody::outgoing`], driven one step at
/// a time so the caller can act between steps (e.g. make its own state durable). Steps must
/// be called in order; a step that fails keeps the state, and calling it again continues
/// (same token, same chunk bytes). Between [`freeze`](Self::freeze) and
/// [`seal`](Self::seal), [`abort`](Self::abort) gives every value back to the scheduler.
///
/// The local copy (every timer of the offer) stays in this value until
/// [`finish`](Self::finish), so that a fenced source can hand back exactly what no claimer
/// took.
///
/// # Example
/// ```no_run
/// # async fn demo(c: tickwheel_redis::Custody, s: tickwheel::sync::Scheduler<String, u64, String>)
/// # -> Result<(), tickwheel_redis::CustodyError<u64, String>> {
/// let q = "example.com".to_string();
/// let epoch = c.acquire(q.as_bytes()).await?.record.epoch;
/// let mut out = c.outgoing(&s, q, epoch);
/// out.freeze()?;                 // producers now get ScheduleError::Frozen
/// out.prepare(Some("mx2")).await?;
/// out.append_pending().await?;
/// out.await_in_flight().await?;  // each in-flight timer delivered or forwarded
/// out.forward().await?;
/// out.seal().await?;             // the offer is in Redis, complete
/// let offered = out.finish()?;   // the local copy dropped
/// # let _ = offered; Ok(()) }
/// ```
pub struct Outgoing<'a, Q, K, T> {
    custody: &'a Custody,
    scheduler: &'a Scheduler<Q, K, T>,
    queue: Q,
    epoch: u64,
    next: Step,
    token: Option<Token>,
    in_flight: Vec<K>,
    /// Taken from the scheduler, not yet in a chunk.
    unsent: Vec<FrozenEntry<K, T>>,
    parts: Vec<Part<K, T>>,
    /// Chunks Redis acknowledged (the first `sent` parts).
    sent: usize,
    entries: u64,
    record: Option<Record>,
    /// Whether [`Scheduler::take_forwarded`] was called for the forward step.
    forward_taken: bool,
}

impl<'a, Q, K, T> Outgoing<'a, Q, K, T>
where
    Q: AsRef<[u8]> + Hash + Eq + Clone,
    K: Hash + Eq + Clone + Serialize,
    T: Serialize,
{
    pub(crate) fn new(
        custody: &'a Custody,
        scheduler: &'a Scheduler<Q, K, T>,
        queue: Q,
        epoch: u64,
    ) -> Self {
        Outgoing {
            custody,
            scheduler,
            queue,
            epoch,
            next: Step::Freeze,
            token: None,
            in_flight: Vec::new(),
            unsent: Vec::new(),
            parts: Vec::new(),
            sent: 0,
            entries: 0,
            record: None,
            forward_taken: false,
        }
    }

    /// The epoch the offer is made under (the chunks carry it).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The queue.
    pub fn queue(&self) -> &Q {
        &self.queue
    }

    /// Timers of the offer held here so far (in chunks or waiting for one).
    pub fn held(&self) -> usize {
        self.unsent.len() + self.parts.iter().map(|p| p.entries.len()).sum::<usize>()
    }

    /// Chunks Redis has acknowledged so far.
    pub fn chunks_sent(&self) -> usize {
        self.sent
    }

    /// Step 1, local: [`Scheduler::freeze_queue`]. Takes the pending timers out (producers get
    /// `ScheduleError::Frozen` from now on) and returns the in-flight ids. O(timers).
    ///
    /// # Errors
    /// [`CustodyError::Step`] if called twice.
    pub fn freeze(&mut self) -> Result<&[K], CustodyError<K, T>> {
        self.expect(Step::Freeze)?;
        let frozen = self.scheduler.freeze_queue(&self.queue);
        self.unsent = frozen.pending;
        self.in_flight = frozen.in_flight;
        self.next = Step::Prepare;
        Ok(&self.in_flight)
    }

    /// Step 2: `prepare` (OWNED → PREPARING, for member `to` or anyone), retried with one
    /// token.
    ///
    /// # Errors
    /// [`CustodyError::Fenced`] (the values back), [`CustodyError::Protocol`]
    /// (`WrongState`; `Unavailable`: call again).
    pub async fn prepare(&mut self, to: Option<&str>) -> Result<&Record, CustodyError<K, T>> {
        self.expect(Step::Prepare)?;
        let t = self.token.get_or_insert_with(Token::generate).clone();
        let (c, q, e) = (self.custody, self.queue.as_ref(), self.epoch);
        let r = c.retrying(|| c.protocol.prepare(q, e, to, &t)).await;
        let a = self.check(r)?;
        self.token = None;
        self.next = Step::Append;
        Ok(self.record.insert(a.record))
    }

    /// Step 3: the frozen timers, in delivery order, as chunks of
    /// [`CustodyOptions::chunk_entries`](super::CustodyOptions::chunk_entries), deadlines on
    /// the reference clock (local `Instant` read before Redis `TIME`). One `append` call a
    /// chunk, each retried with its bytes unchanged.
    ///
    /// # Errors
    /// [`CustodyError::Fenced`] (the values not taken back), [`CustodyError::Protocol`].
    pub async fn append_pending(&mut self) -> Result<(), CustodyError<K, T>> {
        self.expect(Step::Append)?;
        self.send().await?;
        self.next = Step::InFlight;
        Ok(())
    }

    /// Step 4, local: waits until the queue has nothing in flight (each in-flight timer
    /// delivered, or forwarded by `Due::retry_at` or a dropped batch), polling
    /// [`Scheduler::queue_in_flight`] for up to
    /// [`CustodyOptions::in_flight_timeout`](super::CustodyOptions::in_flight_timeout) and
    /// renewing the lease every third of it.
    ///
    /// # Errors
    /// [`CustodyError::InFlight`] with the ids left (call again, or abort);
    /// [`CustodyError::Fenced`] if a renewal finds the queue taken over.
    pub async fn await_in_flight(&mut self) -> Result<(), CustodyError<K, T>> {
        self.expect(Step::InFlight)?;
        let opts = self.custody.options();
        let started = Instant::now();
        let renew_every = self.custody.protocol.options().lease / 3;
        let mut renewed = Instant::now();
        loop {
            let ids = self.scheduler.queue_in_flight(&self.queue);
            if ids.is_empty() {
                break;
            }
            if started.elapsed() >= opts.in_flight_timeout {
                return Err(CustodyError::InFlight { ids });
            }
            if renewed.elapsed() >= renew_every {
                let t = Token::generate();
                let (c, q, e) = (self.custody, self.queue.as_ref(), self.epoch);
                let r = c.retrying(|| c.protocol.renew(q, e, &t)).await;
                self.check(r)?;
                renewed = Instant::now();
            }
            tokio::time::sleep(opts.poll_interval).await;
        }
        self.in_flight.clear();
        self.next = Step::Forward;
        Ok(())
    }

    /// Step 5: [`Scheduler::take_forwarded`] (the timers that came back while frozen),
    /// appended as chunks like [`append_pending`](Self::append_pending).
    ///
    /// # Errors
    /// As [`append_pending`](Self::append_pending).
    pub async fn forward(&mut self) -> Result<(), CustodyError<K, T>> {
        self.expect(Step::Forward)?;
        self.take_forwarded();
        self.send().await?;
        self.next = Step::Seal;
        Ok(())
    }

    /// Cuts the chunks the next [`append_pending`](Self::append_pending) or
    /// [`forward`](Self::forward) will send, without sending anything, and returns the index
    /// and ids of every chunk not yet acknowledged. A caller that keeps a durable log records
    /// them first: after a crash it knows which of its ids went into which chunk, so that of
    /// an offer another member reclaimed (it took chunks `0..taken_chunks`) it keeps exactly
    /// the rest. Calling it again returns the same chunks (with the same bytes later).
    ///
    /// ```no_run
    /// # async fn demo(mut out: tickwheel_redis::Outgoing<'_, String, u64, String>)
    /// # -> Result<(), tickwheel_redis::CustodyError<u64, String>> {
    /// for (index, ids) in out.stage().await? {
    ///     println!("chunk {index}: {ids:?}"); // make it durable here
    /// }
    /// out.append_pending().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`CustodyError::Step`] unless the next step is `append_pending` or `forward`;
    /// [`CustodyError::Protocol`] (`Unavailable`: the reference clock could not be read);
    /// [`CustodyError::Chunk`].
    pub async fn stage(&mut self) -> Result<Vec<(u64, Vec<K>)>, CustodyError<K, T>> {
        match self.next {
            Step::Append => {}
            Step::Forward => self.take_forwarded(),
            _ => {
                return Err(CustodyError::Step {
                    called: "stage",
                    expected: self.next.name(),
                });
            }
        }
        self.cut().await?;
        Ok(self
            .parts
            .iter()
            .enumerate()
            .skip(self.sent)
            .map(|(i, p)| (i as u64, p.entries.iter().map(|e| e.id.clone()).collect()))
            .collect())
    }

    fn take_forwarded(&mut self) {
        if !self.forward_taken {
            self.forward_taken = true;
            let forwarded = self.scheduler.take_forwarded(&self.queue);
            self.unsent.extend(forwarded);
        }
    }

    /// Step 6: `seal` (PREPARING → OFFERED): Redis checks it holds every chunk and timer.
    /// From here a claimer takes the whole offer. The queue's flow policy in the scheduler
    /// now ([`Scheduler::flow_policy`]: held or not, its concurrency and rate limits) is stored with
    /// the offer in the same script call ([`Protocol::seal_with_policy`](crate::Protocol::seal_with_policy));
    /// the target applies it before it imports a timer. A retry after a lost reply keeps
    /// the policy the first call stored.
    ///
    /// # Errors
    /// [`CustodyError::Fenced`], [`CustodyError::Protocol`] (`CountMismatch`, `Unavailable`).
    pub async fn seal(&mut self) -> Result<&Record, CustodyError<K, T>> {
        self.expect(Step::Seal)?;
        let t = self.token.get_or_insert_with(Token::generate).clone();
        let (c, q, e) = (self.custody, self.queue.as_ref(), self.epoch);
        let (chunks, entries) = (self.sent as u64, self.entries);
        let policy = self.scheduler.flow_policy(&self.queue);
        let r = c
            .retrying(|| {
                c.protocol
                    .seal_with_policy(q, e, chunks, entries, Some(&policy), &t)
            })
            .await;
        let a = self.check(r)?;
        self.token = None;
        self.next = Step::Finish;
        Ok(self.record.insert(a.record))
    }

    /// Step 7, local: drops the local copy; the offer is Redis's. The scheduler's queue stays
    /// frozen (producers keep getting their values back: route them to the new owner).
    ///
    /// # Errors
    /// [`CustodyError::Step`] before the seal.
    pub fn finish(mut self) -> Result<Offered, CustodyError<K, T>> {
        self.expect(Step::Finish)?;
        let record = self.record.take().ok_or(CustodyError::Step {
            called: "finish",
            expected: "seal",
        })?;
        Ok(Offered {
            record,
            chunks: self.sent as u64,
            entries: self.entries,
        })
    }

    /// Gives up the offer before its seal: `abort` in Redis (PREPARING → OWNED, the chunks
    /// deleted) if it was prepared, then [`Scheduler::unfreeze_queue`] and
    /// [`Scheduler::import`] of every value held here. Returns what the import did.
    ///
    /// # Errors
    /// [`CustodyError::Fenced`] (the values not taken, handed back),
    /// [`CustodyError::Protocol`] (e.g. `Unavailable`: call again), [`CustodyError::Step`]
    /// before the freeze or after the seal.
    pub async fn abort(&mut self) -> Result<Imported<K, T>, CustodyError<K, T>> {
        if self.next == Step::Freeze || self.next >= Step::Finish {
            return Err(CustodyError::Step {
                called: "abort",
                expected: self.next.name(),
            });
        }
        if self.next > Step::Prepare {
            let t = self.token.get_or_insert_with(Token::generate).clone();
            let (c, q, e) = (self.custody, self.queue.as_ref(), self.epoch);
            let r = c.retrying(|| c.protocol.abort(q, e, &t)).await;
            self.check(r)?;
            self.token = None;
        }
        self.next = Step::Ended;
        self.scheduler.unfreeze_queue(&self.queue);
        let mut values: Vec<_> = self.parts.drain(..).flat_map(|p| p.entries).collect();
        values.append(&mut self.unsent);
        Ok(self.scheduler.import(self.queue.clone(), values))
    }

    fn expect(&self, step: Step) -> Result<(), CustodyError<K, T>> {
        if self.next == step {
            Ok(())
        } else {
            Err(CustodyError::Step {
                called: step.name(),
                expected: self.next.name(),
            })
        }
    }

    /// A protocol result; a fenced one ends the offer and hands the values back.
    fn check<R>(&mut self, r: Result<R, Error>) -> Result<R, CustodyError<K, T>> {
        match r {
            Ok(v) => Ok(v),
            Err(e) => match fenced_of(&e) {
                Some((record, taken)) => Err(self.fenced(record, taken)),
                None => Err(CustodyError::Protocol(e)),
            },
        }
    }

    fn fenced(&mut self, record: Record, taken_chunks: u64) -> CustodyError<K, T> {
        self.next = Step::Ended;
        let taken = usize::try_from(taken_chunks)
            .unwrap_or(usize::MAX)
            .min(self.parts.len());
        let mut values: Vec<_> = self
            .parts
            .drain(..)
            .skip(taken)
            .flat_map(|p| p.entries)
            .collect();
        values.append(&mut self.unsent);
        values.extend(self.scheduler.take_forwarded(&self.queue));
        CustodyError::Fenced {
            record: Box::new(record),
            taken_chunks,
            values,
        }
    }

    /// Encodes what is unsent into chunks (one reference reading), after those cut already.
    async fn cut(&mut self) -> Result<(), CustodyError<K, T>> {
        if !self.unsent.is_empty() {
            // The local Instant read before the reference clock: deadlines only move later.
            let (local, reference, _) = self.custody.reference_reading().await?;
            let size = self.custody.options().chunk_entries.max(1);
            let unsent = std::mem::take(&mut self.unsent);
            let mut it = unsent.into_iter().peekable();
            while it.peek().is_some() {
                let entries: Vec<_> = it.by_ref().take(size).collect();
                let index = self.parts.len() as u64;
                let bytes = encode(
                    self.queue.as_ref(),
                    self.epoch,
                    index,
                    &entries,
                    local,
                    reference,
                );
                let bytes = match bytes {
                    Ok(b) => b,
                    Err(error) => {
                        // Keep the timers: the caller can abort and get them back.
                        self.unsent = entries;
                        self.unsent.extend(it);
                        return Err(CustodyError::Chunk { index, error });
                    }
                };
                self.parts.push(Part {
                    entries,
                    bytes: Some(bytes),
                });
            }
        }
        Ok(())
    }

    /// Encodes what is unsent (one reference reading), then sends every unacknowledged chunk.
    async fn send(&mut self) -> Result<(), CustodyError<K, T>> {
        self.cut().await?;
        while self.sent < self.parts.len() {
            let index = self.sent;
            let t = self.token.get_or_insert_with(Token::generate).clone();
            let (c, q, e) = (self.custody, self.queue.as_ref(), self.epoch);
            let n = self.parts[index].entries.len() as u64;
            let bytes = self.parts[index].bytes.as_deref().unwrap_or_default();
            let r = c
                .retrying(|| c.protocol.append(q, e, index as u64, bytes, n, &t))
                .await;
            self.check(r)?;
            self.token = None;
            self.parts[index].bytes = None;
            self.sent += 1;
            self.entries += n;
        }
        Ok(())
    }
}

fn encode<K: Serialize, T: Serialize>(
    queue: &[u8],
    epoch: u64,
    index: u64,
    entries: &[FrozenEntry<K, T>],
    local: Instant,
    reference_us: u64,
) -> Result<Vec<u8>, crate::chunk::ChunkError> {
    let chunk = Chunk {
        version: CHUNK_VERSION,
        queue: queue.to_vec(),
        epoch,
        index,
        entries: entries
            .iter()
            .map(|e| SnapshotEntry {
                id: &e.id,
                deadline_us: to_reference(e.at, local, reference_us),
                value: &e.value,
            })
            .collect(),
    };
    chunk.encode()
}
