//! Correct under failure: real ZooKeeper, real sidecars, workers that are killed, frozen or cut
//! off at the worst moment. Every scenario checks the invariant that matters: no item is run
//! by two workers at overlapping times, and every interrupted item runs again (FAILOVER).
#![allow(
    clippy::disallowed_methods,
    reason = "tests, benchmarks and examples run against real time and real processes"
)]

mod ahead;
mod answers;
mod child;
#[path = "../common/mod.rs"]
mod common;
mod concurrency;
mod drain;
mod fencing;
mod ghosts;
mod resident;
mod retries;
mod stalls;
mod starvation;

use std::time::{Duration, Instant};

use child::ChildWorker;
use common::ledger::{self, Ledger, Stop};
use common::proxy::Proxy;
use common::{
    job_config, subscribe_request, zk_tree, Sidecar, SidecarOptions, TestWorker, TimedEvent,
    ZooKeeper,
};
use shardcar::proto::subscribe_response::Event;
use shardcar::proto::{
    CompleteRequest, JobConfig, ShutdownKind, SubscribeRequest, Trigger, TriggerSource,
};
use tonic::Code;
use zookeeper_client::{Acls, AddWatchMode, Client, CreateMode, EventType};

const WAIT: Duration = Duration::from_secs(40);
const NEVER: &str = "0 0 0 1 1 ? 2099";
/// The harness's session timeout (4 s) makes leases 2 s long.
const LEASE: Duration = Duration::from_secs(2);

/// Entry point of the child worker processes (see `child.rs`); idle when run directly.
#[test]
#[ignore = "entry point of child worker processes started by the other tests"]
fn child_worker_entry() {
    child::main_if_child();
}

fn failover_job(name: &str, total: i32) -> JobConfig {
    JobConfig {
        failover: true,
        ..job_config(name, NEVER, total)
    }
}

async fn car(zk: &ZooKeeper, ns: &str, ip: &str) -> Sidecar {
    Sidecar::start(SidecarOptions {
        namespace: ns.into(),
        ..SidecarOptions::zk(zk.connect_string(), ip)
    })
    .await
}

/// Two sidecars of one namespace, as two hosts.
async fn pair(zk: &ZooKeeper, ns: &str) -> (Sidecar, Sidecar) {
    (
        car(zk, ns, "127.0.0.2").await,
        car(zk, ns, "127.0.0.3").await,
    )
}

/// A worker that answers every trigger at once, once it holds its share (one item) of a
/// two-item job.
async fn answering_worker(car: &Sidecar, config: JobConfig) -> TestWorker {
    let worker = TestWorker::subscribe(&car.endpoint(), subscribe_request(config))
        .await
        .unwrap();
    worker.set_auto_complete(true);
    wait_n_items(&worker, 1).await;
    worker
}

async fn zk_client(zk: &ZooKeeper, ns: &str) -> Client {
    let client = Client::connect(&zk.connect_string())
        .await
        .expect("zookeeper");
    client
        .chroot(format!("/{ns}"))
        .unwrap_or_else(|_| panic!("chroot"))
}

/// Asks one instance to run now, as ElasticJob's trigger-once does.
async fn trigger_once(zk: &Client, job: &str, instance: &str) {
    let mode = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let _ = zk.create(&format!("/{job}/trigger"), b"", &mode).await;
    zk.create(&format!("/{job}/trigger/{instance}"), b"", &mode)
        .await
        .expect("trigger node");
}

