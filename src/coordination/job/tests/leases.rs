//! Leases and triggers.

use super::*;

/// The session answers again at `ms`: the reload it asks for is answered with the job as it
/// was (one item, owned here), and every write is answered at once. Returns all that followed.
fn recover(s: &mut Script, ms: u64) -> Vec<Action> {
    s.at(ms);
    s.healthy();
    let back = s.step(Input::Session(s.env.session.clone()));
    // A reload first (the session came back), then the catch-up under a new lease.
    let reload = back.iter().find_map(|a| match a {
        Action::Reload { op } => Some(*op),
        _ => None,
    });
    let mut all = back.clone();
    let mut actions = back;
    if let Some(op) = reload {
        let tree = {
            let mut t = s.tree(&config(1, false), &[(0, ME)], ME);
            t.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
            t
        };
        s.at(ms + 300);
        actions = s.step(Input::Done {
            op,
            result: IoResult::Loaded(Ok(tree)),
        });
        all.extend(actions.iter().cloned());
    }
    let caught_up = s.commit_all(actions);
    all.extend(caught_up);
    all
}

/// The one catch-up run after `recover`: a MISFIRE trigger, with a lease sent before it.
fn assert_caught_up_once_under_a_lease(all: &[Action]) -> Trigger {
    let t = triggers(all);
    assert_eq!(t.len(), 1, "{:?}", kinds(all));
    assert_eq!(t[0].source, Source::Misfire);
    let k = kinds(all);
    let lease = k.iter().position(|k| *k == "Lease");
    assert!(
        lease.is_some() && lease < k.iter().position(|k| *k == "Trigger"),
        "a lease comes before the trigger: {k:?}"
    );
    t[0].clone()
}

#[test]
fn a_trigger_never_goes_out_on_a_lease_close_to_its_end() {
    // #18: the trigger reaches the worker under a lease that is still valid.
    let (mut s, _) = ready(1, false);
    s.tick(1000); // a renewal at 1 s (one third of the lease)
    let fired = s.fire(1900);
    assert!(!kinds(&fired).contains(&"Lease"), "no renewal is due yet");
    s.at(2600); // the registry answers the start late: the lease has 1.4 s left of 3 s
    let started = s.commit_all(fired);
    let k = kinds(&started);
    let lease = k.iter().position(|k| *k == "Lease");
    let trigger = k.iter().position(|k| *k == "Trigger");
    assert!(
        lease.is_some() && lease < trigger,
        "a fresh lease comes right before the trigger: {k:?}"
    );
}

#[test]
fn no_trigger_is_sent_without_a_lease_and_the_missed_fire_is_caught_up_once_healthy() {
    // #18: a subscribe (or a fire) while no lease may be granted.
    let (mut s, _) = ready(1, false);
    s.at(1000);
    s.unhealthy();
    s.at(4500);
    let fired = s.fire(4500);
    assert!(triggers(&fired).is_empty());
    assert!(writes(&fired).is_empty(), "nothing is written either");
    let all = recover(&mut s, 5000);
    assert_caught_up_once_under_a_lease(&all);
}

#[test]
fn a_subscribe_registered_while_no_lease_may_be_granted_gets_no_trigger_before_a_lease() {
    // #18, the third path: the registration's answer comes back while the session cannot be
    // proven alive. The worker is told who it is and what it owns, but gets no lease; a fire
    // then sends nothing and writes nothing, and once the session answers again the missed
    // fire is caught up once, under a lease sent first.
    let mut s = Script::new("j");
    let mut tree = s.tree(&config(1, false), &[(0, ME)], ME);
    tree.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    s.next_reply += 1;
    s.next_stream += 1;
    let joined = s.step(Input::Join {
        reply: s.next_reply,
        stream: s.next_stream,
        instance_id: ME.into(),
        config: None,
        overwrite: false,
        max_concurrent: 1,
    });
    let op = setup_op(&joined).expect("a setup");
    let set_up = s.step(Input::Done {
        op,
        result: IoResult::SetUp(Ok(tree)),
    });
    s.at(500);
    s.unhealthy();
    s.at(1500);
    let registered = s.commit_all(set_up);
    let k = kinds(&registered);
    assert!(
        k.contains(&"Registered") && k.contains(&"Reply"),
        "the subscribe is answered: {k:?}"
    );
    assert!(!k.contains(&"Lease"), "no lease may be granted now: {k:?}");
    let fired = s.fire(2000);
    assert!(triggers(&fired).is_empty(), "{:?}", kinds(&fired));
    assert!(writes(&fired).is_empty(), "nothing is written either");
    let all = recover(&mut s, 3000);
    assert_caught_up_once_under_a_lease(&all);
}

