//! [`SchedulerBuilder`]: shard count, resolution and clock origin of a [`Scheduler`].

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Scheduler;
use super::types::{BuildError, MAX_SHARDS};
use crate::clock::TickClock;

/// Carries a builder's type parameters without owning (or requiring `Send` of) any value.
type Types<Q, K, T> = fn() -> (Q, K, T);

/// Chooses a [`Scheduler`]'s shard count, resolution and clock origin. Made by
/// [`Scheduler::builder`]; the type parameters are those of the scheduler it builds.
///
/// ```
/// use std::time::Duration;
/// use tickwheel::sync::Scheduler;
///
/// let sched: Scheduler<String, u64, ()> =
///     Scheduler::builder().shards(4).resolution(Duration::from_micros(100)).build();
/// assert_eq!(sched.shards(), 4);
/// assert_eq!(sched.resolution(), Duration::from_micros(100));
/// ```
pub struct SchedulerBuilder<Q, K, T> {
    settings: Settings,
    _types: PhantomData<Types<Q, K, T>>,
}

/// What a builder chooses, apart from its type parameters (so it derives `Clone` and
/// `Debug` without bounds on them).
#[derive(Clone, Debug)]
struct Settings {
    shards: Option<usize>,
    resolution: Duration,
    origin: Option<Instant>,
    name: Option<Arc<str>>,
}

impl<Q, K, T> Clone for SchedulerBuilder<Q, K, T> {
    fn clone(&self) -> Self {
        SchedulerBuilder {
            settings: self.settings.clone(),
            _types: PhantomData,
        }
    }
}

impl<Q, K, T> fmt::Debug for SchedulerBuilder<Q, K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SchedulerBuilder")
            .field(&self.settings)
            .finish()
    }
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> SchedulerBuilder<Q, K, T> {
    /// The defaults: one shard per available core, 1 ms, origin when built.
    pub(crate) fn new() -> Self {
        SchedulerBuilder {
            settings: Settings {
                shards: None,
                resolution: Duration::from_millis(1),
                origin: None,
                name: None,
            },
            _types: PhantomData,
        }
    }

    /// Number of shards: ids are spread over them by hash, each behind its own lock.
    /// Default: the available parallelism (1 if unknown). Must be 1 to [`MAX_SHARDS`].
    pub fn shards(mut self, n: usize) -> Self {
        self.settings.shards = Some(n);
        self
    }

    /// Length of one tick. Deadlines round up to it and `now` rounds down, so a timer fires
    /// between 0 and about one resolution after its deadline. Default: 1 ms. Must not be zero.
    pub fn resolution(mut self, d: Duration) -> Self {
        self.settings.resolution = d;
        self
    }

    /// The instant of tick 0. Default: `Instant::now()` when built. Deadlines before it are
    /// due at once; a `pop_due(now)` with `now` before it finds nothing due.
    pub fn origin(mut self, origin: Instant) -> Self {
        self.settings.origin = Some(origin);
        self
    }

    /// A name for the scheduler, for a program that runs several: the value of the
    /// `scheduler` label on its metrics and the `scheduler` field of its events (features
    /// `metrics` and `tracing`, see [`observe`](super::observe)), and shown by `Debug`.
    /// Default: none (metrics without the label, events with an empty name).
    ///
    /// ```
    /// use tickwheel::sync::Scheduler;
    ///
    /// let sched: Scheduler<String, u64, ()> = Scheduler::builder().name("deferred").build();
    /// assert_eq!(sched.name(), Some("deferred"));
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.settings.name = Some(Arc::from(name.into()));
        self
    }

    /// Builds the scheduler.
    ///
    /// # Panics
    ///
    /// If the shard count is 0 or above [`MAX_SHARDS`], or the resolution is zero or too
    /// long for `Instant` to represent one tick after the origin (`Duration::MAX`);
    /// [`try_build`](Self::try_build) returns a [`BuildError`] instead.
    #[track_caller]
    pub fn build(self) -> Scheduler<Q, K, T> {
        match self.try_build() {
            Ok(sched) => sched,
            Err(e) => panic!("tickwheel: {e}"),
        }
    }

    /// [`build`](Self::build) that reports an invalid setting instead of panicking.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel::sync::{BuildError, Scheduler};
    ///
    /// let r = Scheduler::<u8, u8, ()>::builder().resolution(Duration::ZERO).try_build();
    /// assert_eq!(r.err(), Some(BuildError::Resolution(Duration::ZERO)));
    /// ```
    pub fn try_build(self) -> Result<Scheduler<Q, K, T>, BuildError> {
        let shards = self.settings.shards.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(MAX_SHARDS)
        });
        if shards == 0 || shards > MAX_SHARDS {
            return Err(BuildError::Shards(shards));
        }
        let origin = self.settings.origin.unwrap_or_else(Instant::now);
        let clock = TickClock::try_new(origin, self.settings.resolution)
            .ok_or(BuildError::Resolution(self.settings.resolution))?;
        Ok(Scheduler::with_settings(shards, clock, self.settings.name))
    }
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Default for Scheduler<Q, K, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<Q: Hash + Eq + Clone, K: Hash + Eq + Clone, T> Scheduler<Q, K, T> {
    /// A scheduler with the defaults: one shard per available core, 1 ms resolution, tick 0
    /// now.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A [`SchedulerBuilder`] with the defaults.
    pub fn builder() -> SchedulerBuilder<Q, K, T> {
        SchedulerBuilder::new()
    }
}