/// Waits until `w` holds exactly `n` items.
async fn wait_n_items(w: &TestWorker, n: usize) -> Vec<i32> {
    w.wait_items(|items| items.len() == n, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Waits for a FAILOVER trigger naming `item` at `w`.
async fn wait_failover(w: &TestWorker, item: i32) -> (Instant, Trigger) {
    let found = common::eventually(WAIT, || async {
        w.triggers().into_iter().find(|(_, t)| {
            t.source == TriggerSource::Failover as i32 && t.items.iter().any(|i| i.item == item)
        })
    })
    .await;
    found.unwrap_or_else(|| panic!("no FAILOVER trigger for item {item}:\n{}", w.summary()))
}

fn items_of(t: &Trigger) -> Vec<i32> {
    t.items.iter().map(|i| i.item).collect()
}

/// When the lease a worker held at `before` ran out.
fn lease_end(events: &[TimedEvent], before: Instant) -> Instant {
    ledger::lease_end(events, before).expect("the worker received a lease")
}

/// Waits until `w` has answered `execution`.
async fn wait_answered(w: &TestWorker, execution: &str) {
    let answered = common::eventually(WAIT, || async {
        w.answers()
            .iter()
            .any(|(e, _)| e == execution)
            .then_some(())
    })
    .await;
    assert!(
        answered.is_some(),
        "{execution} never answered:\n{}",
        w.summary()
    );
}

/// Sends `Complete` for `instance`'s `execution` over a connection of its own and returns the
/// sidecar's refusal.
async fn late_complete(car: &Sidecar, instance: &str, execution: &str, item: i32) -> tonic::Status {
    let request = CompleteRequest {
        instance_id: instance.to_string(),
        execution_id: execution.to_string(),
        items: vec![item],
    };
    car.client()
        .await
        .complete(request)
        .await
        .expect_err("a late Complete must be refused")
}

/// A worker's record for the ledger: name, events, answers sent, what the test did to it.
type WorkerRecord<'a> = (
    &'a str,
    Vec<TimedEvent>,
    Vec<(String, Instant)>,
    Option<Stop>,
);

/// The invariant checker over every run of every worker of a scenario (see `ledger`).
fn check_runs(workers: &[WorkerRecord]) {
    let mut ledger = Ledger::new();
    for (name, events, answers, stop) in workers {
        ledger.record(name, events, answers, *stop);
    }
    ledger.assert_no_overlap();
    ledger.assert_interrupted_reran();
}

/// [`check_runs`] over a worker process killed at `killed` and a worker that survived it.
fn check_killed_and_survivor(doomed: &ChildWorker, killed: Instant, survivor: &TestWorker) {
    check_runs(&[
        (
            "doomed",
            doomed.events(),
            doomed.answers(),
            Some(Stop::Worker(killed)),
        ),
        ("survivor", survivor.events(), survivor.answers(), None),
    ]);
}

/// Triggers `doomed` (once), SIGKILLs it in the middle of its item, and waits for `survivor`
/// to run that item as FAILOVER and answer; checks that no run overlapped and the item ran
/// again. Returns how long after the kill the FAILOVER trigger came.
async fn kill_mid_item(
    zk_ns: &Client,
    job: &str,
    doomed: &mut ChildWorker,
    survivor: &TestWorker,
) -> Duration {
    trigger_once(zk_ns, job, &doomed.instance_id()).await;
    let (_, trigger) = doomed.first_trigger(WAIT).await;
    let item = items_of(&trigger)[0];
    let killed = Instant::now();
    doomed.kill();
    let (at, failover) = wait_failover(survivor, item).await;
    assert_eq!(items_of(&failover), vec![item]);
    wait_answered(survivor, &failover.execution_id).await;
    check_killed_and_survivor(doomed, killed, survivor);
    at - killed
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_execution_has_its_item_rerun_as_failover() {
    let zk = ZooKeeper::start().await;
    let ns = "fail-kill-worker";
    let (a, b) = pair(&zk, ns).await;
    let config = failover_job("kill", 2);
    let mut doomed = ChildWorker::spawn(&a.endpoint(), subscribe_request(config.clone())).await;
    let survivor = answering_worker(&b, config).await;
    let zk_ns = zk_client(&zk, ns).await;
    let took = kill_mid_item(&zk_ns, "kill", &mut doomed, &survivor).await;
    eprintln!("worker SIGKILL -> FAILOVER trigger: {took:?}");
    // The taker's answer clears every failover node.
    let cleared = common::eventually(WAIT, || async {
        let tree = zk_tree(&zk.connect_string(), ns).await;
        let stuck: Vec<_> = tree
            .keys()
            .filter(|p| p.contains("failover") && p.contains("/sharding/"))
            .cloned()
            .collect();
        stuck.is_empty().then_some(())
    })
    .await;
    assert!(cleared.is_some(), "failover nodes stayed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_execution_hands_its_item_to_an_idle_worker_of_its_sidecar() {
    // #11: the crash is known by the sidecar that also has an idle worker of the job: the item
    // goes to it in the write that removes the dead instance. Never flagged, never unowned.
    let zk = ZooKeeper::start().await;
    let ns = "fail-hand-over";
    let a = car(&zk, ns, "127.0.0.2").await;
    let config = failover_job("hand", 2);
    let mut doomed = ChildWorker::spawn(&a.endpoint(), subscribe_request(config.clone())).await;
    let survivor = answering_worker(&a, config).await;
    let zk_ns = zk_client(&zk, ns).await;
    let mut watcher = zk_ns
        .watch("/hand/leader", AddWatchMode::PersistentRecursive)
        .await
        .expect("a watch on the job's leader nodes");
    let took = kill_mid_item(&zk_ns, "hand", &mut doomed, &survivor).await;
    eprintln!("worker SIGKILL -> FAILOVER trigger on its sidecar: {took:?}");
    assert_never_flagged(&mut watcher).await;
}

/// Fails if the watch (on a job's `leader` nodes) saw a failover flag created.
async fn assert_never_flagged(watcher: &mut zookeeper_client::PersistentWatcher) {
    let mut created = Vec::new();
    while let Ok(event) = tokio::time::timeout(Duration::from_millis(300), watcher.changed()).await
    {
        if event.event_type == EventType::NodeCreated {
            created.push(event.path);
        }
    }
    assert!(
        !created
            .iter()
            .any(|p| p.contains("/leader/failover/items/")),
        "the item was flagged instead of handed over: {created:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_execution_hands_its_item_to_an_idle_worker_of_a_peer_sidecar() {
    // #11: the crash is known by a sidecar with no other worker of the job, and a peer
    // sidecar's worker is idle: the item goes to that worker in the write that removes the
    // dead instance, and the peer's sidecar runs it once it reads that write. Never flagged.
    let zk = ZooKeeper::start().await;
    let ns = "fail-hand-to-peer";
    let (a, b) = pair(&zk, ns).await;
    let config = failover_job("peer", 2);
    let mut doomed = ChildWorker::spawn(&a.endpoint(), subscribe_request(config.clone())).await;
    let survivor = answering_worker(&b, config).await;
    let zk_ns = zk_client(&zk, ns).await;
    let mut watcher = zk_ns
        .watch("/peer/leader", AddWatchMode::PersistentRecursive)
        .await
        .expect("a watch on the job's leader nodes");
    let took = kill_mid_item(&zk_ns, "peer", &mut doomed, &survivor).await;
    eprintln!("worker SIGKILL -> FAILOVER trigger on a peer sidecar: {took:?}");
    assert_never_flagged(&mut watcher).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_sidecars_items_fail_over_after_its_session_times_out() {
    let zk = ZooKeeper::start().await;
    let ns = "fail-kill-sidecar";
    let (mut a, b) = pair(&zk, ns).await;
    let config = failover_job("crash", 2);
    let doomed = TestWorker::subscribe(&a.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    let survivor = answering_worker(&b, config).await;
    let zk_ns = zk_client(&zk, ns).await;
    trigger_once(&zk_ns, "crash", doomed.instance_id()).await;
    let trigger = doomed.next_trigger(WAIT).await.unwrap();
    let item = items_of(&trigger)[0];
    let killed = Instant::now();
    a.kill();
    let (at, failover) = wait_failover(&survivor, item).await;
    eprintln!(
        "sidecar SIGKILL -> FAILOVER trigger: {:?} (session timeout 4 s)",
        at - killed
    );
    // The dead sidecar's worker stopped when its lease ran out, before anyone got the item.
    wait_answered(&survivor, &failover.execution_id).await;
    check_runs(&[
        (
            "doomed",
            doomed.events(),
            doomed.answers(),
            Some(Stop::Sidecar(killed)),
        ),
        ("survivor", survivor.events(), survivor.answers(), None),
    ]);
    wait_n_items(&survivor, 2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_sidecars_workers_stop_before_their_items_move_and_it_rejoins_after() {
    let zk = ZooKeeper::start().await;
    let ns = "fail-freeze-sidecar";
    let (mut a, b) = pair(&zk, ns).await;
    let config = failover_job("freeze", 2);
    let frozen = TestWorker::subscribe(&a.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    let other = answering_worker(&b, config).await;
    let zk_ns = zk_client(&zk, ns).await;
    trigger_once(&zk_ns, "freeze", frozen.instance_id()).await;
    let trigger = frozen.next_trigger(WAIT).await.unwrap();
    let item = items_of(&trigger)[0];
    let paused = Instant::now();
    a.pause();
    let (at, failover) = wait_failover(&other, item).await;
    // The frozen sidecar could not revoke anything; its worker's lease did it in time.
    let stopped = lease_end(&frozen.events(), at);
    assert!(
        stopped < at,
        "lease ran out {:?} after the failover trigger",
        stopped - at
    );
    assert!(stopped <= paused + LEASE + Duration::from_millis(100));
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.resume();
    // After resuming: the old execution is taken back, its answer refused, and the sidecar
    // registers its worker again in a new session.
    frozen
        .wait_for(
            |events| {
                events.iter().any(
                    |(_, e)| matches!(&e.event, Some(Event::Revoke(r)) if r.items.contains(&item)),
                )
            },
            WAIT,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let late = frozen
        .complete(&trigger.execution_id, &[item])
        .await
        .unwrap_err();
    assert_eq!(late.code(), Code::FailedPrecondition, "{late:?}");
    let back = common::eventually(WAIT, || async {
        let tree = zk_tree(&zk.connect_string(), ns).await;
        tree.contains_key(&format!("/{ns}/freeze/instances/{}", frozen.instance_id()))
            .then_some(())
    })
    .await;
    assert!(
        back.is_some(),
        "the resumed sidecar did not register its worker again\n{}",
        a.log_tail(40)
    );
    let shared = common::eventually(WAIT, || async {
        (frozen.current_items().len() == 1 && other.current_items().len() == 1).then_some(())
    })
    .await;
    assert!(
        shared.is_some(),
        "items not shared again:\n{}\n{}",
        frozen.summary(),
        other.summary()
    );
    assert!(
        !frozen.stream_ended(),
        "expiry is not shutdown: the worker's stream stays"
    );
    wait_answered(&other, &failover.execution_id).await;
    check_runs(&[
        (
            "frozen",
            frozen.events(),
            frozen.answers(),
            Some(Stop::Sidecar(paused)),
        ),
        ("other", other.events(), other.answers(), None),
    ]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_worker_is_found_by_keepalive_and_its_late_answer_is_refused() {
    let zk = ZooKeeper::start().await;
    let ns = "fail-freeze-worker";
    let (a, b) = pair(&zk, ns).await;
    let config = failover_job("stuck", 2);
    let mut frozen = ChildWorker::spawn(&a.endpoint(), subscribe_request(config.clone())).await;
    let other = answering_worker(&b, config).await;
    let zk_ns = zk_client(&zk, ns).await;
    trigger_once(&zk_ns, "stuck", &frozen.instance_id()).await;
    let (_, trigger) = frozen.first_trigger(WAIT).await;
    let item = items_of(&trigger)[0];
    let paused = Instant::now();
    frozen.pause();
    let (at, failover) = wait_failover(&other, item).await;
    eprintln!(
        "worker SIGSTOP -> FAILOVER trigger: {:?} (keepalive 1 s / 3 s)",
        at - paused
    );
    let stopped = lease_end(&frozen.events(), paused);
    assert!(
        stopped < at,
        "the frozen worker's lease outlived the failover by {:?}",
        stopped - at
    );
    frozen.resume();
    // Its connection was closed by keepalive while it was stopped: once the worker has seen its
    // stream end, its late answer is void and a worker that follows the contract does not send
    // it (the other order, a call that goes out on the closed connection, is the proxy test).
    frozen.wait_stream_end(WAIT).await;
    let code = frozen.complete(&trigger.execution_id, &[item]).await;
    assert_eq!(code, None, "an answer for an ended stream must not be sent");
    // Sent anyway, over a new connection, the sidecar refuses it.
    let late = late_complete(&a, &frozen.instance_id(), &trigger.execution_id, item).await;
    assert_eq!(
        late.code(),
        Code::FailedPrecondition,
        "late Complete must be refused: {late:?}"
    );
    wait_answered(&other, &failover.execution_id).await;
    check_runs(&[
        (
            "frozen",
            frozen.events(),
            frozen.answers(),
            Some(Stop::Worker(paused)),
        ),
        ("other", other.events(), other.answers(), None),
    ]);
}

/// The other order of the race above, arranged with a proxy instead of waited for: the worker
/// is cut off (its connection frozen, as a stopped process's would be), keepalive closes it on
/// the sidecar's side, and the worker's late `Complete` is written to the dead connection before
/// the worker can read that close. It fails in transport: it never reached the sidecar, it is
/// not a refusal, and the worker's stream has ended with it. Over a new connection the same
/// answer is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_late_answer_on_a_connection_the_sidecar_closed_fails_in_transport() {
    let car = Sidecar::start(SidecarOptions::standalone()).await;
    let proxy = Proxy::start(car.addr()).await;
    let config = job_config("late", "* * * * * ?", 1);
    let worker = TestWorker::subscribe(&proxy.endpoint(), subscribe_request(config))
        .await
        .unwrap();
    let trigger = worker.next_trigger(WAIT).await.unwrap();
    proxy.freeze();
    proxy
        .wait("close by the sidecar (keepalive)", WAIT, |p| {
            p.upstream_closes_held() > 0
        })
        .await;
    let before = proxy.held_from_client();
    let request = CompleteRequest {
        instance_id: worker.instance_id().to_string(),
        execution_id: trigger.execution_id.clone(),
        items: items_of(&trigger),
    };
    let mut client = worker.client();
    let call = tokio::spawn(async move { client.complete(request).await });
    proxy
        .wait("late Complete from the worker", WAIT, |p| {
            p.held_from_client() > before
        })
        .await;
    proxy.heal();
    let status = call.await.unwrap().expect_err("the answer cannot succeed");
    // The sidecar's GOAWAY arrives after the call's stream was opened: h2 fails that stream,
    // which tonic reports as INTERNAL "h2 protocol error" (what failed #17 at random).
    assert!(
        child::is_transport_error(&status) && status.message().contains("h2 protocol error"),
        "a call on a connection the sidecar closed fails in transport, not as the sidecar's reply: {status:?}"
    );
    worker.wait_stream_end(WAIT).await.unwrap();
    let late = late_complete(
        &car,
        worker.instance_id(),
        &trigger.execution_id,
        items_of(&trigger)[0],
    )
    .await;
    assert_eq!(late.code(), Code::FailedPrecondition, "{late:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn losing_the_zookeeper_node_a_sidecar_uses_keeps_its_workers() {
    let mut zk = ZooKeeper::ensemble(3).await;
    let ns = "fail-ensemble";
    let a = car(&zk, ns, "127.0.0.2").await;
    let config = job_config("steady", NEVER, 4);
    let w1 = TestWorker::subscribe(&a.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    let w2 = TestWorker::subscribe(&a.endpoint(), subscribe_request(config))
        .await
        .unwrap();
    wait_n_items(&w1, 2).await;
    wait_n_items(&w2, 2).await;
    // Stop each node in turn: whichever the sidecar is connected to, it moves to another.
    for i in 0..3 {
        zk.stop(i).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let tree = zk_tree(&zk.connect_string(), ns).await;
        for w in [&w1, &w2] {
            assert!(
                !w.stream_ended(),
                "node {i} stopped: a worker was dropped\n{}",
                a.log_tail(30)
            );
            assert!(
                tree.contains_key(&format!("/{ns}/steady/instances/{}", w.instance_id())),
                "node {i} stopped: instance gone"
            );
        }
        zk.start_node(i).await;
    }
    for w in [&w1, &w2] {
        let events = w.events();
        assert!(
            events.iter().all(|(_, e)| !matches!(
                e.event,
                Some(Event::Revoke(_)) | Some(Event::Shutdown(_))
            )),
            "{}",
            w.summary()
        );
        assert_eq!(w.current_items().len(), 2);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn remote_operations_through_zookeeper() {
    let zk = ZooKeeper::start().await;
    let ns = "fail-remote";
    let a = car(&zk, ns, "127.0.0.2").await;
    let b = car(&zk, ns, "127.0.0.3").await;
    let zk_ns = zk_client(&zk, ns).await;
    let config = job_config("ops", NEVER, 2);
    let wa = TestWorker::subscribe(&a.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    let wb = TestWorker::subscribe(&b.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    wait_n_items(&wa, 1).await;
    wait_n_items(&wb, 1).await;

    // Disable a server: its worker loses its items, the other takes them; enable: shared again.
    zk_ns
        .set_data("/ops/servers/127.0.0.2", b"DISABLED", None)
        .await
        .unwrap();
    wait_n_items(&wa, 0).await;
    wait_n_items(&wb, 2).await;
    zk_ns
        .set_data("/ops/servers/127.0.0.2", b"ENABLED", None)
        .await
        .unwrap();
    wait_n_items(&wa, 1).await;

    // Disable an item: a trigger-once skips it; enable: it runs again.
    let item = wa.current_items()[0];
    let mode = CreateMode::Persistent.with_acls(Acls::anyone_all());
    zk_ns
        .create(&format!("/ops/sharding/{item}/disabled"), b"", &mode)
        .await
        .unwrap();
    trigger_once(&zk_ns, "ops", wa.instance_id()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        wa.triggers().is_empty(),
        "a disabled item must not run: {}",
        wa.summary()
    );
    zk_ns
        .delete(&format!("/ops/sharding/{item}/disabled"), None)
        .await
        .unwrap();
    trigger_once(&zk_ns, "ops", wa.instance_id()).await;
    let t = wa.next_trigger(WAIT).await.unwrap();
    assert_eq!(t.source, TriggerSource::Manual as i32);
    assert_eq!(items_of(&t), vec![item]);
    wa.complete(&t.execution_id, &[item]).await.unwrap();

    // Remote shutdown: deleting the instance node ends that worker's stream with Shutdown.
    zk_ns
        .delete(&format!("/ops/instances/{}", wb.instance_id()), None)
        .await
        .unwrap();
    wb.wait_stream_end(WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        wb.shutdown().map(|s| s.kind),
        Some(ShutdownKind::Remote as i32),
        "a REMOTE Shutdown event before the end: {}",
        wb.summary()
    );
    wait_n_items(&wa, 2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_workers_and_peers_take_over_at_once() {
    let zk = ZooKeeper::start().await;
    let ns = "fail-drain";
    let mut a = car(&zk, ns, "127.0.0.2").await;
    let b = car(&zk, ns, "127.0.0.3").await;
    let config = job_config("drain", NEVER, 2);
    let wa = TestWorker::subscribe(&a.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    let wb = TestWorker::subscribe(&b.endpoint(), subscribe_request(config))
        .await
        .unwrap();
    wait_n_items(&wa, 1).await;
    wait_n_items(&wb, 1).await;
    let started = Instant::now();
    a.terminate();
    wa.wait_stream_end(WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        wa.shutdown().map(|s| s.kind),
        Some(ShutdownKind::Drain as i32),
        "a DRAIN Shutdown event: {}",
        wa.summary()
    );
    wait_n_items(&wb, 2).await;
    let moved = started.elapsed();
    assert!(
        moved < Duration::from_secs(4),
        "peers took over after {moved:?}, not at once (the session timeout is 4 s)"
    );
    let status = a
        .wait_exit(Duration::from_secs(15))
        .await
        .expect("the sidecar exits within its grace period");
    assert!(status.success(), "exit status {status:?}");
    // Every worker left: the session is closed at once rather than left to expire (a job's
    // driver retiring a moment after its drain answered once made the sidecar think not).
    let log = a.log();
    assert!(
        !log.contains("left to expire"),
        "a drain that released every worker leaves the session to expire:\n{}",
        a.log_tail(20)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fire_during_a_long_run_is_caught_up_once_as_misfire() {
    let zk = ZooKeeper::start().await;
    let ns = "fail-misfire";
    let a = car(&zk, ns, "127.0.0.2").await;
    let w = TestWorker::subscribe(
        &a.endpoint(),
        subscribe_request(job_config("long", "* * * * * ?", 1)),
    )
    .await
    .unwrap();
    let first = w.next_trigger(WAIT).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let tree = zk_tree(&zk.connect_string(), ns).await;
    assert!(
        tree.contains_key(&format!("/{ns}/long/sharding/0/misfire")),
        "fires during the run flag misfire"
    );
    w.complete(&first.execution_id, &[0]).await.unwrap();
    let catch_up = w.next_trigger(WAIT).await.unwrap();
    assert_eq!(catch_up.source, TriggerSource::Misfire as i32);
    w.complete(&catch_up.execution_id, &[0]).await.unwrap();
    let next = w.next_trigger(WAIT).await.unwrap();
    assert_eq!(
        next.source,
        TriggerSource::Cron as i32,
        "exactly one catch-up run"
    );
}
