//! Failed items run again under the job's retry policy (#49), and a trigger-once request runs
//! with the job parameter its node names.

use super::*;
use crate::coordination::observer::ItemFailure;
use crate::elasticjob::extras::{JobExtras, PendingRetry, RetryPolicy};

/// A job of `total` items owned here, with a policy of `max_attempts` runs and 200 ms backoffs
/// doubling up to 1 s, and an execution timeout of `timeout_s` (0: none).
fn retrying(total: i32, max_attempts: u32, timeout_s: u32) -> Script {
    let (mut s, _) = ready(total, false);
    let owners: Vec<(i32, &str)> = (0..total).map(|i| (i, ME)).collect();
    let mut tree = s.tree(&config(total, false), &owners, ME);
    tree.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    let extras = JobExtras {
        execution_timeout_seconds: timeout_s,
        resident: false,
        retry: Some(RetryPolicy {
            max_attempts,
            initial_backoff_ms: 200,
            max_backoff_ms: 1000,
            multiplier_permille: 2000,
        }),
    };
    tree.insert(s.paths.shardcar(), node(&extras.to_yaml(), 0, 12));
    s.state.mirror.arrange(tree);
    s
}

fn failures(actions: &[Action]) -> Vec<ItemFailure> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Observe(Observation::ItemFailed(f)) => Some((**f).clone()),
            _ => None,
        })
        .collect()
}

fn pending(s: &Script, i: i32) -> Option<PendingRetry> {
    s.state
        .mirror
        .view()
        .items
        .get(&i)
        .and_then(|it| it.retry.clone())
}

#[test]
fn a_failed_item_runs_again_as_retry_with_growing_backoffs_until_it_completes() {
    let mut s = retrying(2, 3, 0);
    let t = run(&mut s, 1000);
    assert_eq!((t.source, t.attempt), (Source::Cron, 0));
    s.at(1100);
    let failed = s.fail(&t.execution_id, &[1]);
    let done = s.commit_all(failed.clone());
    assert!(
        writes(&failed).contains(&"+/j/shardcar/retries/1".to_string()),
        "the failure's write schedules the retry: {:?}",
        writes(&failed)
    );
    let retry = pending(&s, 1).expect("a pending retry");
    assert_eq!(retry.attempt, 1);
    let due_ms = (wall0() + chrono::Duration::milliseconds(1100)).timestamp_millis() + 200;
    assert_eq!(retry.due_ms, due_ms, "200 ms after the failure");
    let f = failures(&done);
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].item, f[0].attempt, f[0].retry), (1, 0, Some(1)));
    // Item 0 completes; the run ends, and nothing runs before the backoff.
    let ended = s.answer(&t.execution_id, &[0]);
    s.commit_all(ended);
    assert!(triggers(&s.tick(1290)).is_empty(), "not before the backoff");
    let retried = triggers(&s.tick(1310));
    assert_eq!(retried.len(), 1, "the retry starts when due");
    let r1 = &retried[0];
    assert_eq!((r1.source, r1.attempt), (Source::Retry, 1));
    assert_eq!(r1.items.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [1]);
    assert!(
        r1.fencing_tokens[&1] > t.fencing_tokens[&1],
        "a new fencing token"
    );
    // While it runs, its pending retry (kept until the run ends) wakes nothing.
    let now = s.env.now;
    let wake = s.state.next_wakeup(&s.env.clone());
    assert!(
        wake.is_none_or(|w| w > now + std::time::Duration::from_millis(150)),
        "no polling while the retry runs: {:?}",
        wake.map(|w| w - now)
    );
    // The retry fails too: the next one waits twice as long.
    s.at(1400);
    let failed = s.fail(&r1.execution_id, &[1]);
    s.commit_all(failed);
    let retry = pending(&s, 1).expect("a second pending retry");
    assert_eq!(retry.attempt, 2);
    assert_eq!(
        retry.due_ms,
        (wall0() + chrono::Duration::milliseconds(1400)).timestamp_millis() + 400
    );
    let retried = triggers(&s.tick(1810));
    assert_eq!(retried.len(), 1);
    let r2 = &retried[0];
    assert_eq!((r2.source, r2.attempt), (Source::Retry, 2));
    // It completes: the pending retry goes, and the item does not run again.
    let ok = s.answer(&r2.execution_id, &[1]);
    let ended = s.commit_all(ok.clone());
    assert!(writes(&ok).contains(&"-/j/shardcar/retries/1".to_string()));
    assert!(pending(&s, 1).is_none());
    assert!(failures(&ended).is_empty());
    assert!(triggers(&s.tick(4000)).is_empty(), "no further run of it");
}

#[test]
fn a_failure_whose_attempts_ran_out_stands() {
    let mut s = retrying(1, 2, 0);
    let t = run(&mut s, 1000);
    let failed = s.fail(&t.execution_id, &[0]);
    s.commit_all(failed);
    let retried = triggers(&s.tick(1300));
    assert_eq!(retried[0].attempt, 1);
    let failed = s.fail(&retried[0].execution_id, &[0]);
    let done = s.commit_all(failed.clone());
    assert!(
        writes(&failed).contains(&"-/j/shardcar/retries/0".to_string()),
        "the retry kept during its run goes with its failure: {:?}",
        writes(&failed)
    );
    assert!(pending(&s, 0).is_none(), "two runs in all: no third");
    let f = failures(&done);
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].attempt, f[0].retry, f[0].retrying), (1, None, true));
    assert!(triggers(&s.tick(3000)).is_empty());
}

