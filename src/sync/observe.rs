//! Observability of a [`Scheduler`](super::Scheduler): metrics through the
//! [`metrics`](https://docs.rs/metrics) facade (feature `metrics`) and
//! [`tracing`](https://docs.rs/tracing) events (feature `tracing`). Without the features
//! nothing is recorded and nothing is paid: the hooks below are empty inline functions on a
//! zero-sized type, and the scheduler's code is the same as without them.
//!
//! # Metrics (feature `metrics`)
//!
//! Every metric carries the label `scheduler` with the name given to
//! [`SchedulerBuilder::name`](super::SchedulerBuilder::name), or no label without a name.
//! Handles are registered when the scheduler is built, so install the recorder (e.g. a
//! Prometheus exporter) **before** building it; a scheduler built earlier records nothing.
//!
//! | name | kind | unit | what |
//! |---|---|---|---|
//! | `tickwheel_pending` | gauge | timers | pending and forwarded timers: what `len()` counts |
//! | `tickwheel_in_flight` | gauge | timers | timers popped whose `Due` is not done: `in_flight_len()` |
//! | `tickwheel_scheduled_total` | counter | timers | accepted by `schedule` or `import` |
//! | `tickwheel_delivered_total` | counter | timers | `Due`s done (dropped or `into_value`) |
//! | `tickwheel_cancelled_total` | counter | timers | returned by `cancel` |
//! | `tickwheel_drained_total` | counter | timers | returned by `drain_queue` |
//! | `tickwheel_retried_total` | counter | timers | put back by `Due::retry_at` |
//! | `tickwheel_handed_over_total` | counter | timers | taken out by `freeze_queue` or `take_forwarded` |
//! | `tickwheel_lateness_seconds` | histogram | seconds | from a timer's deadline (as given) to the `pop_due` that took it |
//!
//! So `scheduled = delivered + cancelled + drained + handed_over + pending + in_flight` at
//! rest (a timer put back by a dropped `DueBatch` or retried is counted once, when it was
//! scheduled). The gauges are kept by adding and subtracting as timers move, so two
//! schedulers given the same name add up in one gauge. Cost with the feature on: one atomic
//! add per counter or gauge touched (a `schedule` touches two), one histogram record per
//! timer popped, all outside the shard locks except the delivered count, which a done `Due`
//! adds without any lock.
//!
//! # Events (feature `tracing`)
//!
//! One event at `DEBUG` level, target `tickwheel::sync`, per queue-wide operation:
//! `drain_queue` (fields `cancelled`, `in_flight`), `freeze_queue` (`pending`, `in_flight`),
//! `unfreeze_queue` (`pending`: how many went back), `take_forwarded` (`taken`) and `import`
//! (`imported`, `present`, `refused`), each with the field `scheduler` (the name, or empty).
//! The queue name is not a field: `Q` need not be `Debug`, and a feature must not add a
//! bound; record it in a span of your own around the call. Nothing is emitted per timer.

#[cfg(any(feature = "metrics", feature = "tracing"))]
use std::sync::Arc;
use std::time::Instant;

/// The scheduler's metric handles and name; a zero-sized no-op without the features.
#[derive(Clone, Default)]
pub(crate) struct Observer {
    #[cfg(feature = "metrics")]
    handles: Option<Arc<Handles>>,
    #[cfg(feature = "tracing")]
    name: Option<Arc<str>>,
}

#[cfg(feature = "metrics")]
struct Handles {
    pending: ::metrics::Gauge,
    in_flight: ::metrics::Gauge,
    scheduled: ::metrics::Counter,
    delivered: ::metrics::Counter,
    cancelled: ::metrics::Counter,
    drained: ::metrics::Counter,
    retried: ::metrics::Counter,
    handed_over: ::metrics::Counter,
    lateness: ::metrics::Histogram,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").finish_non_exhaustive()
    }
}

impl Observer {
    /// Registers the handles with the installed recorder, labelled with `name`.
    #[cfg_attr(
        not(any(feature = "metrics", feature = "tracing")),
        allow(unused_variables)
    )]
    pub(crate) fn new(name: Option<&str>) -> Self {
        Observer {
            #[cfg(feature = "metrics")]
            handles: Some(Arc::new(Handles::new(name))),
            #[cfg(feature = "tracing")]
            name: name.map(Arc::from),
        }
    }
}

#[cfg(feature = "metrics")]
impl Handles {
    fn new(name: Option<&str>) -> Self {
        use ::metrics::{Label, Unit};
        let labels: Vec<Label> = name
            .map(|n| Label::new("scheduler", n.to_owned()))
            .into_iter()
            .collect();
        let counter = |key: &'static str, what: &'static str| {
            ::metrics::describe_counter!(key, Unit::Count, what);
            ::metrics::counter!(key, labels.iter())
        };
        let gauge = |key: &'static str, what: &'static str| {
            ::metrics::describe_gauge!(key, Unit::Count, what);
            ::metrics::gauge!(key, labels.iter())
        };
        ::metrics::describe_histogram!(
            "tickwheel_lateness_seconds",
            Unit::Seconds,
            "from a timer's deadline to the pop_due that took it"
        );
        Handles {
            pending: gauge("tickwheel_pending", "pending and forwarded timers"),
            in_flight: gauge("tickwheel_in_flight", "timers popped, their Due not done"),
            scheduled: counter("tickwheel_scheduled_total", "timers accepted"),
            delivered: counter("tickwheel_delivered_total", "Dues done"),
            cancelled: counter("tickwheel_cancelled_total", "timers returned by cancel"),
            drained: counter("tickwheel_drained_total", "timers returned by drain_queue"),
            retried: counter("tickwheel_retried_total", "timers put back by retry_at"),
            handed_over: counter(
                "tickwheel_handed_over_total",
                "timers taken out by freeze_queue or take_forwarded",
            ),
            lateness: ::metrics::histogram!("tickwheel_lateness_seconds", labels.iter()),
        }
    }
}