#[test]
fn a_start_answered_once_no_lease_may_be_granted_sends_nothing_and_is_caught_up() {
    // #18: the start of a fire is answered when the worker's lease is well used and the
    // session can no longer be proven alive, so no fresh lease may go before the trigger. The
    // trigger is not sent (the worker would have to decline it), the execution is given back
    // at once, and the fire is caught up once the session answers again.
    let (mut s, _) = ready(1, false);
    s.tick(1000); // a renewal at 1 s (one third of the lease)
    let fired = s.fire(1900);
    assert!(triggers(&fired).is_empty(), "the start is in flight");
    s.at(2100);
    s.unhealthy();
    s.at(2600);
    let answered = s.commit_all(fired);
    let k = kinds(&answered);
    assert!(
        !k.contains(&"Trigger") && !k.contains(&"Lease"),
        "no lease may be granted, so no trigger goes out: {k:?}"
    );
    let all = recover(&mut s, 3200);
    let t = assert_caught_up_once_under_a_lease(&all);
    assert!(t.items.iter().any(|i| i.0 == 0));
}

#[test]
fn a_lease_that_runs_out_voids_what_was_delivered_under_it() {
    let (mut s, _) = ready(1, true);
    let t = run(&mut s, 1000);
    s.at(1100);
    s.unhealthy(); // no renewals from now on
    let lapsed = s.tick(4000);
    assert!(
        writes(&lapsed).is_empty(),
        "the registry is not reachable: the release waits"
    );
    // The worker learns at once that the execution is void (it stopped at the lapse anyway):
    // whichever comes first after a pause, the lapse or the session's expiry, it gets a Revoke.
    assert!(
        kinds(&lapsed).contains(&"Revoke"),
        "a Revoke tells the worker: {:?}",
        kinds(&lapsed)
    );
    s.healthy();
    let released = s.tick(4100);
    assert!(
        writes(&released).contains(&"+/j/leader/failover/items/0".to_string()),
        "the worker stopped when its lease ran out: its item fails over: {:?}",
        writes(&released)
    );
    let late = s.answer(&t.execution_id, &[0]);
    assert_eq!(
        kinds(&late),
        ["Remembered"],
        "the execution is over: the sidecar's memory of it refuses the answer"
    );
}

/// One row of the trigger table: when the registry stops answering (if it does), and when the
/// start of a fire at 1.9 s is answered, with the lease renewed at 1 s (so it ends at 4 s and is
/// "fresh", more than two thirds left, until 2 s).
struct TriggerRow {
    case: &'static str,
    unhealthy_at: Option<u64>,
    answered_at: u64,
    /// The worker events of the step that answers the start, in order.
    sent: &'static [&'static str],
    /// Whether the fire wrote a start at all.
    started: bool,
}

#[test]
fn when_a_trigger_goes_out_and_under_which_lease_as_a_table() {
    // #18: a trigger only ever reaches a worker under a lease valid for most of its length;
    // when none may be granted, nothing is sent and the fire is caught up later.
    const ROWS: &[TriggerRow] = &[
        TriggerRow {
            case: "healthy, lease fresh",
            unhealthy_at: None,
            answered_at: 1950,
            sent: &["Trigger"],
            started: true,
        },
        TriggerRow {
            case: "healthy, lease a third used",
            unhealthy_at: None,
            answered_at: 2600,
            sent: &["Lease", "Trigger"],
            started: true,
        },
        TriggerRow {
            case: "silent registry after the fire, lease fresh",
            unhealthy_at: Some(1920),
            answered_at: 1950,
            sent: &["Trigger"],
            started: true,
        },
        TriggerRow {
            case: "silent registry after the fire, lease a third used",
            unhealthy_at: Some(2100),
            answered_at: 2600,
            sent: &[],
            started: true,
        },
        TriggerRow {
            case: "silent registry before the fire",
            unhealthy_at: Some(1500),
            answered_at: 1950,
            sent: &[],
            started: false,
        },
    ];
    for row in ROWS {
        let (mut s, _) = ready(1, false);
        s.tick(1000);
        if let Some(at) = row.unhealthy_at.filter(|at| *at < 1900) {
            s.at(at);
            s.unhealthy();
        }
        let fired = s.fire(1900);
        assert_eq!(
            !writes(&fired).is_empty(),
            row.started,
            "{}: {:?}",
            row.case,
            kinds(&fired)
        );
        if let Some(at) = row.unhealthy_at.filter(|at| *at >= 1900) {
            s.at(at);
            s.unhealthy();
        }
        s.at(row.answered_at);
        let answered = s.commit_all(fired);
        let sent: Vec<&str> = kinds(&answered)
            .into_iter()
            .filter(|k| ["Lease", "Trigger", "Revoke"].contains(k))
            .collect();
        assert_eq!(sent, row.sent, "{}", row.case);
    }
}