#[test]
fn a_fire_that_comes_while_a_retry_is_pending_runs_the_item_and_drops_the_retry() {
    let mut s = retrying(1, 3, 0);
    let t = run(&mut s, 1000);
    let failed = s.fail(&t.execution_id, &[0]);
    s.commit_all(failed);
    assert!(pending(&s, 0).is_some());
    // The next fire comes before the backoff ends (a trigger-once, or a cron instant).
    s.at(1100);
    let fired = s.fire(1100);
    assert!(
        writes(&fired).contains(&"-/j/shardcar/retries/0".to_string()),
        "{:?}",
        writes(&fired)
    );
    let started = s.commit_all(fired);
    let t2 = triggers(&started);
    assert_eq!((t2[0].source, t2[0].attempt), (Source::Cron, 0));
    assert!(pending(&s, 0).is_none());
    let ok = s.answer(&t2[0].execution_id, &[0]);
    s.commit_all(ok);
    assert!(
        triggers(&s.tick(2000)).is_empty(),
        "the dropped retry never runs"
    );
}

#[test]
fn an_item_that_times_out_is_retried_as_a_failure() {
    let mut s = retrying(1, 3, 1);
    let t = run(&mut s, 1000);
    let revoked = s.tick(2100);
    assert!(kinds(&revoked).contains(&"Revoke"));
    let declined = s.decline(&t.execution_id);
    let done = s.commit_all(declined.clone());
    assert!(
        writes(&declined).contains(&"+/j/shardcar/retries/0".to_string()),
        "{:?}",
        writes(&declined)
    );
    assert_eq!(failures(&done)[0].retry, Some(1));
    let retried = triggers(&s.tick(2400));
    assert_eq!((retried[0].source, retried[0].attempt), (Source::Retry, 1));
}

#[test]
fn a_trigger_once_with_a_parameter_carries_it_and_the_next_fire_the_jobs_own() {
    let (mut s, _) = ready(1, false);
    let p = s.paths.clone();
    // `TriggerJob` with a parameter: the trigger node's data.
    let mut tree = s.tree(&config(1, false), &[(0, ME)], ME);
    tree.insert(p.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    tree.insert(p.trigger(ME), node("p=42", 0, 20));
    s.state.mirror.arrange(with_ancestors(tree));
    let taken = s.tick(1000);
    let t = triggers(&taken);
    assert_eq!(t.len(), 1, "{:?}", kinds(&taken));
    assert_eq!(
        (t[0].source, t[0].job_parameter.as_str()),
        (Source::Manual, "p=42")
    );
    let ok = s.answer(&t[0].execution_id, &[0]);
    s.commit_all(ok);
    let next = run(&mut s, 2000);
    assert_eq!(next.job_parameter, "", "the job's own");
}

#[test]
fn a_retry_whose_worker_went_away_is_taken_over_and_goes_on_counting() {
    // Item 2's second retry was running on the peer when it went away: flagged for failover.
    let mut s = Script::new("j");
    let mut tree = shared_with_peer(&s, true, ME);
    let extras = JobExtras {
        execution_timeout_seconds: 0,
        resident: false,
        retry: Some(RetryPolicy {
            max_attempts: 4,
            initial_backoff_ms: 200,
            max_backoff_ms: 1000,
            multiplier_permille: 2000,
        }),
    };
    tree.insert(s.paths.shardcar(), node(&extras.to_yaml(), 0, 12));
    let kept = PendingRetry {
        attempt: 2,
        due_ms: wall0().timestamp_millis(),
        parameter: Some("p=1".into()),
    };
    let data = String::from_utf8(kept.to_data()).unwrap();
    tree.insert(s.paths.retry(2), node(&data, 0, 13));
    tree.insert(s.paths.failover_items(), node("", 0, 14));
    tree.insert(s.paths.failover_item(2), node("", 0, 15));
    let (_, actions) = s.join(Some(with_ancestors(tree)));
    let t = triggers(&actions);
    assert_eq!(t.len(), 1, "{:?}", kinds(&actions));
    assert_eq!((t[0].source, t[0].attempt), (Source::Failover, 2));
    assert_eq!(
        t[0].job_parameter, "p=1",
        "the retry's trigger parameter goes on too"
    );
    assert!(
        !writes(&actions).contains(&"-/j/shardcar/retries/2".to_string()),
        "the take-over keeps the pending retry: {:?}",
        writes(&actions)
    );
    // It fails: the third retry is due next, the last of four runs.
    s.at(500);
    let failed = s.fail(&t[0].execution_id, &[2]);
    s.commit_all(failed);
    assert_eq!(pending(&s, 2).map(|r| r.attempt), Some(3));
}

#[test]
fn the_retries_of_a_run_triggered_with_a_parameter_carry_it() {
    let mut s = retrying(1, 3, 0);
    let p = s.paths.clone();
    s.at(500);
    let seen = super::membership::seen(
        &mut s,
        WatchEvent::Created(p.trigger(ME)),
        Some(node("p=42", 0, 20)),
    );
    let taken = s.commit_all(seen);
    let t = triggers(&taken);
    assert_eq!(
        (t[0].source, t[0].job_parameter.as_str()),
        (Source::Manual, "p=42")
    );
    let failed = s.fail(&t[0].execution_id, &[0]);
    s.commit_all(failed);
    assert_eq!(
        pending(&s, 0).and_then(|r| r.parameter).as_deref(),
        Some("p=42")
    );
    let retried = triggers(&s.tick(1000));
    assert_eq!(
        (retried[0].source, retried[0].job_parameter.as_str()),
        (Source::Retry, "p=42")
    );
}