#[cfg(feature = "metrics")]
impl Handles {
    #[inline]
    fn moved(&self, n: usize, count: Option<Count>, from: Place, to: Place) {
        if let Some(count) = count {
            let counter = match count {
                Count::Scheduled => &self.scheduled,
                Count::Delivered => &self.delivered,
                Count::Cancelled => &self.cancelled,
                Count::Drained => &self.drained,
                Count::Retried => &self.retried,
                Count::HandedOver => &self.handed_over,
            };
            counter.increment(n as u64);
        }
        match from {
            Place::Out => {}
            Place::Pending => self.pending.decrement(n as f64),
            Place::InFlight => self.in_flight.decrement(n as f64),
        }
        match to {
            Place::Out => {}
            Place::Pending => self.pending.increment(n as f64),
            Place::InFlight => self.in_flight.increment(n as f64),
        }
    }
}

/// Where a timer is counted: in one of the two gauges, or in neither (not yet scheduled, or
/// gone for good).
#[derive(Clone, Copy)]
enum Place {
    Out,
    Pending,
    InFlight,
}

/// The counter an event adds to.
#[derive(Clone, Copy)]
enum Count {
    Scheduled,
    Delivered,
    Cancelled,
    Drained,
    Retried,
    HandedOver,
}

/// Runs `f` on the handles, if the feature is on.
macro_rules! with_handles {
    ($self:ident, |$h:ident| $body:expr) => {{
        #[cfg(feature = "metrics")]
        if let Some($h) = $self.handles.as_deref() {
            $body;
        }
    }};
}

/// Emits a `tracing` event with the scheduler's name, if the feature is on.
macro_rules! event {
    ($self:ident, $op:literal, $($field:ident = $value:expr),*) => {{
        #[cfg(feature = "tracing")]
        ::tracing::debug!(
            target: "tickwheel::sync",
            scheduler = $self.name.as_deref().unwrap_or(""),
            $($field = $value,)*
            $op
        );
    }};
}

#[cfg_attr(
    not(all(feature = "metrics", feature = "tracing")),
    allow(unused_variables)
)]
impl Observer {
    /// `n` timers accepted.
    #[inline]
    pub(crate) fn scheduled(&self, n: usize) {
        self.moved(n, Some(Count::Scheduled), Place::Out, Place::Pending);
    }

    /// `n` `Due`s done.
    #[inline]
    pub(crate) fn delivered(&self, n: usize) {
        self.moved(n, Some(Count::Delivered), Place::InFlight, Place::Out);
    }

    /// One timer returned by `cancel`.
    #[inline]
    pub(crate) fn cancelled(&self) {
        self.moved(1, Some(Count::Cancelled), Place::Pending, Place::Out);
    }

    /// A drain returned `cancelled` timers and met `in_flight` ones.
    #[inline]
    pub(crate) fn drained(&self, cancelled: usize, in_flight: usize) {
        self.moved(cancelled, Some(Count::Drained), Place::Pending, Place::Out);
        event!(
            self,
            "drain_queue",
            cancelled = cancelled,
            in_flight = in_flight
        );
    }

    /// A freeze took `pending` timers out and met `in_flight` ones.
    #[inline]
    pub(crate) fn frozen(&self, pending: usize, in_flight: usize) {
        self.handed_over(pending);
        event!(
            self,
            "freeze_queue",
            pending = pending,
            in_flight = in_flight
        );
    }

    /// `take_forwarded` took `n` timers out.
    #[inline]
    pub(crate) fn forwarded_taken(&self, n: usize) {
        self.handed_over(n);
        event!(self, "take_forwarded", taken = n);
    }

    /// An unfreeze made `n` forwarded timers pending (they were counted pending already).
    #[inline]
    pub(crate) fn unfrozen(&self, n: usize) {
        event!(self, "unfreeze_queue", pending = n);
    }

    /// An import accepted `imported` entries and handed back the others.
    #[inline]
    pub(crate) fn imported(&self, imported: usize, present: usize, refused: usize) {
        self.scheduled(imported);
        event!(
            self,
            "import",
            imported = imported,
            present = present,
            refused = refused
        );
    }

    /// `n` timers moved from `from` to `to`, counted in `count` if given. Every metric
    /// event is such a move, which keeps the identity in the module docs.
    #[inline]
    fn moved(&self, n: usize, count: Option<Count>, from: Place, to: Place) {
        with_handles!(self, |h| h.moved(n, count, from, to));
    }

    #[inline]
    fn handed_over(&self, n: usize) {
        self.moved(n, Some(Count::HandedOver), Place::Pending, Place::Out);
    }

    /// A `pop_due` at `now` took timers with these deadlines.
    #[inline]
    pub(crate) fn popped(&self, now: Instant, deadlines: impl Iterator<Item = Instant>) {
        with_handles!(self, |h| {
            let mut n = 0usize;
            for at in deadlines {
                h.lateness
                    .record(now.saturating_duration_since(at).as_secs_f64());
                n += 1;
            }
            h.moved(n, None, Place::Pending, Place::InFlight);
        });
    }

    /// `n` in-flight timers went back (a dropped `DueBatch`), pending or forwarded.
    #[inline]
    pub(crate) fn put_back(&self, n: usize) {
        self.moved(n, None, Place::InFlight, Place::Pending);
    }

    /// One in-flight timer retried (pending or forwarded again).
    #[inline]
    pub(crate) fn retried(&self) {
        self.moved(1, Some(Count::Retried), Place::InFlight, Place::Pending);
    }
}
