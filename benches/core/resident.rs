//! The resident figure: hand-off times of a resident job's items. Two sidecars on ZooKeeper,
//! one job of 6 items held by two strict workers (one per sidecar; they hold an item until it
//! is revoked, then decline it). In each round a third worker joins on the second sidecar and
//! later leaves (its stream closed). A join is measured from its `Subscribe` to each item it
//! takes being held by it (its RESIDENT trigger received); a leave from the stream's close to
//! each of its items being held by one of the others. Every hand-off includes the old holder's
//! decline (join) and the leader's reshard (both).

use std::time::{Duration, Instant};

use crate::common::{
    job_config, subscribe_request, Sidecar, SidecarOptions, TestWorker, ZooKeeper,
};
use shardcar::proto::{JobConfig, TriggerSource};

const HOLD: Duration = Duration::from_secs(3600);
const WAIT: Duration = Duration::from_secs(30);

/// When `w` started holding `item` (a RESIDENT trigger received after `since`), if it has.
fn held_since(w: &TestWorker, item: i32, since: Instant) -> Option<Instant> {
    w.strict_runs()
        .into_iter()
        .filter(|r| r.source == TriggerSource::Resident as i32 && r.start >= since)
        .filter(|r| r.items == [item] && r.end.is_none())
        .map(|r| r.start)
        .min()
}

/// The items `w` holds now.
fn holds(w: &TestWorker) -> Vec<i32> {
    w.strict_runs()
        .into_iter()
        .filter(|r| r.end.is_none() && r.outcome.is_none())
        .flat_map(|r| r.items)
        .collect()
}

async fn until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "{what} within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

pub async fn bench_resident(zk: &ZooKeeper, rounds: usize) {
    let mut cars = Vec::new();
    for ip in ["127.0.0.2", "127.0.0.3"] {
        cars.push(
            Sidecar::start(SidecarOptions {
                namespace: "bench-resident".into(),
                log_level: "warn".into(),
                ..SidecarOptions::zk(zk.connect_string(), ip)
            })
            .await,
        );
    }
    let config = JobConfig {
        resident: true,
        ..job_config("held", "", 6)
    };
    let hold = |car: &Sidecar| {
        let (endpoint, request) = (car.endpoint(), subscribe_request(config.clone()));
        async move { TestWorker::subscribe_strict(&endpoint, request, HOLD).await }
    };
    let a = hold(&cars[0]).await.expect("a worker");
    let b = hold(&cars[1]).await.expect("a worker");
    until("six items held", || {
        (holds(&a).len() + holds(&b).len() == 6).then_some(())
    })
    .await;
    let (mut join, mut leave) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let subscribed = Instant::now();
        let mut c = hold(&cars[1]).await.expect("the joiner");
        let taken = until("the joiner's share", || {
            let h = holds(&c);
            (h.len() == 2).then_some(h)
        })
        .await;
        for item in &taken {
            let at = held_since(&c, *item, subscribed).expect("held");
            join.push(at.duration_since(subscribed).as_secs_f64() * 1000.0);
        }
        until("the others settled", || {
            (holds(&a).len() + holds(&b).len() == 4).then_some(())
        })
        .await;
        let closed = Instant::now();
        c.close().await;
        for item in taken {
            let at = until("the item held again", || {
                held_since(&a, item, closed).or_else(|| held_since(&b, item, closed))
            })
            .await;
            leave.push(at.duration_since(closed).as_secs_f64() * 1000.0);
        }
        until("six items held again", || {
            (holds(&a).len() + holds(&b).len() == 6).then_some(())
        })
        .await;
    }
    super::report(
        "resident: a worker joins -> each item it takes held by it (6 items, 2 -> 3 workers)",
        "ms",
        join,
    );
    super::report(
        "resident: a worker leaves -> each of its items held by another (3 -> 2 workers)",
        "ms",
        leave,
    );
}
