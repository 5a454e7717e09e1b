//! #53: an answer the sidecar received is never dropped. A worker that answers once, as the
//! contract allows, and never again, sees its item run again after ZooKeeper lost the answer's
//! write: the sidecar writes it again itself.

use super::*;

/// The outage of the reproduction: longer than the sidecar's request timeout (1 s, a
/// quarter of the 4 s session) so the write goes unanswered, shorter than what the lease
/// outlives (it is renewed until 1 s without a proof of life and lasts 2 s), so nothing else
/// ends the execution.
const OUTAGE: Duration = Duration::from_millis(1150);

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_whose_write_never_reached_zookeeper_is_written_again_by_the_sidecar() {
    let zk = ZooKeeper::start().await;
    let proxy = Proxy::start(
        format!("127.0.0.1:{}", zk.client_port(0))
            .parse()
            .expect("an address"),
    )
    .await;
    let car = Sidecar::start(SidecarOptions {
        namespace: "answers-lost".into(),
        ..SidecarOptions::zk(proxy.addr().to_string(), "127.0.0.2")
    })
    .await;
    let worker = TestWorker::subscribe(
        &car.endpoint(),
        subscribe_request(job_config("lost", "* * * * * ?", 1)),
    )
    .await
    .unwrap();
    let trigger = worker.next_trigger(WAIT).await.unwrap();

    // Right after a renewal, so that the lease outlives the outage.
    let is_lease = |e: &TimedEvent| matches!(e.1.event, Some(Event::Lease(_)));
    let leases = worker.events().iter().filter(|e| is_lease(e)).count();
    worker
        .wait_for(
            |events| events.iter().filter(|e| is_lease(e)).count() > leases,
            WAIT,
        )
        .await
        .unwrap_or_else(|e| panic!("no renewal: {e}"));
    proxy.set_mode(common::proxy::Mode::DropFromClient);
    let request = CompleteRequest {
        instance_id: worker.instance_id().to_string(),
        execution_id: trigger.execution_id.clone(),
        items: items_of(&trigger),
    };
    let mut client = worker.client();
    let call = tokio::spawn(async move { client.complete(request).await });
    tokio::time::sleep(OUTAGE).await;
    proxy.heal();
    let healed = Instant::now();
    assert!(
        proxy.dropped_from_client() > 0,
        "the answer's write was lost"
    );

    // Accepted, or "not confirmed in time" (the sidecar goes on recording it); never refused.
    // The worker does not send it again, whatever the reply.
    let reply = call.await.unwrap();
    if let Err(status) = &reply {
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    }
    let since = healed;
    worker
        .wait_for(
            |events| {
                events.iter().any(|(at, e)| {
                    *at >= since
                        && matches!(&e.event, Some(Event::Trigger(t)) if t.execution_id != trigger.execution_id)
                })
            },
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|e| panic!("the item never ran again: {e}\n{}", worker.summary()));
    let again = worker
        .triggers()
        .iter()
        .find(|(at, t)| *at >= since && t.execution_id != trigger.execution_id)
        .map(|(at, _)| *at - since)
        .unwrap_or_default();
    // The answer itself was recorded (the item ran again because it was over, not because a
    // lease ran out and the sidecar took it back).
    let mut admin =
        shardcar::proto::admin_service_client::AdminServiceClient::connect(car.endpoint())
            .await
            .expect("the admin API");
    let record = admin
        .list_executions(shardcar::proto::ListExecutionsRequest {
            job_name: "lost".into(),
            limit: 0,
        })
        .await
        .expect("the history")
        .into_inner()
        .executions
        .into_iter()
        .find(|e| e.execution_id == trigger.execution_id)
        .expect("the answered execution's record");
    assert_eq!(
        record.outcome,
        shardcar::proto::ExecutionOutcome::Completed as i32,
        "the worker's Complete was recorded: {record:?}"
    );
    eprintln!(
        "the answer's call: {}; the item ran again {} ms after ZooKeeper was reachable again",
        reply.map_or_else(|s| format!("{:?}", s.code()), |_| "OK".into()),
        again.as_millis()
    );
}
