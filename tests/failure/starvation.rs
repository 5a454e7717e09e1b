//! #9, defect 2: failover is not starved by a misfire loop. Two members, 4 items firing every
//! 5 s and taking 3 s each, failover on; the member running two items is killed. The survivor
//! runs them as FAILOVER as soon as its session-expiry wait and its own current run allow, and
//! a catch-up run follows only a fire instant that was actually missed.

use super::*;
use common::worker::RunEnd;
use std::time::{SystemTime, UNIX_EPOCH};

const RUN: Duration = Duration::from_secs(3);

/// Whether a fire instant of `0/5 * * * * ?` (a wall-clock second divisible by 5) fell within
/// `[start, end]`, give or take 200 ms; `anchor` maps this process's monotonic clock to the wall.
fn fire_passed(anchor: (Instant, SystemTime), start: Instant, end: Instant) -> bool {
    let wall_ms = |t: Instant| {
        let wall = anchor.1 + t.saturating_duration_since(anchor.0);
        let wall = wall - anchor.0.saturating_duration_since(t);
        wall.duration_since(UNIX_EPOCH).unwrap().as_millis()
    };
    let (from, to) = (wall_ms(start).saturating_sub(200), wall_ms(end) + 200);
    from.div_ceil(5000) * 5000 <= to
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_members_items_run_as_failover_before_any_catch_up_loop() {
    let anchor = (Instant::now(), SystemTime::now());
    let zk = ZooKeeper::start().await;
    let ns = "starve";
    let (mut a, b) = pair(&zk, ns).await;
    let config = JobConfig {
        failover: true,
        ..job_config("starve", "0/5 * * * * ?", 4)
    };
    let wa = TestWorker::subscribe_strict(&a.endpoint(), subscribe_request(config.clone()), RUN)
        .await
        .unwrap();
    let wb = TestWorker::subscribe_strict(&b.endpoint(), subscribe_request(config), RUN)
        .await
        .unwrap();
    wait_n_items(&wa, 2).await;
    wait_n_items(&wb, 2).await;
    // Kill A one second into a run of its items.
    let run = common::eventually(Duration::from_secs(20), || async {
        wa.strict_runs().into_iter().find(|r| r.items.len() == 2)
    })
    .await
    .expect("A runs its two items");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed = Instant::now();
    a.kill();
    for item in &run.items {
        let (at, _) = wait_failover(&wb, *item).await;
        let took = at - killed;
        eprintln!("member SIGKILL -> FAILOVER of item {item}: {took:?}");
        // The session (4 s, expired within a ZooKeeper tick), then at most B's current run.
        assert!(
            took < Duration::from_secs(4) + RUN + Duration::from_millis(1500),
            "item {item} waited {took:?} for its FAILOVER run\n{}",
            wb.summary()
        );
    }
    // Both of A's items were taken in one FAILOVER execution (an idle member takes every
    // flagged item it can, not one per run).
    let failovers: Vec<_> = wb
        .strict_runs()
        .into_iter()
        .filter(|r| r.source == TriggerSource::Failover as i32)
        .collect();
    assert_eq!(failovers.len(), 1, "{}", wb.summary());
    // A catch-up follows only a run during which a fire instant (every 5 s) passed: no MISFIRE
    // run right after a MISFIRE run that no fire instant fell into (a 3 s run may well span one).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let runs: Vec<_> = wb
        .strict_runs()
        .into_iter()
        .filter(|r| r.outcome != Some(RunEnd::Declined))
        .collect();
    for pair in runs.windows(2) {
        if pair[1].source == TriggerSource::Misfire as i32
            && pair[0].source == TriggerSource::Misfire as i32
        {
            let (s, e) = (pair[0].start, pair[0].end.unwrap_or(pair[0].start));
            assert!(
                fire_passed(anchor, s, e),
                "a MISFIRE run followed a MISFIRE run during which no fire passed\n{}",
                wb.summary()
            );
        }
    }
    let mut ledger = Ledger::new();
    ledger.record_strict(
        "a",
        &wa.strict_runs(),
        &wa.events(),
        Some(Stop::Sidecar(killed)),
    );
    ledger.record_strict("b", &wb.strict_runs(), &wb.events(), None);
    ledger.assert_no_overlap();
    assert!(ledger.assert_fencing_store_accepts_every_write() > 0);
}
