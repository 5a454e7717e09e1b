//! Claiming ahead (`claim_ahead`): a fire's run is claimed (its `running` nodes written) the lead
//! before its instant, and triggered at the instant. A worker killed between the claim and the
//! instant leaves its item freed, not failed over: nothing runs before its fire time, and the
//! item runs at another worker at or after it.

use std::time::{SystemTime, UNIX_EPOCH};

use super::*;

/// The longest lead the settings allow, fixed for every instant (not sized from the fires due,
/// which for one job is about 50 ms): the widest window to act in.
const CLAIM_AHEAD: &str = "500ms";
/// Fires every two seconds, on even seconds.
const EVERY_2S: &str = "0/2 * * * * ?";
const PERIOD_MS: i64 = 2000;

async fn car_ahead(zk: &ZooKeeper, ns: &str, ip: &str) -> Sidecar {
    Sidecar::start(SidecarOptions {
        namespace: ns.into(),
        extra_args: vec![
            "--claim-ahead".into(),
            CLAIM_AHEAD.into(),
            "--claim-lead".into(),
            CLAIM_AHEAD.into(),
        ],
        ..SidecarOptions::zk(zk.connect_string(), ip)
    })
    .await
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

/// Milliseconds since the epoch of a protobuf timestamp.
fn ms_of(t: &prost_types::Timestamp) -> i64 {
    t.seconds * 1000 + i64::from(t.nanos) / 1_000_000
}

/// A test-process `Instant` on the wall clock, through a pair read together.
fn wall_of(at: Instant, base: (Instant, i64)) -> i64 {
    if at >= base.0 {
        base.1 + at.duration_since(base.0).as_millis() as i64
    } else {
        base.1 - base.0.duration_since(at).as_millis() as i64
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_between_the_claim_and_the_instant_leaves_its_item_to_run_at_the_instant_not_before(
) {
    let zk = ZooKeeper::start().await;
    let ns = "fail-claim-ahead";
    let doomed_car = car_ahead(&zk, ns, "127.0.0.2").await;
    let survivor_car = car_ahead(&zk, ns, "127.0.0.3").await;
    let config = JobConfig {
        failover: true,
        ..job_config("ahead", EVERY_2S, 2)
    };
    let mut doomed =
        ChildWorker::spawn(&doomed_car.endpoint(), subscribe_request(config.clone())).await;
    let survivor = TestWorker::subscribe(&survivor_car.endpoint(), subscribe_request(config))
        .await
        .unwrap();
    survivor.set_auto_complete(true);
    let own = wait_n_items(&survivor, 1).await[0];
    let item = 1 - own;
    let base = (Instant::now(), wall_ms());
    let client = zk_client(&zk, ns).await;
    let running = format!("/ahead/sharding/{item}/running");
    // Wait for a claim of the doomed worker's item ahead of its instant with time to spare
    // (200 ms, for its sidecar to see the stream end before the instant), answering the runs
    // that went out meanwhile (a claim seen too late to act on is let run).
    let deadline = Instant::now() + WAIT;
    let (instant, killed) = loop {
        assert!(
            Instant::now() < deadline,
            "no claim of item {item} seen ahead of its instant\n{}",
            doomed_car.log_tail(40)
        );
        if let Some(stat) = client.check_stat(&running).await.expect("zookeeper") {
            // The instant after the claim; a run started at its instant was written just after
            // the instant before (the lead is 500 ms of a 2 s period).
            let instant = (stat.ctime / PERIOD_MS + 1) * PERIOD_MS;
            if instant - stat.ctime <= 600 && wall_ms() + 200 < instant {
                doomed.kill();
                break (instant, Instant::now());
            }
        }
        let answered: Vec<String> = doomed.answers().into_iter().map(|(e, _)| e).collect();
        for (_, t) in doomed.triggers() {
            if !answered.contains(&t.execution_id) {
                doomed.complete(&t.execution_id, &items_of(&t)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // The item runs at the survivor, at or after the instant.
    let ran = common::eventually(WAIT, || async {
        survivor
            .triggers()
            .into_iter()
            .find(|(at, t)| items_of(t).contains(&item) && wall_of(*at, base) >= instant - 50)
    })
    .await;
    let (_, ran) = ran.unwrap_or_else(|| {
        panic!(
            "item {item} never ran at the survivor after the instant\n{}",
            survivor.summary()
        )
    });
    wait_answered(&survivor, &ran.execution_id).await;
    assert_ne!(
        ran.source,
        TriggerSource::Failover as i32,
        "a run that never started is not failed over: {ran:?}"
    );
    for (at, t) in survivor.triggers() {
        let received = wall_of(at, base);
        let fire = ms_of(t.fire_time.as_ref().expect("a fire time"));
        // The clocks are one host's; the receipt is read in this process a little after it.
        assert!(
            received + 5 >= fire,
            "a trigger reached the survivor {} ms before its fire time: {t:?}",
            fire - received
        );
        if items_of(&t).contains(&item) {
            assert!(
                received + 50 >= instant,
                "item {item} ran {} ms before the instant its claim was for: {t:?}",
                instant - received
            );
        }
    }
    // The survivor's own run at that instant was claimed ahead too, and sent at the instant.
    let at_instant = survivor
        .triggers()
        .into_iter()
        .find(|(_, t)| t.fire_time.as_ref().map(ms_of) == Some(instant))
        .unwrap_or_else(|| panic!("no run for the instant\n{}", survivor.summary()));
    assert_eq!(at_instant.1.source, TriggerSource::Cron as i32);
    let mut admin =
        shardcar::proto::admin_service_client::AdminServiceClient::connect(survivor_car.endpoint())
            .await
            .expect("the admin API");
    let record = admin
        .list_executions(shardcar::proto::ListExecutionsRequest {
            job_name: "ahead".into(),
            limit: 0,
        })
        .await
        .expect("the history")
        .into_inner()
        .executions
        .into_iter()
        .find(|e| e.execution_id == at_instant.1.execution_id)
        .expect("the run's record");
    let claimed = record
        .events
        .iter()
        .find(|e| e.name == "claimed ahead")
        .and_then(|e| e.at.as_ref())
        .map(ms_of)
        .unwrap_or_else(|| panic!("not claimed ahead: {record:?}"));
    assert!(claimed < instant, "claimed at {claimed}, instant {instant}");
    check_killed_and_survivor(&doomed, killed, &survivor);
}
