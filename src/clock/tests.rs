//! The tick conversions against exact `u128` arithmetic at the edges and under proptest,
//! and the `TimerWheel`'s never-early and quiet-poll contracts.

use proptest::prelude::*;

use super::*;

/// The exact conversions the fast path must agree with: `u128` division, as before it.
/// The rule: round up; a tick of `u64::MAX` or more, or one `Instant` cannot represent the
/// start of, is the never-due tick `u64::MAX`.
fn exact_deadline_tick(c: &TickClock, at: Instant) -> u64 {
    let nanos = at.saturating_duration_since(c.origin).as_nanos();
    match u64::try_from(nanos.div_ceil(c.resolution_nanos)) {
        Ok(tick) if tick < u64::MAX && exact_instant_of(c, tick).is_some() => tick,
        _ => u64::MAX,
    }
}

fn exact_now_tick(c: &TickClock, at: Instant) -> Option<u64> {
    let ticks = at.checked_duration_since(c.origin)?.as_nanos() / c.resolution_nanos;
    Some(u64::try_from(ticks).map_or(TickClock::MAX_NOW_TICK, |t| t.min(TickClock::MAX_NOW_TICK)))
}

fn exact_instant_of(c: &TickClock, tick: u64) -> Option<Instant> {
    let nanos = u128::from(tick).checked_mul(c.resolution_nanos)?;
    c.origin.checked_add(nanos_to_duration(nanos)?)
}

/// Divisors and dividends at the edges of the reciprocal: powers of two and their
/// neighbours, whole and odd millisecond multiples, and both ends of `u64`.
fn edge_u64s() -> Vec<u64> {
    let mut v = vec![1, 2, 3, 5, 7, 10, 999_999, 1_000_000, 1_000_001, 1_500_000];
    v.extend([
        700_001,
        1_000_000_000,
        3_600_000_000_000,
        u64::MAX,
        u64::MAX - 1,
    ]);
    for bit in 0..64 {
        let p = 1u64 << bit;
        v.extend([p, p - 1, p + 1]);
    }
    v.extend([
        u64::MAX / 3,
        u64::MAX / 1_000_000,
        18_446_744_072_999_999_999,
    ]);
    v
}

#[test]
fn reciprocal_divides_exactly_at_the_edges() {
    let edges = edge_u64s();
    for &d in edges.iter().filter(|&&d| d > 0) {
        let r = Reciprocal::new(d);
        for &n in &edges {
            for n in [n, n.wrapping_sub(1) % d, (n / d).wrapping_mul(d)] {
                assert_eq!(r.div_floor(n), n / d, "floor {n} / {d} ({r:?})");
                assert_eq!(r.div_ceil(n), n.div_ceil(d), "ceil {n} / {d} ({r:?})");
            }
        }
    }
}

/// A resolution in nanoseconds: tiny, whole and odd milliseconds, anything in `u64`, or
/// longer than a `u64` of nanoseconds (the exact path).
fn resolution() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (1u64..=10).prop_map(Duration::from_nanos),
        (1u64..=100).prop_map(Duration::from_millis),
        (1u64..=10_000_000).prop_map(Duration::from_nanos),
        any::<u64>().prop_map(|n| Duration::from_nanos(n.max(1))),
        (0u32..64).prop_map(|b| Duration::from_nanos(1 << b)),
        (u64::MAX / 1_000_000_000..=u64::MAX).prop_map(Duration::from_secs),
        Just(Duration::MAX),
    ]
}

