//! The retry figure: how late a failed item's RETRY trigger reaches its worker after the end of
//! its backoff. One sidecar on ZooKeeper, a job of one item retried up to 100 runs in all
//! after a constant 200 ms backoff; the worker fails every run at once. Each retry is measured
//! from the moment the worker sent the failure plus the backoff (the sidecar sets the due time
//! a little later, when it decides on the answer, so the figure is an upper bound) to the
//! RETRY trigger's arrival: the failure's write, the wake at the due time, the retry's start
//! write and the gRPC hop. A first round warms ZooKeeper up and is left out.

use std::time::{Duration, Instant};

use crate::common::{
    job_config, subscribe_request, Sidecar, SidecarOptions, TestWorker, ZooKeeper,
};
use shardcar::proto::{JobConfig, RetryPolicy, TriggerSource};

const BACKOFF: Duration = Duration::from_millis(200);

pub async fn bench_retry(zk: &ZooKeeper, rounds: usize) {
    let car = Sidecar::start(SidecarOptions {
        namespace: "bench-retry".into(),
        log_level: "warn".into(),
        ..SidecarOptions::zk(zk.connect_string(), "127.0.0.2")
    })
    .await;
    let config = JobConfig {
        retry: Some(RetryPolicy {
            max_attempts: 100,
            initial_backoff: prost_types::Duration::try_from(BACKOFF).ok(),
            max_backoff: prost_types::Duration::try_from(BACKOFF).ok(),
            multiplier: 1.0,
        }),
        ..job_config("retry", super::NEVER, 1)
    };
    let w = TestWorker::subscribe(&car.endpoint(), subscribe_request(config))
        .await
        .expect("a worker");
    w.wait_items(|i| i.len() == 1, Duration::from_secs(30))
        .await
        .expect("the item");
    let mut late = Vec::new();
    // The first round warms ZooKeeper's JIT up (its writes take up to 200 ms at first, which
    // is ZooKeeper's time, not the sidecar's) and is not counted.
    for round in 0..=rounds {
        if round == 1 {
            late.clear();
        }
        super::trigger_once(zk, "bench-retry", "retry", w.instance_id()).await;
        // The first run and its 99 retries, every one failed.
        let mut due: Option<Instant> = None;
        for attempt in 0..100u32 {
            let t = w
                .next_trigger(Duration::from_secs(30))
                .await
                .expect("the next run");
            assert_eq!(t.attempt, attempt, "runs come in attempt order");
            if let Some(due) = due {
                assert_eq!(t.source, TriggerSource::Retry as i32);
                let arrived = w
                    .triggers()
                    .into_iter()
                    .find(|(_, r)| r.execution_id == t.execution_id)
                    .map(|(at, _)| at)
                    .expect("recorded");
                late.push(arrived.saturating_duration_since(due).as_secs_f64() * 1000.0);
            }
            let sent = Instant::now();
            w.report_failure(&t.execution_id, 0, "failing on purpose")
                .await
                .expect("the failure recorded");
            due = Some(sent + BACKOFF);
        }
    }
    super::report(
        "retry: backoff's end -> RETRY trigger received (200 ms backoff, 1 sidecar)",
        "ms",
        late,
    );
}
