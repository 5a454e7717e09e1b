//! #19, case 1 and the leader's clean-up: a sidecar back from a freeze past its session acts
//! on nothing from before. It accepts no answer, starts nothing and writes nothing of the old
//! session until it has registered again on a fresh read of the job; a stale write fails on
//! the item's fence instead of removing a live execution's `running` node.

use super::*;
use common::worker::{RunEnd, StrictRun};

/// `w`'s run of `execution`, once the sidecar has replied to its answer or decline.
async fn wait_replied_run(w: &TestWorker, execution: &str) -> StrictRun {
    common::eventually(WAIT, || async {
        w.strict_runs()
            .into_iter()
            .find(|r| r.execution_id == execution && r.reply.is_some())
    })
    .await
    .unwrap_or_else(|| panic!("{execution} got no reply:\n{}", w.summary()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sidecar_back_from_a_freeze_past_its_session_never_races_the_peers_that_took_over() {
    let zk = ZooKeeper::start().await;
    let ns = "fence-stale";
    let mut a = car(&zk, ns, "127.0.0.2").await;
    let b = car(&zk, ns, "127.0.0.3").await;
    let c = car(&zk, ns, "127.0.0.4").await;
    // Every second, as in the run that found case 1: fires fall due while A is frozen, so a
    // stale A would start them the moment it wakes.
    let config = JobConfig {
        failover: true,
        ..job_config("race", "* * * * * ?", 3)
    };
    // A's worker works 1 s, so the answer of the run it is in when A freezes is sent while A
    // is frozen (under a lease still valid) and waits in A's socket; the peers work 3 s, so
    // the one that takes A's item over is still running it when A comes back.
    let wa = TestWorker::subscribe_strict(
        &a.endpoint(),
        subscribe_request(config.clone()),
        Duration::from_secs(1),
    )
    .await
    .unwrap();
    let wb = TestWorker::subscribe_strict(
        &b.endpoint(),
        subscribe_request(config.clone()),
        Duration::from_secs(3),
    )
    .await
    .unwrap();
    let wc = TestWorker::subscribe_strict(
        &c.endpoint(),
        subscribe_request(config),
        Duration::from_secs(3),
    )
    .await
    .unwrap();
    for w in [&wa, &wb, &wc] {
        wait_n_items(w, 1).await;
    }
    // Freeze A just after its worker received a trigger, once each instance holds its item.
    let settled = Instant::now();
    let run = common::eventually(WAIT, || async {
        wa.strict_runs().into_iter().find(|r| r.start > settled)
    })
    .await
    .unwrap_or_else(|| panic!("A's worker got no trigger:\n{}", wa.summary()));
    let mark = a.log().len();
    let frozen = Instant::now();
    a.pause();
    let item = run.items[0];
    // The peer that takes A's item over (a FAILOVER run, after A's session has expired).
    let took_over = common::eventually(WAIT, || async {
        [("b", &wb), ("c", &wc)].into_iter().find_map(|(name, w)| {
            w.triggers()
                .into_iter()
                .find(|(at, t)| {
                    *at > frozen
                        && t.source == TriggerSource::Failover as i32
                        && t.items.iter().any(|i| i.item == item)
                })
                .map(|(at, t)| (name, at, t))
        })
    })
    .await;
    let (taker, took_at, failover) = took_over.unwrap_or_else(|| {
        panic!(
            "nobody took item {item} over:\n{}\n{}",
            wb.summary(),
            wc.summary()
        )
    });
    a.resume();
    let resumed = Instant::now();
    assert!(
        resumed < took_at + Duration::from_secs(3),
        "A must come back while {taker}'s run goes on ({taker} took over {:?} after the freeze, A resumed {:?} after it)",
        took_at - frozen,
        resumed - frozen
    );
    // The answer A's worker sent while A was frozen is refused: its execution belongs to the
    // old session, and the item has been run elsewhere since.
    let stale = wait_replied_run(&wa, &run.execution_id).await;
    assert_eq!(
        stale.outcome,
        Some(RunEnd::Completed),
        "A's worker finished its run while A was frozen (its lease was still valid):\n{}",
        wa.summary()
    );
    assert!(
        stale.end.is_some_and(|e| e > frozen && e < took_at),
        "the answer was sent during the freeze, before the takeover:\n{}",
        wa.summary()
    );
    assert_eq!(
        stale.reply,
        Some(Err(tonic::Code::FailedPrecondition)),
        "an answer for an execution of the expired session must be refused:\n{}",
        a.log_tail(60)
    );
    // The peer's run of the item is not disturbed by the stale sidecar.
    let w_taker = if taker == "b" { &wb } else { &wc };
    wait_answered(w_taker, &failover.execution_id).await;
    let taker_run = common::eventually(WAIT, || async {
        w_taker
            .strict_runs()
            .into_iter()
            .find(|r| r.execution_id == failover.execution_id && r.reply.is_some())
    })
    .await
    .expect("the takeover run is answered");
    assert_eq!(
        (taker_run.outcome, taker_run.reply),
        (Some(RunEnd::Completed), Some(Ok(()))),
        "the stale sidecar must not have taken the item from {taker}'s live run"
    );
    // A noticed the expiry, registered its worker again on a fresh read, and started nothing
    // and accepted nothing before that.
    const AGAIN: &str = "registered again in the new session";
    let back = common::eventually(WAIT, || async {
        a.log()[mark..].contains(AGAIN).then_some(())
    })
    .await;
    assert!(
        back.is_some(),
        "A never registered again\n{}",
        a.log_tail(60)
    );
    let log = a.log();
    let after_freeze = &log[mark..];
    assert!(
        after_freeze.contains("new registry session"),
        "A's session must have expired during the freeze:\n{}",
        a.log_tail(60)
    );
    let before_register: Vec<&str> = after_freeze
        .lines()
        .take_while(|l| !l.contains(AGAIN))
        .filter(|l| l.contains("execution started") || l.contains("answer accepted"))
        .collect();
    assert!(
        before_register.is_empty(),
        "A started or accepted work before registering again:\n{}",
        before_register.join("\n")
    );
    let mut ledger = Ledger::new();
    ledger.record_strict(
        "a",
        &wa.strict_runs(),
        &wa.events(),
        Some(Stop::Sidecar(frozen)),
    );
    ledger.record_strict("b", &wb.strict_runs(), &wb.events(), None);
    ledger.record_strict("c", &wc.strict_runs(), &wc.events(), None);
    ledger.assert_no_overlap();
    assert!(ledger.assert_fencing_store_accepts_every_write() > 0);
}
