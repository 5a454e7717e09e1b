//! #19, case 1 and the leader's clean-up: a sidecar back from a freeze past its session acts
//! on nothing from before. It accepts no answer, starts nothing and writes nothing of the old
//! session until it has registered again and read the job afresh; a stale write fails on the
//! item's fence instead of removing a live execution's `running` node.

use super::*;
use common::worker::RunEnd;

/// The lines of a sidecar log after `marker` that match `pred`, in order.
fn lines_after<'a>(log: &'a str, marker: &str, pred: impl Fn(&str) -> bool) -> Vec<&'a str> {
    log.lines()
        .skip_while(|l| !l.contains(marker))
        .filter(|l| pred(l))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sidecar_back_from_a_freeze_past_its_session_never_races_the_peer_that_took_over() {
    let zk = ZooKeeper::start().await;
    let ns = "fence-stale";
    let (mut a, b) = pair(&zk, ns).await;
    let config = failover_job("race", 2);
    let wa = TestWorker::subscribe(&a.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    let wb = TestWorker::subscribe(&b.endpoint(), subscribe_request(config))
        .await
        .unwrap();
    wait_n_items(&wa, 1).await;
    wait_n_items(&wb, 1).await;
    // A's worker works long on its item; B's worker takes 3 s per run.
    wa.set_strict(Duration::from_secs(30));
    wb.set_strict(Duration::from_secs(3));
    let item = wa.current_items()[0];
    let zk_ns = zk_client(&zk, ns).await;
    trigger_once(&zk_ns, "race", wa.instance_id()).await;
    wa.wait_for(
        |e| {
            e.iter()
                .any(|(_, e)| matches!(e.event, Some(Event::Trigger(_))))
        },
        WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    // Freeze A past its session: its worker's lease runs out, its session expires, B's worker
    // takes the item over and is still running it when A comes back.
    let frozen = Instant::now();
    a.pause();
    let (took_over, failover) = wait_failover(&wb, item).await;
    a.resume();
    let resumed = Instant::now();
    assert!(
        resumed < took_over + Duration::from_secs(3),
        "A must come back while B's run goes on (B took over {:?} after the freeze, A resumed {:?} after it)",
        took_over - frozen,
        resumed - frozen
    );
    wait_answered(&wb, &failover.execution_id).await;
    let b_run = common::eventually(WAIT, || async {
        wb.strict_runs()
            .into_iter()
            .find(|r| r.execution_id == failover.execution_id && r.reply.is_some())
    })
    .await
    .expect("B's run is answered");
    assert_eq!(
        (b_run.outcome, b_run.reply),
        (Some(RunEnd::Completed), Some(Ok(()))),
        "the stale sidecar must not have taken the item from B's live run"
    );
    // A registered its worker again, and started nothing before that.
    let back = common::eventually(WAIT, || async {
        a.log().contains("new registry session").then_some(())
    })
    .await;
    assert!(
        back.is_some(),
        "A never registered again\n{}",
        a.log_tail(40)
    );
    let log = a.log();
    let resumed_part = log
        .split("ZooKeeper session ended")
        .nth(1)
        .unwrap_or_default();
    let before_register: Vec<&str> = resumed_part
        .lines()
        .take_while(|l| !l.contains("new registry session"))
        .filter(|l| l.contains("execution started") || l.contains("execution finished"))
        .collect();
    assert!(
        before_register
            .iter()
            .all(|l| !l.contains("execution started")),
        "A started work before registering again:\n{}",
        before_register.join("\n")
    );
    let _ = lines_after(&log, "new registry session", |_| true);
    let mut ledger = Ledger::new();
    ledger.record_strict(
        "a",
        &wa.strict_runs(),
        &wa.events(),
        Some(Stop::Sidecar(frozen)),
    );
    ledger.record_strict("b", &wb.strict_runs(), &wb.events(), None);
    ledger.assert_no_overlap();
}
