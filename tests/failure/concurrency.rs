//! #11: `max_concurrent_executions`. A strict worker that may run two executions at once and is
//! busy with its own item gets a killed peer's item as FAILOVER at once, runs both side by
//! side and answers both; one that runs one at a time gets it only once its own run is over.

use super::*;
use common::worker::RunEnd;

/// How long the strict worker holds each item.
const RUN: Duration = Duration::from_secs(5);

/// Job "conc" of 2 items on two sidecars: a strict worker (`max_concurrent`) on the first and a
/// worker process on the second, each holding one item. The strict worker is made to run its
/// item, then the process is triggered and SIGKILLed mid-item. Returns the strict worker, when
/// its own run started and ended, the killed item and when it was killed.
async fn busy_when_the_peer_dies(
    zk: &ZooKeeper,
    ns: &str,
    max_concurrent: u32,
) -> (TestWorker, StrictRunTimes, i32, Instant, (Sidecar, Sidecar)) {
    let (a, b) = pair(zk, ns).await;
    let config = failover_job("conc", 2);
    let request = SubscribeRequest {
        max_concurrent_executions: max_concurrent,
        ..subscribe_request(config.clone())
    };
    let busy = TestWorker::subscribe_strict(&a.endpoint(), request, RUN)
        .await
        .unwrap();
    let mut doomed = ChildWorker::spawn(&b.endpoint(), subscribe_request(config)).await;
    wait_n_items(&busy, 1).await;
    let zk_ns = zk_client(zk, ns).await;
    trigger_once(&zk_ns, "conc", busy.instance_id()).await;
    let own = common::eventually(WAIT, || async { busy.strict_runs().into_iter().next() })
        .await
        .expect("the strict worker runs its own item");
    trigger_once(&zk_ns, "conc", &doomed.instance_id()).await;
    let (_, trigger) = doomed.first_trigger(WAIT).await;
    let killed = Instant::now();
    doomed.kill();
    (
        busy,
        StrictRunTimes(own.execution_id),
        trigger.items[0].item,
        killed,
        (a, b),
    )
}

/// The execution id of the strict worker's own run.
struct StrictRunTimes(String);

impl StrictRunTimes {
    /// When that run ended (it must have).
    async fn ended(&self, w: &TestWorker) -> Instant {
        common::eventually(WAIT, || async {
            w.strict_runs()
                .into_iter()
                .find(|r| r.execution_id == self.0)
                .and_then(|r| r.end)
        })
        .await
        .unwrap_or_else(|| panic!("its own run never ended:\n{}", w.summary()))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_worker_with_room_runs_a_killed_peers_item_beside_its_own() {
    let zk = ZooKeeper::start().await;
    let (busy, own, item, killed, _cars) = busy_when_the_peer_dies(&zk, "conc2", 2).await;
    let (arrived, failover) = wait_failover(&busy, item).await;
    let own_end = own.ended(&busy).await;
    eprintln!(
        "worker SIGKILL -> FAILOVER at a busy worker with room: {:?}",
        arrived - killed
    );
    assert!(
        arrived < own_end,
        "the FAILOVER run came while its own run went on ({:?} before its end):\n{}",
        own_end - arrived,
        busy.summary()
    );
    // Both runs end with Complete, accepted: neither was cut short or refused.
    let runs = common::eventually(WAIT, || async {
        let runs = busy.strict_runs();
        (runs.len() == 2 && runs.iter().all(|r| r.reply.is_some())).then_some(runs)
    })
    .await
    .unwrap_or_else(|| panic!("two answered runs:\n{}", busy.summary()));
    for run in &runs {
        assert_eq!(run.outcome, Some(RunEnd::Completed), "{run:?}");
        assert_eq!(run.reply, Some(Ok(())), "{run:?}");
    }
    assert_eq!(
        runs.iter().map(|r| r.source).collect::<Vec<_>>(),
        [TriggerSource::Manual as i32, TriggerSource::Failover as i32]
    );
    assert_eq!(items_of(&failover), [item]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_worker_that_runs_one_at_a_time_gets_the_killed_peers_item_after_its_own() {
    let zk = ZooKeeper::start().await;
    let (busy, own, item, _killed, _cars) = busy_when_the_peer_dies(&zk, "conc1", 1).await;
    let (arrived, _) = wait_failover(&busy, item).await;
    let own_end = own.ended(&busy).await;
    assert!(
        arrived >= own_end,
        "one at a time: the FAILOVER run waits for its own run's end:\n{}",
        busy.summary()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn max_concurrent_executions_out_of_range_is_refused_naming_the_field() {
    let car = Sidecar::start(SidecarOptions::standalone()).await;
    let request = SubscribeRequest {
        max_concurrent_executions: 5000,
        ..subscribe_request(failover_job("conc", 2))
    };
    let refused = TestWorker::subscribe(&car.endpoint(), request)
        .await
        .err()
        .expect("refused");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().contains("max_concurrent_executions")
            && refused.message().contains("1 to 1024"),
        "{}",
        refused.message()
    );
}
