//! #9, defect 1: a `Subscribe` cancelled anywhere between being accepted and its stream being
//! watched ends as if its stream had ended. No instance stays without a live stream, and the
//! items are owned by the worker that is really there.

use super::*;

/// Sends `count` subscriptions for `config`'s job, each cancelled by the client 0–4 ms after it
/// was sent (a worker killed while starting, a client deadline, a crash loop).
async fn cancelled_subscribes(car: &Sidecar, config: &JobConfig, count: u32) {
    cancelled_subscribes_within(car, config, count, 5).await;
}

/// As [`cancelled_subscribes`], each cancelled `n % spread_ms` ms after it was sent.
async fn cancelled_subscribes_within(
    car: &Sidecar,
    config: &JobConfig,
    count: u32,
    spread_ms: u32,
) {
    let client = car.client().await;
    for n in 0..count {
        let mut client = client.clone();
        let request = subscribe_request(config.clone());
        let call = tokio::spawn(async move {
            if let Ok(response) = client.subscribe(request).await {
                // Accepted before the cancel: drop the stream right away too.
                drop(response);
            }
        });
        tokio::time::sleep(Duration::from_millis(u64::from(n % spread_ms))).await;
        call.abort();
        let _ = call.await;
    }
}

/// The instances the namespace holds for `job`.
async fn instances(zk: &ZooKeeper, ns: &str, job: &str) -> Vec<String> {
    let prefix = format!("/{ns}/{job}/instances/");
    zk_tree(&zk.connect_string(), ns)
        .await
        .keys()
        .filter_map(|p| p.strip_prefix(&prefix).map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn subscribes_cancelled_while_joining_leave_no_ghost_instances() {
    let zk = ZooKeeper::start().await;
    let ns = "fail-ghosts";
    let car = car(&zk, ns, "127.0.0.2").await;
    let config = job_config("ghosts", NEVER, 4);
    let live = TestWorker::subscribe(&car.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    wait_n_items(&live, 4).await;
    cancelled_subscribes(&car, &config, 200).await;
    let settled = common::eventually(WAIT, || async {
        let ids = instances(&zk, ns, "ghosts").await;
        (ids == [live.instance_id().to_string()]).then_some(())
    })
    .await;
    assert!(
        settled.is_some(),
        "instances/ must hold exactly the live stream, got {:?}\n{}",
        instances(&zk, ns, "ghosts").await,
        car.log_tail(30)
    );
    let items = live
        .wait_items(|items| items.len() == 4, WAIT)
        .await
        .unwrap_or_else(|e| panic!("the live worker must own every item again: {e}"));
    assert_eq!(items, [0, 1, 2, 3]);
}

/// Found by the nemesis (seed 1123): with no live worker on this sidecar, its job driver has
/// retired, so every Subscribe starts a new one that first sets the job up. A cancel during
/// that setup was lost, and the instance was then created for a stream already gone: a ghost
/// that owned items and led the job.
#[tokio::test(flavor = "multi_thread")]
async fn subscribes_cancelled_while_the_job_is_being_set_up_leave_no_ghost() {
    let zk = ZooKeeper::start().await;
    let ns = "fail-ghosts-setup";
    let car = car(&zk, ns, "127.0.0.2").await;
    let config = job_config("ghostsetup", NEVER, 2);
    let mut first = TestWorker::subscribe(&car.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    wait_n_items(&first, 2).await;
    first.close().await;
    // The first setup of each new driver takes a few registry round trips: cancels spread
    // over 0-24 ms land before, during and after it.
    cancelled_subscribes_within(&car, &config, 100, 25).await;
    let settled = common::eventually(WAIT, || async {
        instances(&zk, ns, "ghostsetup")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    assert!(
        settled.is_some(),
        "no instance may outlive its stream, got {:?}\n{}",
        instances(&zk, ns, "ghostsetup").await,
        car.log_tail(30)
    );
    // And a real worker gets every item.
    let live = TestWorker::subscribe(&car.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    let items = live
        .wait_items(|items| items.len() == 2, WAIT)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the live worker must own every item: {e}\n{}",
                car.log_tail(60)
            )
        });
    assert_eq!(items, [0, 1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_cron_running_the_live_worker_keeps_running_every_item() {
    let zk = ZooKeeper::start().await;
    let ns = "fail-ghosts-cron";
    let car = car(&zk, ns, "127.0.0.2").await;
    let config = job_config("ghostcron", "* * * * * ?", 4);
    let live = TestWorker::subscribe_strict(
        &car.endpoint(),
        subscribe_request(config.clone()),
        Duration::from_millis(50),
    )
    .await
    .unwrap();
    cancelled_subscribes(&car, &config, 30).await;
    let since = Instant::now();
    // Within a few cron periods every item is run to completion by the one live worker.
    let all_ran = common::eventually(WAIT, || async {
        let mut ran: Vec<i32> = live
            .strict_runs()
            .iter()
            .filter(|r| r.start >= since && r.reply == Some(Ok(())))
            .flat_map(|r| r.items.clone())
            .collect();
        ran.sort_unstable();
        ran.dedup();
        (ran == [0, 1, 2, 3]).then_some(())
    })
    .await;
    assert!(
        all_ran.is_some(),
        "every item runs on the live worker after the cancelled subscribes:\n{}\n{}",
        live.summary(),
        car.log_tail(30)
    );
    assert_eq!(instances(&zk, ns, "ghostcron").await, [live.instance_id()]);
}
