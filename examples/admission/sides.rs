//! The three sides the example runs: tickwheel's admission, tokio's semaphores, and the
//! tasks' harness alone.

use super::*;

// ---------------------------------------------------------------------------------------------
// tickwheel
// ---------------------------------------------------------------------------------------------

pub(crate) async fn tickwheel_side(args: Args, reqs: Arc<Vec<Request>>) -> Outcome {
    let global = Limit::new(args.global);
    let queues: Arc<Vec<AdmissionQueue>> = Arc::new(
        (0..args.connections)
            .map(|_| {
                AdmissionQueue::with_options(args.local, Some(global.clone()), Order::Strict, TICK)
            })
            .collect(),
    );
    let in_use = Arc::new(InUse::new(&args));
    let start = Instant::now();
    let in_flight = match in_flight(&args, |conn, amount| {
        queues[conn]
            .acquire(amount, start)
            .map_err(|e| format!("in-flight setup refused: {e}"))
    }) {
        Ok(permits) => permits,
        Err(msg) => return (Vec::new(), false, Some(msg)),
    };
    let mut tasks = Vec::with_capacity(reqs.len());
    for r in reqs.iter().copied() {
        let deadline = Instant::now() + r.deadline_after;
        let acquire = queues[r.conn].acquire_async(r.amount, deadline);
        let in_use = in_use.clone();
        tasks.push(tokio::spawn(async move {
            let Some(result) = unless_given_up(r, acquire).await else {
                return (End::Cancelled, None);
            };
            match result {
                Ok(permit) => {
                    in_use.take(r.conn, permit.amount());
                    (End::Granted, Some(permit))
                }
                Err(AcquireError::Expired) => (
                    End::Expired {
                        late_ticks: late_ticks(deadline),
                    },
                    None,
                ),
                Err(AcquireError::Cancelled) => (End::Cancelled, None),
                // Refused, or an error of a later version.
                Err(e) => panic!("a valid request failed: {e}"),
            }
        }));
    }
    let ends = burst_then_ends(start, in_flight, tasks, &reqs, &in_use, |_, p| p.amount()).await;
    let mut leak = None;
    for (i, q) in queues.iter().enumerate() {
        if (q.available(), q.held(), q.waiting()) != (args.local, 0, 0) {
            leak = Some(format!(
                "connection {i}: available {}, held {}, waiting {}",
                q.available(),
                q.held(),
                q.waiting()
            ));
        }
    }
    if global.available() != args.global {
        leak = Some(format!(
            "global: {} of {} back",
            global.available(),
            args.global
        ));
    }
    (ends, in_use.over.load(Relaxed), leak)
}

// ---------------------------------------------------------------------------------------------
// tokio: a Semaphore per connection and one global, local first, under one timeout
// ---------------------------------------------------------------------------------------------

pub(crate) async fn tokio_side(args: Args, reqs: Arc<Vec<Request>>) -> Outcome {
    let global = Arc::new(Semaphore::new(args.global as usize));
    let conns: Arc<Vec<Arc<Semaphore>>> = Arc::new(
        (0..args.connections)
            .map(|_| Arc::new(Semaphore::new(args.local as usize)))
            .collect(),
    );
    let in_use = Arc::new(InUse::new(&args));
    let start = Instant::now();
    let in_flight = match in_flight(&args, |conn, amount| {
        let amount = amount as u32; // at most MAX_AMOUNT
        let local = conns[conn].clone().try_acquire_many_owned(amount);
        let global = global.clone().try_acquire_many_owned(amount);
        match (local, global) {
            (Ok(l), Ok(g)) => Ok((l, g)),
            _ => Err("in-flight setup refused".to_owned()),
        }
    }) {
        Ok(permits) => permits,
        Err(msg) => return (Vec::new(), false, Some(msg)),
    };
    let mut tasks = Vec::with_capacity(reqs.len());
    for r in reqs.iter().copied() {
        let deadline = Instant::now() + r.deadline_after;
        let (local, global, in_use) = (conns[r.conn].clone(), global.clone(), in_use.clone());
        tasks.push(tokio::spawn(async move {
            let amount = r.amount as u32;
            let both = async move {
                let l = local.acquire_many_owned(amount).await.ok()?;
                let g = global.acquire_many_owned(amount).await.ok()?;
                Some((l, g))
            };
            let timed = tokio::time::timeout_at(deadline.into(), both);
            let Some(result) = unless_given_up(r, timed).await else {
                return (End::Cancelled, None);
            };
            match result {
                Ok(Some(permits)) => {
                    in_use.take(r.conn, r.amount);
                    (End::Granted, Some(permits))
                }
                Ok(None) => (End::Cancelled, None),
                Err(_) => (
                    End::Expired {
                        late_ticks: late_ticks(deadline),
                    },
                    None,
                ),
            }
        }));
    }
    let ends = burst_then_ends(start, in_flight, tasks, &reqs, &in_use, |r, _| r.amount).await;
    let mut leak = None;
    if global.available_permits() as u64 != args.global {
        leak = Some(format!(
            "global: {} of {} back",
            global.available_permits(),
            args.global
        ));
    }
    if let Some(i) = conns
        .iter()
        .position(|s| s.available_permits() as u64 != args.local)
    {
        leak = Some(format!(
            "connection {i}: {} of {} back",
            conns[i].available_permits(),
            args.local
        ));
    }
    (ends, in_use.over.load(Relaxed), leak)
}

// ---------------------------------------------------------------------------------------------
// The harness alone: the same tasks with an admission that is ready at once
// ---------------------------------------------------------------------------------------------

/// The waiters' tasks as both sides run them (spawn, the give-up `Sleep`, `select!`, join),
/// each admitted at once: what neither side's admission costs, subtracted in the report.
pub(crate) async fn harness_side(_args: Args, reqs: Arc<Vec<Request>>) -> Outcome {
    let tasks: Vec<_> = reqs
        .iter()
        .copied()
        .map(|r| {
            tokio::spawn(async move {
                match unless_given_up(r, std::future::ready(())).await {
                    Some(()) => End::Granted,
                    None => End::Cancelled,
                }
            })
        })
        .collect();
    let mut ends = Vec::with_capacity(tasks.len());
    for task in tasks {
        ends.push(task.await.expect("harness task"));
    }
    (ends, false, None)
}