/// An offset from the origin: small, any `u64` of nanoseconds, around the 584-year edge
/// of the fast path, or far beyond it.
fn offset() -> impl Strategy<Value = Duration> {
    const EDGE_SECS: u64 = u64::MAX / 1_000_000_000;
    prop_oneof![
        (0u64..100_000_000).prop_map(Duration::from_nanos),
        any::<u64>().prop_map(Duration::from_nanos),
        (EDGE_SECS - 2..=EDGE_SECS + 2, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        (0u64..1 << 40, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// `deadline` and `poll` agree, whatever the resolution and however far the deadline: a
    /// reported deadline instant fires the timer and nothing before the asked instant does;
    /// no reported instant means no poll ever fires it.
    #[test]
    fn deadline_and_poll_agree(res in resolution(), after in offset(), extra in offset()) {
        let origin = Instant::now();
        let Some(at) = origin.checked_add(after) else { return Ok(()) };
        let Some(clock) = TickClock::try_new(origin, res) else { return Ok(()) };
        let mut timers = TimerWheel::with_origin(origin, clock.resolution());
        let key = timers.insert_at(at, ());
        match timers.deadline(key) {
            Some(d) => {
                prop_assert!(d >= at, "deadline {:?} before the asked {:?}", d, at);
                if let Some(before) = at.checked_sub(Duration::from_nanos(1)) {
                    prop_assert!(timers.poll(before).is_none(), "early");
                }
                prop_assert_eq!(timers.poll(d).map(|e| e.key), Some(key));
            }
            None => {
                prop_assert_eq!(timers.wheel().deadline(key), Some(u64::MAX));
                for now in [Some(at), at.checked_add(extra), Some(clock.instant_saturating(u64::MAX))] {
                    let Some(now) = now else { continue };
                    prop_assert!(timers.poll(now).is_none(), "a never-due timer fired at {:?}", now);
                }
                prop_assert!(timers.contains(key));
                if let Some(next) = timers.next_deadline() {
                    prop_assert!(timers.poll(next).is_none());
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn reciprocal_matches_division(d in 1u64.., n in any::<u64>()) {
        let r = Reciprocal::new(d);
        prop_assert_eq!(r.div_floor(n), n / d);
        prop_assert_eq!(r.div_ceil(n), n.div_ceil(d));
    }

    #[test]
    fn fast_conversions_match_the_exact_ones(
        res in resolution(),
        after in offset(),
        before in 0u64..1 << 34,
        ahead in any::<bool>(),
    ) {
        // Instants after the origin, and (with an origin moved ahead) before it.
        let base = Instant::now();
        let Some(origin) = base.checked_add(Duration::from_nanos(if ahead { before } else { 0 })) else {
            return Ok(());
        };
        let Some(c) = TickClock::try_new(origin, res) else {
            prop_assert!(origin.checked_add(res).is_none(), "refused {:?}", res);
            return Ok(());
        };
        for at in [base.checked_add(after), Some(base), origin.checked_add(after)] {
            let Some(at) = at else { continue };
            prop_assert_eq!(c.deadline_tick(at), exact_deadline_tick(&c, at), "deadline {:?}", at);
            prop_assert_eq!(c.now_tick(at), exact_now_tick(&c, at), "now {:?}", at);
            let tick = c.deadline_tick(at);
            for tick in [tick, tick.saturating_add(1), tick / 2] {
                prop_assert_eq!(c.instant_of(tick), exact_instant_of(&c, tick), "tick {}", tick);
            }
        }
    }
}

#[test]
fn deadline_rounds_up_and_now_rounds_down() {
    let origin = Instant::now();
    let clock = TickClock::new(origin, Duration::from_millis(10));
    let at = |ms: u64| origin + Duration::from_micros(ms * 1000);
    assert_eq!(clock.deadline_tick(at(0)), 0);
    assert_eq!(clock.deadline_tick(at(1)), 1);
    assert_eq!(clock.deadline_tick(at(10)), 1);
    assert_eq!(clock.deadline_tick(at(11)), 2);
    assert_eq!(clock.now_tick(at(19)), Some(1));
    assert_eq!(clock.now_tick(at(20)), Some(2));
}

#[test]
fn before_origin_is_tick_zero_and_far_saturates() {
    let origin = Instant::now() + Duration::from_secs(100);
    let clock = TickClock::new(origin, Duration::from_nanos(1));
    assert_eq!(clock.deadline_tick(Instant::now()), 0);
    assert_eq!(
        clock.now_tick(Instant::now()),
        None,
        "before the origin nothing is due"
    );
    let far = origin + Duration::from_secs(1 << 40); // 2^40 s = 1.1e21 ns > u64::MAX
    assert_eq!(clock.deadline_tick(far), u64::MAX);
    assert_eq!(clock.now_tick(far), Some(TickClock::MAX_NOW_TICK));
    let mut timers = TimerWheel::with_origin(origin, Duration::from_nanos(1));
    timers.insert_at(far + Duration::from_secs(1), "far");
    timers.insert_at(Instant::now(), "before origin");
    assert!(
        timers.poll(Instant::now()).is_none(),
        "a now before the origin fires nothing"
    );
    assert_eq!(timers.poll(origin).map(|e| e.value), Some("before origin"));
    assert!(
        timers.poll(far).is_none(),
        "a saturated deadline never fires early"
    );
}

#[test]
fn instant_of_inverts_deadline_tick_on_boundaries() {
    let origin = Instant::now();
    let clock = TickClock::new(origin, Duration::from_micros(1500));
    for tick in [0u64, 1, 63, 64, 4096, 1 << 30] {
        let at = clock.instant_of(tick).unwrap();
        assert_eq!(clock.deadline_tick(at), tick);
        assert_eq!(clock.now_tick(at), Some(tick));
    }
}

#[test]
fn never_early_across_sub_tick_offsets() {
    let o = Instant::now();
    let c = TickClock::new(o, Duration::from_micros(700));
    for at_ns in (0..5_000_000u64).step_by(37_813) {
        let at = o + Duration::from_nanos(at_ns);
        let tick = c.deadline_tick(at);
        assert!(
            c.instant_saturating(tick) >= at,
            "tick {tick} starts before {at_ns} ns"
        );
        for now_ns in (0..5_000_000u64).step_by(41_011) {
            let now = o + Duration::from_nanos(now_ns);
            if c.now_tick(now).is_some_and(|n| n >= tick) {
                assert!(
                    now >= at,
                    "would fire at {now_ns} ns a timer due at {at_ns} ns"
                );
            }
        }
    }
}

#[test]
fn instant_saturating_round_trips_and_stops_at_the_end_of_the_range() {
    let o = Instant::now();
    let c = TickClock::new(o, Duration::from_millis(1));
    assert_eq!(c.instant_saturating(0), o);
    assert_eq!(c.instant_saturating(1500), o + Duration::from_millis(1500));
    assert_eq!(c.deadline_tick(c.instant_saturating(77)), 77);
    let top = c.instant_saturating(u64::MAX);
    assert!(top >= o + Duration::from_secs(1 << 20));
    let coarse = TickClock::new(o, Duration::from_nanos(u64::MAX));
    let end = coarse.instant_saturating(u64::MAX);
    assert!(end >= o);
    assert!(
        coarse.instant_of(u64::MAX).is_none() || end == coarse.instant_of(u64::MAX).unwrap_or(end)
    );
}

#[test]
fn try_new_rejects_zero_and_unrepresentable_resolutions() {
    let o = Instant::now();
    assert!(TickClock::try_new(o, Duration::ZERO).is_none());
    assert!(
        TickClock::try_new(o, Duration::MAX).is_none(),
        "tick 1 would lie past the end of Instant: no timer could ever fire"
    );
    let long = Duration::from_secs(1000 * 365 * 86_400);
    let huge = TickClock::try_new(o, long).expect("a 1000-year tick is representable");
    assert_eq!(huge.resolution(), long);
    assert_eq!(huge.deadline_tick(o + Duration::from_nanos(1)), 1);
    assert_eq!(huge.instant_of(1), Some(o + long));
    assert!(huge.instant_saturating(u64::MAX) >= o, "no overflow panic");
}

#[test]
#[should_panic(expected = "resolution must be")]
fn zero_resolution_panics_with_message() {
    let _ = TickClock::new(Instant::now(), Duration::ZERO);
}

#[test]
#[should_panic(expected = "resolution must be")]
fn unrepresentable_resolution_panics_with_message() {
    let _ = TimerWheel::<()>::new(Duration::MAX);
}

/// The case that had `deadline` say 1 754 years while no poll ever fired the timer: a
/// deadline past `u64::MAX` ticks is never due, and says so.
#[test]
fn a_saturated_deadline_is_never_due_and_reported_so() {
    let o = Instant::now();
    let mut timers = TimerWheel::with_origin(o, Duration::from_nanos(3));
    let Some(far) = o.checked_add(Duration::from_secs(100_000 * 365 * 86_400)) else {
        return; // `Instant` ends before 100 000 years: nothing to check here.
    };
    let key = timers.insert_at(far, "far");
    assert_eq!(
        timers.wheel().deadline(key),
        Some(u64::MAX),
        "never-due tick"
    );
    assert_eq!(timers.deadline(key), None, "no deadline instant");
    assert!(timers.contains(key));
    for at in [far, o + Duration::from_secs(1754 * 365 * 86_400 + 86_400)] {
        assert!(timers.poll(at).is_none(), "never fires, at {at:?}");
    }
    assert_eq!(timers.next_deadline(), None, "nothing will ever fire");
    let near = timers.insert_at(o + Duration::from_secs(1), "near");
    let d = timers
        .deadline(near)
        .expect("a near deadline has an instant");
    assert!(d >= o + Duration::from_secs(1) && d < o + Duration::from_nanos(1_000_000_003));
    assert!(timers.next_deadline().is_some());
    assert_eq!(timers.cancel(key), Some("far"));
}

/// The quiet tick a poll leaves behind never hides a timer that an insert, a reset or
/// a change through `wheel_mut` made due earlier.
#[test]
fn quiet_polls_see_earlier_inserts_resets_and_wheel_changes() {
    let o = Instant::now();
    let ms = |n: u64| o + Duration::from_millis(n);
    let mut timers = TimerWheel::with_origin(o, Duration::from_millis(1));
    let late = timers.insert_at(ms(1000), "late");
    assert!(timers.poll(ms(10)).is_none(), "sets the quiet tick");
    assert!(timers.poll(ms(11)).is_none(), "quiet");
    timers.insert_at(ms(5), "past");
    assert_eq!(timers.poll(ms(12)).map(|e| e.value), Some("past"));
    assert!(timers.poll(ms(12)).is_none());
    timers.insert_at(ms(20), "sooner");
    assert!(timers.poll(ms(19)).is_none());
    assert_eq!(timers.poll(ms(20)).map(|e| e.value), Some("sooner"));
    assert!(timers.poll(ms(21)).is_none());
    assert!(timers.reset_at(late, ms(30)));
    assert_eq!(timers.poll(ms(30)).map(|e| e.value), Some("late"));
    let mut out = Vec::new();
    timers.insert_at(ms(500), "far");
    assert_eq!(timers.poll_into(ms(31), 8, &mut out), 0);
    timers.wheel_mut().insert(40, "raw");
    assert_eq!(timers.poll_into(ms(40), 8, &mut out), 1);
    assert_eq!(out.pop().map(|e| e.value), Some("raw"));
    timers.clear();
    timers.insert_at(ms(41), "after clear");
    assert_eq!(timers.poll(ms(41)).map(|e| e.value), Some("after clear"));
}

#[test]
fn never_early_across_sub_tick_instants() {
    let origin = Instant::now();
    let mut timers = TimerWheel::with_origin(origin, Duration::from_millis(1));
    for us in [1u64, 999, 1000, 1001, 1999, 2000] {
        timers.insert_at(origin + Duration::from_micros(us), us);
    }
    let mut t = 0;
    while t <= 3000 {
        let now = origin + Duration::from_micros(t);
        while let Some(e) = timers.poll(now) {
            assert!(e.value <= t, "timer for {}us fired at {t}us", e.value);
        }
        t += 7;
    }
    assert!(timers.is_empty());
}

#[test]
fn with_capacity_and_reserve_make_room_and_keep_the_clock() {
    let before = Instant::now();
    let mut timers = TimerWheel::with_capacity(100, Duration::from_micros(250));
    let origin = timers.clock().origin();
    assert!(before <= origin && origin <= Instant::now(), "starts now");
    assert_eq!(timers.clock().resolution(), Duration::from_micros(250));
    let room = timers.capacity();
    assert!(room >= 100, "room for 100, got {room}");
    for i in 0..100u64 {
        timers.insert_at(origin + Duration::from_millis(i), i);
    }
    assert_eq!(timers.capacity(), room, "100 inserts did not reallocate");
    assert!(TimerWheel::<u8>::with_capacity(0, Duration::from_millis(1)).is_empty());

    // A reserve keeps the remembered next expiration, and polls stay exact around it.
    let ms = |n: u64| origin + Duration::from_millis(n);
    assert_eq!(timers.poll(ms(0)).map(|e| e.value), Some(0));
    timers.reserve(1_000);
    assert!(timers.capacity() >= timers.len() + 1_000);
    let fired: Vec<u64> = std::iter::from_fn(|| timers.poll(ms(99)))
        .map(|e| e.value)
        .collect();
    assert_eq!(fired, (1..100).collect::<Vec<_>>());
    assert!(timers.poll(ms(1_000)).is_none(), "quiet once empty");
    timers.reserve(10);
    timers.insert_at(ms(1_001), 7);
    assert_eq!(timers.poll(ms(1_001)).map(|e| e.value), Some(7));
}

#[test]
#[should_panic(expected = "resolution")]
fn with_capacity_panics_on_a_zero_resolution() {
    let _ = TimerWheel::<()>::with_capacity(10, Duration::ZERO);
}
