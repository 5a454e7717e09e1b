//! #19, case 3, and the bounded shutdown: SIGTERM hands nothing over while a local worker may
//! still run it, and the process exits within `--shutdown-grace` whatever the registry and
//! the workers do.

use super::*;
use common::worker::RunEnd;

const GRACE: Duration = Duration::from_secs(4);

async fn graceful_car(zk: &ZooKeeper, ns: &str, ip: &str) -> Sidecar {
    Sidecar::start(SidecarOptions {
        namespace: ns.into(),
        extra_args: vec![
            "--shutdown-grace".into(),
            format!("{}ms", GRACE.as_millis()),
        ],
        ..SidecarOptions::zk(zk.connect_string(), ip)
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_a_running_item_finish_before_a_peer_may_start_it() {
    let zk = ZooKeeper::start().await;
    let ns = "drain-running";
    let mut a = graceful_car(&zk, ns, "127.0.0.2").await;
    let b = graceful_car(&zk, ns, "127.0.0.3").await;
    let config = job_config("finish", "* * * * * ?", 2);
    // Strict from the start: a trigger that comes before the items settle is run too.
    let wa = TestWorker::subscribe_strict(
        &a.endpoint(),
        subscribe_request(config.clone()),
        Duration::from_millis(1500),
    )
    .await
    .unwrap();
    let wb = TestWorker::subscribe_strict(
        &b.endpoint(),
        subscribe_request(config),
        Duration::from_millis(100),
    )
    .await
    .unwrap();
    wait_n_items(&wa, 1).await;
    wait_n_items(&wb, 1).await;
    let item = wa.current_items()[0];
    // A run of A's item that is going on (the first one may have ended already).
    let run = common::eventually(WAIT, || async {
        wa.strict_runs()
            .into_iter()
            .find(|r| r.items.contains(&item) && r.end.is_none())
    })
    .await
    .expect("A's worker runs its item");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let term = Instant::now();
    a.terminate();
    let exited = a.wait_exit(GRACE + Duration::from_secs(5)).await;
    let exit_took = term.elapsed();
    assert!(
        exited.is_some_and(|s| s.success()),
        "{exited:?}\n{}",
        a.log_tail(30)
    );
    let finished = wa
        .strict_runs()
        .into_iter()
        .find(|r| r.execution_id == run.execution_id)
        .unwrap();
    assert_eq!(
        (finished.outcome.clone(), finished.reply),
        (Some(RunEnd::Completed), Some(Ok(()))),
        "the run that was going when SIGTERM came is finished and its answer accepted"
    );
    let ended = finished.end.unwrap();
    let by_b = common::eventually(WAIT, || async {
        wb.strict_runs()
            .into_iter()
            .find(|r| r.items.contains(&item) && r.start >= term)
    })
    .await
    .unwrap_or_else(|| panic!("B never ran A's item\n{}", wb.summary()));
    assert!(
        by_b.start >= ended,
        "B started item {item} {:?} before A's run of it ended",
        ended - by_b.start
    );
    eprintln!("SIGTERM with an item running: exited after {exit_took:?}");
    let mut ledger = Ledger::new();
    ledger.record_strict("a", &wa.strict_runs(), &wa.events(), None);
    ledger.record_strict("b", &wb.strict_runs(), &wb.events(), None);
    ledger.assert_no_overlap();
    assert!(ledger.assert_fencing_store_accepts_every_write() > 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_exits_within_the_grace_when_a_worker_never_answers_and_hands_over_only_after_its_lease(
) {
    let zk = ZooKeeper::start().await;
    let ns = "drain-silent";
    let mut a = graceful_car(&zk, ns, "127.0.0.2").await;
    let b = graceful_car(&zk, ns, "127.0.0.3").await;
    let config = failover_job("silent", 2);
    // A's worker takes the trigger and never answers (nor stops: it ignores the contract).
    let wa = TestWorker::subscribe(&a.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    let wb = answering_worker(&b, config).await;
    wait_n_items(&wa, 1).await;
    let item = wa.current_items()[0];
    let zk_ns = zk_client(&zk, ns).await;
    trigger_once(&zk_ns, "silent", wa.instance_id()).await;
    wa.next_trigger(WAIT).await.unwrap();
    let term = Instant::now();
    a.terminate();
    let exited = a.wait_exit(GRACE + Duration::from_secs(5)).await;
    let took = term.elapsed();
    assert!(exited.is_some(), "did not exit\n{}", a.log_tail(30));
    assert!(
        took < GRACE + Duration::from_millis(500),
        "SIGTERM took {took:?}, the grace is {GRACE:?}"
    );
    let (at, _) = wait_failover(&wb, item).await;
    let lease_over = lease_end(&wa.events(), at);
    assert!(
        lease_over <= at,
        "B got the item {:?} before A's worker's lease ended",
        lease_over - at
    );
    eprintln!("SIGTERM with a worker that never answers: exited after {took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_exits_within_the_grace_with_zookeeper_unreachable() {
    let mut zk = ZooKeeper::start().await;
    let ns = "drain-nozk";
    let mut a = graceful_car(&zk, ns, "127.0.0.2").await;
    let w = TestWorker::subscribe_strict(
        &a.endpoint(),
        subscribe_request(job_config("nozk", "* * * * * ?", 2)),
        Duration::from_millis(800),
    )
    .await
    .unwrap();
    common::eventually(WAIT, || async { w.strict_runs().into_iter().next() })
        .await
        .expect("a run");
    zk.stop(0).await;
    let term = Instant::now();
    a.terminate();
    let exited = a.wait_exit(GRACE + Duration::from_secs(5)).await;
    let took = term.elapsed();
    assert!(exited.is_some(), "did not exit\n{}", a.log_tail(30));
    assert!(
        took < GRACE + Duration::from_millis(500),
        "SIGTERM took {took:?} with ZooKeeper down, the grace is {GRACE:?}"
    );
    eprintln!("SIGTERM with ZooKeeper down: exited after {took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_with_nothing_running_exits_at_once() {
    let zk = ZooKeeper::start().await;
    let ns = "drain-idle";
    let mut a = graceful_car(&zk, ns, "127.0.0.2").await;
    let w = TestWorker::subscribe(
        &a.endpoint(),
        subscribe_request(job_config("idle", NEVER, 2)),
    )
    .await
    .unwrap();
    wait_n_items(&w, 2).await;
    let term = Instant::now();
    a.terminate();
    let exited = a.wait_exit(GRACE + Duration::from_secs(5)).await;
    let took = term.elapsed();
    assert!(exited.is_some_and(|s| s.success()), "{exited:?}");
    assert!(took < GRACE, "an idle drain took the whole grace: {took:?}");
    let tree = zk_tree(&zk.connect_string(), ns).await;
    assert!(
        !tree.keys().any(|p| p.contains("/instances/")),
        "its instance is removed: {:?}",
        tree.keys().collect::<Vec<_>>()
    );
    eprintln!("SIGTERM, idle: exited after {took:?}");
}

/// Nemesis (seeds 2, 4, 5): a worker that subscribed, while its sidecar drained, to a job the
/// drain had not reached (no worker of it was on the sidecar) was registered, got cron triggers
/// and no `Shutdown`, and held its items until the sidecar exited. A drain now refuses every
/// new subscription, whichever job it is for.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscribe_that_comes_during_a_drain_is_refused_for_any_job() {
    let zk = ZooKeeper::start().await;
    let ns = "drain-subscribe";
    let mut a = graceful_car(&zk, ns, "127.0.0.2").await;
    // A worker that never answers keeps the drain going until the end of its lease.
    let busy = TestWorker::subscribe(
        &a.endpoint(),
        subscribe_request(job_config("busy", "* * * * * ?", 1)),
    )
    .await
    .unwrap();
    busy.next_trigger(WAIT).await.unwrap();
    a.terminate();
    busy.wait_for(
        |events| {
            events
                .iter()
                .any(|(_, e)| matches!(e.event, Some(Event::Shutdown(_))))
        },
        WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("no Shutdown: {e}"));
    for job in ["busy", "another"] {
        let late = TestWorker::subscribe(
            &a.endpoint(),
            subscribe_request(job_config(job, "* * * * * ?", 1)),
        )
        .await;
        let status = late
            .err()
            .unwrap_or_else(|| panic!("a subscribe to {job} during the drain"));
        assert_eq!(status.code(), Code::Unavailable, "{job}: {status:?}");
        assert!(
            status.message().contains("shutting down"),
            "{job}: {status:?}"
        );
    }
    let exited = a.wait_exit(GRACE + Duration::from_secs(5)).await;
    assert!(exited.is_some_and(|s| s.success()), "{}", a.log_tail(30));
}

/// A SIGTERM that comes while the sidecar still connects to ZooKeeper (before it binds
/// anything) ends it at once and cleanly: the signal's handler is installed before the start,
/// not when the drain first waits for it (before, the default action killed the process).
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_while_still_connecting_exits_at_once_and_cleanly() {
    use std::os::unix::process::ExitStatusExt;
    // Nothing listens there: the connect retries until its timeout.
    let nowhere = format!("127.0.0.1:{}", common::free_port());
    let mut a = Sidecar::spawn_only(SidecarOptions {
        namespace: "drain-starting".into(),
        ..SidecarOptions::zk(nowhere, "127.0.0.2")
    });
    // Long enough for the process to be past its settings and connecting.
    common::eventually(Duration::from_secs(10), || async {
        a.log().contains("connecting to ZooKeeper").then_some(())
    })
    .await;
    let term = Instant::now();
    a.terminate();
    let exited = a.wait_exit(Duration::from_secs(5)).await;
    let took = term.elapsed();
    let status = exited.unwrap_or_else(|| panic!("did not exit\n{}", a.log_tail(30)));
    assert_eq!(
        status.signal(),
        None,
        "ended by the signal itself\n{}",
        a.log_tail(30)
    );
    assert!(status.success(), "{status:?}\n{}", a.log_tail(30));
    assert!(took < Duration::from_secs(2), "took {took:?}");
}
