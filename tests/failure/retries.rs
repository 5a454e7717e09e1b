//! #49: failed items run again under their job's retry policy, from state kept in ZooKeeper, so
//! that a pending retry outlives the sidecar that scheduled it; a trigger-once runs with the
//! job parameter it names.

use super::*;
use shardcar::proto::admin_service_client::AdminServiceClient;
use shardcar::proto::{ListExecutionsRequest, RetryPolicy, TriggerJobRequest};

/// A job of `total` items that never fires on its own, retried up to `max_attempts` runs in
/// all after `backoff`.
fn retrying_job(name: &str, total: i32, max_attempts: u32, backoff: Duration) -> JobConfig {
    JobConfig {
        retry: Some(RetryPolicy {
            max_attempts,
            initial_backoff: prost_types::Duration::try_from(backoff).ok(),
            max_backoff: None,
            multiplier: 1.0,
        }),
        ..job_config(name, NEVER, total)
    }
}

fn item_runs(w: &TestWorker, item: i32) -> Vec<Trigger> {
    w.triggers()
        .into_iter()
        .map(|(_, t)| t)
        .filter(|t| items_of(t).contains(&item))
        .collect()
}

async fn trigger(car: &Sidecar, job: &str, parameter: Option<&str>) {
    let mut admin = AdminServiceClient::connect(car.endpoint())
        .await
        .expect("the admin API");
    admin
        .trigger_job(TriggerJobRequest {
            job_name: job.into(),
            job_parameter: parameter.map(String::from),
        })
        .await
        .expect("triggered");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_item_failed_twice_runs_twice_as_retry_then_completes_and_runs_no_more() {
    let zk = ZooKeeper::start().await;
    let car = car(&zk, "retries", "127.0.0.2").await;
    let w = TestWorker::subscribe(
        &car.endpoint(),
        subscribe_request(retrying_job("again", 2, 3, Duration::from_millis(200))),
    )
    .await
    .unwrap();
    wait_n_items(&w, 2).await;
    trigger(&car, "again", None).await;
    let first = w.next_trigger(WAIT).await.unwrap();
    w.complete(&first.execution_id, &[0]).await.unwrap();
    w.report_failure(&first.execution_id, 1, "first")
        .await
        .unwrap();
    for attempt in [1, 2] {
        let retry = common::eventually(WAIT, || async {
            item_runs(&w, 1).into_iter().find(|t| t.attempt == attempt)
        })
        .await
        .unwrap_or_else(|| panic!("no retry {attempt}\n{}", w.summary()));
        assert_eq!(retry.source, TriggerSource::Retry as i32);
        assert_eq!(items_of(&retry), [1]);
        if attempt == 1 {
            w.report_failure(&retry.execution_id, 1, "second")
                .await
                .unwrap();
        } else {
            w.complete(&retry.execution_id, &[1]).await.unwrap();
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = item_runs(&w, 1);
    assert_eq!(runs.len(), 3, "no further run of it: {runs:?}");
    let tokens: Vec<i64> = runs.iter().map(|t| t.fencing_tokens[&1]).collect();
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "{tokens:?}");
    // The history says which attempt each run was.
    let mut admin = AdminServiceClient::connect(car.endpoint()).await.unwrap();
    let executions = admin
        .list_executions(ListExecutionsRequest {
            job_name: "again".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .executions;
    let mut retries: Vec<(u32, i32)> = executions
        .iter()
        .filter(|e| e.source == TriggerSource::Retry as i32)
        .map(|e| (e.attempt, e.outcome))
        .collect();
    retries.sort();
    assert_eq!(
        retries,
        [
            (1, shardcar::proto::ExecutionOutcome::Failed as i32),
            (2, shardcar::proto::ExecutionOutcome::Completed as i32)
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pending_retry_outlives_the_sidecar_of_the_items_owner() {
    let zk = ZooKeeper::start().await;
    let ns = "retries-kill";
    let mut a = car(&zk, ns, "127.0.0.2").await;
    let config = retrying_job("survive", 1, 2, Duration::from_secs(2));
    let wa = TestWorker::subscribe(&a.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    wait_n_items(&wa, 1).await;
    trigger(&a, "survive", None).await;
    let t = wa.next_trigger(WAIT).await.unwrap();
    wa.report_failure(&t.execution_id, 0, "before the crash")
        .await
        .unwrap();
    // The retry is pending, in ZooKeeper; the owner's sidecar dies before it is due, and the
    // item's next owner is a worker of another sidecar.
    let killed = Instant::now();
    a.kill();
    let b = car(&zk, ns, "127.0.0.3").await;
    let wb = TestWorker::subscribe(&b.endpoint(), subscribe_request(config))
        .await
        .unwrap();
    let retry = common::eventually(WAIT, || async {
        item_runs(&wb, 0)
            .into_iter()
            .find(|t| t.source == TriggerSource::Retry as i32)
    })
    .await
    .unwrap_or_else(|| panic!("the retry never ran on the survivor\n{}", wb.summary()));
    assert_eq!(retry.attempt, 1);
    assert!(retry.fencing_tokens[&0] > t.fencing_tokens[&0]);
    assert_eq!(
        item_runs(&wb, 0).len(),
        1,
        "the retry is the survivor's first run of the item"
    );
    eprintln!(
        "the retry ran on the survivor {} ms after the owner's sidecar was killed",
        killed.elapsed().as_millis()
    );
    wb.complete(&retry.execution_id, &[0]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trigger_with_a_parameter_carries_it_and_the_next_fire_the_jobs_own() {
    let car = Sidecar::start(SidecarOptions::standalone()).await;
    let config = JobConfig {
        job_parameter: "own".into(),
        ..job_config("param", "0/2 * * * * ?", 1)
    };
    let w = TestWorker::subscribe(&car.endpoint(), subscribe_request(config))
        .await
        .unwrap();
    w.set_auto_complete(true);
    wait_n_items(&w, 1).await;
    trigger(&car, "param", Some("just this once")).await;
    let manual = common::eventually(WAIT, || async {
        w.triggers()
            .into_iter()
            .map(|(_, t)| t)
            .find(|t| t.source == TriggerSource::Manual as i32)
    })
    .await
    .unwrap_or_else(|| panic!("no manual run\n{}", w.summary()));
    assert_eq!(manual.job_parameter, "just this once");
    let since = w.triggers().len();
    let cron = common::eventually(WAIT, || async {
        w.triggers()
            .into_iter()
            .skip(since)
            .map(|(_, t)| t)
            .find(|t| t.source == TriggerSource::Cron as i32)
    })
    .await
    .unwrap_or_else(|| panic!("no cron run\n{}", w.summary()));
    assert_eq!(cron.job_parameter, "own");
}
