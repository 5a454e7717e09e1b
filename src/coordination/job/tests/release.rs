//! Revoke and timeout.

use super::*;

/// A job of one item on this sidecar's worker, with an execution timeout of 1 s.
fn ready_with_a_timeout_of_1s() -> Script {
    let (mut s, _) = ready(1, false);
    let mut tree = s.tree(&config(1, false), &[(0, ME)], ME);
    tree.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    tree.insert(
        s.paths.shardcar(),
        node("executionTimeoutSeconds: 1\n", 0, 12),
    );
    s.state.mirror.arrange(tree);
    s
}

#[test]
fn a_revoked_item_is_released_only_once_the_worker_declines_it() {
    let mut s = ready_with_a_timeout_of_1s();
    let t = run(&mut s, 1000);
    let revoked = s.tick(2100);
    assert!(kinds(&revoked).contains(&"Revoke"));
    assert!(writes(&revoked).is_empty(), "kept until acknowledged");
    let renewals = s.tick(3000);
    assert!(
        !kinds(&renewals).contains(&"Lease"),
        "no renewal while a revoke waits for its acknowledgement"
    );
    let declined = s.decline(&t.execution_id);
    assert_eq!(answered(&declined), [Ok(())]);
    assert!(
        writes(&declined).contains(&"-/j/sharding/0/running".to_string()),
        "{:?}",
        writes(&declined)
    );
}

#[test]
fn a_timeout_reached_at_a_fire_instant_is_decided_by_the_step_owed_after_the_fire() {
    let mut s = ready_with_a_timeout_of_1s();
    run(&mut s, 1000);
    // The next instant comes as the run's timeout passes: the fire's own step decides the
    // fire (its instance is busy), the timeout waits for the step owed after it.
    s.at(2100);
    let wall = s.env.wall;
    let fired = s.fire_step_only(wall);
    assert!(!kinds(&fired).contains(&"Revoke"), "{:?}", kinds(&fired));
    assert!(s.state.reconcile_owed());
    let owed = s.step(Input::Tick);
    assert!(kinds(&owed).contains(&"Revoke"), "{:?}", kinds(&owed));
    assert!(!s.state.reconcile_owed());
}

#[test]
fn an_answer_that_is_the_first_input_after_a_freeze_is_refused_as_taken_back() {
    // The failure suite's freeze test (tests/failure/fencing.rs), 1 run in 6: the worker
    // answered while this process was stopped for 7 s of a 10 s session (its lease still
    // valid); on waking, the answer was the first input, handled before the step's reconcile
    // fenced the execution, and got UNAVAILABLE ("send it again") instead of a refusal.
    let (mut s, _) = ready(1, false);
    let t = run(&mut s, 1000);
    s.unhealthy();
    s.at(8500);
    s.env.proof = Some(s.t0 + Duration::from_millis(1000));
    let woke = s.answer(&t.execution_id, &[0]);
    assert!(kinds(&woke).contains(&"Revoke"), "{:?}", kinds(&woke));
    let replies = answered(&woke);
    assert_eq!(replies.len(), 1, "{replies:?}");
    let refusal = replies[0].as_ref().expect_err("refused");
    assert!(
        refusal.contains("taken back") && refusal.contains("self-fencing"),
        "{refusal}"
    );
    assert!(
        writes(&woke).is_empty(),
        "nothing is recorded: {:?}",
        writes(&woke)
    );
}

#[test]
fn a_start_answered_after_the_sidecar_fenced_itself_is_never_sent() {
    // #9, found by the 30-minute soak (seed 2311): the sidecar was stopped right after sending a
    // start; on waking it fenced itself (no proof of life for 2/3 of the session) and took the
    // execution back, then the start's answer came and the trigger went out anyway. The item
    // was released meanwhile (failover on) and a peer ran it at the same time.
    let (mut s, _) = ready(1, true);
    let fired = s.fire(1000);
    let start = fired
        .iter()
        .find_map(|a| match a {
            Action::Commit { op, ops, .. } => Some((*op, ops.clone())),
            _ => None,
        })
        .expect("a start");
    // Frozen for 7.5 s (over 2/3 of the 10 s session): no proof of life since 1 s.
    s.unhealthy();
    s.at(8500);
    s.healthy();
    s.env.proof = Some(s.t0 + Duration::from_millis(1000));
    let woke = s.step(Input::Tick);
    assert!(triggers(&woke).is_empty());
    // The start had landed: its answer comes now. Nothing is sent; the items are released.
    s.env.proof = Some(s.env.now);
    let results = s.ok(&start.1);
    let answered = s.step(Input::Done {
        op: start.0,
        result: IoResult::Committed(Ok(results)),
    });
    let released = s.commit_all(answered.clone());
    let all: Vec<Action> = answered.into_iter().chain(released).collect();
    // The released item is flagged, and this sidecar's instance, idle now, may claim it like
    // any other: that is a FAILOVER run of its own, never the taken-back one.
    let sent = triggers(&all);
    assert!(
        sent.iter().all(|t| t.source == Source::Failover),
        "a taken-back execution is never sent: {:?}",
        kinds(&all)
    );
    assert!(
        writes(&all).contains(&"-/j/sharding/0/running".to_string()),
        "its worker never had it: released at once: {:?}",
        writes(&all)
    );
}
