//! Drain.

use super::*;

#[test]
fn a_drain_waits_for_the_running_item_then_leaves() {
    // #19 case 3: nothing is handed over while the local worker may still run it.
    let (mut s, _) = ready(1, true);
    let t = run(&mut s, 1000);
    s.at(1100);
    let drain = s.step(Input::Drain {
        reply: 99,
        deadline: s.t0 + Duration::from_secs(11),
    });
    assert!(kinds(&drain).contains(&"Shutdown"));
    assert!(writes(&drain).is_empty(), "the run goes on");
    let done = s.answer(&t.execution_id, &[0]);
    let after = s.commit_all(done);
    assert_eq!(
        writes(&after),
        [
            "-/j/instances/10.0.0.1@-@7",
            "-/j/leader/election/instance",
            "-/j/shardcar/sidecars/10.0.0.1"
        ],
        "answered: the instance leaves, with nothing to fail over; then the sidecar's node"
    );
}

#[test]
fn a_drain_stops_renewing_one_lease_before_its_deadline_and_releases_after_the_lapse() {
    let (mut s, _) = ready(1, true);
    run(&mut s, 1000);
    s.at(1100);
    let deadline = s.t0 + Duration::from_secs(6);
    s.step(Input::Drain {
        reply: 99,
        deadline,
    });
    assert!(
        kinds(&s.tick(2100)).contains(&"Lease"),
        "renewed while time allows"
    );
    assert!(
        !kinds(&s.tick(3200)).contains(&"Lease"),
        "not within a lease of the deadline"
    );
    let lapsed = s.tick(5200);
    assert!(
        writes(&lapsed).contains(&"+/j/leader/failover/items/0".to_string()),
        "the worker's lease is over: its item fails over: {:?}",
        writes(&lapsed)
    );
}
