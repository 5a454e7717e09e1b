//! Leases and triggers.

use super::*;

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
    s.healthy();
    s.at(5000);
    let back = s.step(Input::Session(s.env.session.clone()));
    // A reload first (the session came back), then the catch-up under a new lease.
    let reload = back.iter().find_map(|a| match a {
        Action::Reload { op } => Some(*op),
        _ => None,
    });
    let mut actions = back;
    if let Some(op) = reload {
        let tree = {
            let mut t = s.tree(&config(1, false), &[(0, ME)], ME);
            t.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
            t
        };
        s.at(5300);
        actions = s.step(Input::Done {
            op,
            result: IoResult::Loaded(Ok(tree)),
        });
    }
    let caught_up = s.commit_all(actions.clone());
    let all: Vec<Action> = actions.into_iter().chain(caught_up).collect();
    let t = triggers(&all);
    assert_eq!(t.len(), 1, "{:?}", kinds(&all));
    assert_eq!(t[0].source, Source::Misfire);
    let k = kinds(&all);
    assert!(k.iter().position(|k| *k == "Lease") < k.iter().position(|k| *k == "Trigger"));
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
    assert!(answered(&late)[0].is_err());
}
