//! Resident jobs (#50): each owned item held in an execution of its own, revoked alone when it
//! moves, started on its new owner only once its last holder let go, restarted after a backoff
//! when its worker ends the hold.

use super::membership::{answer_reads, seen};
use super::*;
use crate::coordination::observer::ItemFailure;
use crate::elasticjob::extras::JobExtras;

/// A resident job of 4 items led by the peer: the local instance owns 0 and 1, the peer 2 and
/// 3, and the peer still holds 2 (its `running` node). Returns the script and the holds sent.
fn holding() -> (Script, Vec<Trigger>) {
    let mut s = Script::new("j");
    let mut config = config(4, false);
    config.cron = None;
    let p = s.paths.clone();
    let mut tree = s.tree(&config, &[(0, ME), (1, ME), (2, PEER), (3, PEER)], PEER);
    tree.insert(p.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    let extras = JobExtras {
        resident: true,
        ..JobExtras::default()
    };
    tree.insert(p.shardcar(), node(&extras.to_yaml(), 0, 12));
    tree.insert(p.item_running(2), node(PEER, 1, 13));
    let (_, actions) = s.join(Some(with_ancestors(tree)));
    (s, triggers(&actions))
}

fn items(t: &Trigger) -> Vec<i32> {
    t.items.iter().map(|(i, _)| *i).collect()
}

fn revoked(actions: &[Action]) -> Vec<Vec<i32>> {
    events(actions)
        .into_iter()
        .filter_map(|e| match e {
            WorkerEvent::Revoke { items, .. } => Some(items.clone()),
            _ => None,
        })
        .collect()
}

/// The owners and holders as given, read whole after a watch event on item 0's owner.
fn owners_become(s: &mut Script, owners: &[(i32, &str)], running: &[(i32, &str)]) -> Vec<Action> {
    let event = WatchEvent::DataChanged(s.paths.item_instance(0));
    read_whole(s, event, owners, running)
}

/// `event`, then the read of the items it makes, answered with `owners` and `running`.
fn read_whole(
    s: &mut Script,
    event: WatchEvent,
    owners: &[(i32, &str)],
    running: &[(i32, &str)],
) -> Vec<Action> {
    let p = s.paths.clone();
    let seen = s.step(Input::Watched(event));
    let read = read_many(&seen).expect("the owners are read again");
    let mut state: BTreeMap<String, Node> = owners
        .iter()
        .map(|(i, o)| (p.item_instance(*i), node(o, 1, 300)))
        .collect();
    for (i, _) in owners {
        let epoch = s.versions.get(&p.item(*i)).copied().unwrap_or(0);
        state.insert(p.item(*i), node("", epoch, 7));
    }
    state.insert(p.sharding(), node("", 0, 6));
    for (i, who) in running {
        state.insert(p.item_running(*i), node(who, 1, 13));
    }
    let mut all = seen;
    let mut read = Some(read);
    while let Some(r) = read.take() {
        let answered = answer_reads(s, r, &state);
        read = read_many(&answered);
        all.extend(answered);
    }
    let more = s.commit_all(all.clone());
    all.extend(more);
    all
}

#[test]
fn each_owned_item_is_held_in_an_execution_of_its_own_and_never_fired() {
    let (mut s, holds) = holding();
    assert_eq!(holds.len(), 2);
    for (t, item) in holds.iter().zip([0, 1]) {
        assert_eq!(
            (t.source, t.attempt, items(t)),
            (Source::Resident, 0, vec![item])
        );
        assert!(t.fencing_tokens[&item] > 0);
    }
    assert!(triggers(&s.fire(5000)).is_empty(), "no cron fire");
    // A trigger-once request is taken and dropped.
    let p = s.paths.clone();
    s.at(6000);
    let seen = seen(
        &mut s,
        WatchEvent::Created(p.trigger(ME)),
        Some(node("", 0, 50)),
    );
    let mut taken = s.commit_all(seen.clone());
    taken.extend(seen);
    assert!(
        writes(&taken).contains(&format!("-{}", p.trigger(ME))),
        "{:?}",
        writes(&taken)
    );
    assert!(triggers(&taken).is_empty(), "{:?}", kinds(&taken));
}

#[test]
fn an_item_that_moves_is_revoked_alone_and_released_once_its_worker_declines() {
    let (mut s, holds) = holding();
    s.at(100);
    let moved = owners_become(
        &mut s,
        &[(0, ME), (1, PEER), (2, PEER), (3, PEER)],
        &[(0, ME), (1, ME), (2, PEER)],
    );
    assert_eq!(revoked(&moved), [vec![1]], "only the moved item's hold");
    assert!(
        !writes(&moved)
            .iter()
            .any(|w| w.contains("/sharding/1/running")),
        "nothing released before the worker let go: {:?}",
        writes(&moved)
    );
    let declined = s.decline(&holds[1].execution_id);
    let w = writes(&s.commit_all(declined.clone()));
    let mut all = writes(&declined);
    all.extend(w);
    assert!(
        all.contains(&"-/j/sharding/1/running".to_string()),
        "{all:?}"
    );
    assert!(
        !all.iter().any(|x| x.contains("failover")),
        "a resident item moves with the sharding, never by failover: {all:?}"
    );
    let later = s.tick(3000);
    assert!(
        triggers(&later).is_empty() && revoked(&later).is_empty(),
        "item 0's hold goes on untouched: {:?} {:?}",
        triggers(&later)
            .iter()
            .map(|t| (t.source, items(t)))
            .collect::<Vec<_>>(),
        kinds(&later)
    );
}

#[test]
fn an_item_that_arrives_starts_only_once_its_last_holder_let_go() {
    let (mut s, _) = holding();
    s.at(100);
    // Item 2 becomes ours while the peer still holds it.
    let owners = [(0, ME), (1, ME), (2, ME), (3, PEER)];
    let arrived = owners_become(&mut s, &owners, &[(0, ME), (1, ME), (2, PEER)]);
    assert!(triggers(&arrived).is_empty(), "not while the peer holds it");
    s.at(250);
    let p = s.paths.clone();
    let event = WatchEvent::Deleted(p.item_running(2));
    let started = read_whole(&mut s, event, &owners, &[(0, ME), (1, ME)]);
    let t = triggers(&started);
    assert_eq!(t.len(), 1, "{:?}", kinds(&started));
    assert_eq!((t[0].source, items(&t[0])), (Source::Resident, vec![2]));
    let waited = started.iter().find_map(|a| match a {
        Action::Observe(Observation::HoldStarted { item: 2, waited }) => Some(*waited),
        _ => None,
    });
    assert_eq!(
        waited,
        Some(Some(Duration::from_millis(150))),
        "the hand-off counts from the reading that made it ours"
    );
}

#[test]
fn a_hold_its_worker_ends_starts_again_after_a_growing_backoff_and_failures_stand() {
    let (mut s, holds) = holding();
    s.at(100);
    let ended = s.answer(&holds[0].execution_id, &[0]);
    assert!(writes(&ended).contains(&"+/j/shardcar/retries/0".to_string()));
    s.commit_all(ended);
    assert!(
        triggers(&s.tick(1050)).is_empty(),
        "1 s after the end, not before"
    );
    let again = triggers(&s.tick(1150));
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].source, again[0].attempt), (Source::Resident, 1));
    s.at(1200);
    let failed = s.fail(&again[0].execution_id, &[0]);
    let done = s.commit_all(failed);
    let failures: Vec<ItemFailure> = done
        .iter()
        .filter_map(|a| match a {
            Action::Observe(Observation::ItemFailed(f)) => Some((**f).clone()),
            _ => None,
        })
        .collect();
    assert_eq!(failures.len(), 1);
    assert_eq!(
        failures[0].retry, None,
        "a hold's failure stands (and alerts)"
    );
    let restart = s.state.mirror.view().items[&0]
        .retry
        .clone()
        .expect("a restart");
    assert_eq!(restart.attempt, 2);
    let due = (wall0() + chrono::Duration::milliseconds(1200)).timestamp_millis() + 2000;
    assert_eq!(restart.due_ms, due, "twice the first backoff");
}

#[test]
fn a_hold_given_back_unasked_starts_again_after_the_backoff_not_at_once() {
    // A worker that declines a hold nobody revoked (its own stop, a bug) is not handed the
    // item again at once: that would loop as fast as the two can talk.
    let (mut s, holds) = holding();
    s.at(100);
    let declined = s.decline(&holds[0].execution_id);
    let done = s.commit_all(declined.clone());
    let mut all = writes(&declined);
    all.extend(writes(&done));
    assert!(
        all.contains(&"-/j/sharding/0/running".to_string()),
        "{all:?}"
    );
    assert!(
        all.contains(&"+/j/shardcar/retries/0".to_string()),
        "the restart is scheduled with the release: {all:?}"
    );
    assert!(triggers(&done).is_empty(), "not at once");
    assert!(triggers(&s.tick(1050)).is_empty(), "nor before the backoff");
    let again = triggers(&s.tick(1150));
    assert_eq!(again.len(), 1, "after the first backoff (1 s)");
    assert_eq!(
        (again[0].source, items(&again[0])),
        (Source::Resident, vec![0])
    );
}

#[test]
fn a_revoked_hold_is_given_to_its_next_holder_without_a_backoff() {
    // A hand-off is not a restart: once the old holder let go the new one starts at once.
    let (mut s, holds) = holding();
    s.at(100);
    let moved = owners_become(
        &mut s,
        &[(0, PEER), (1, ME), (2, PEER), (3, PEER)],
        &[(0, ME), (1, ME), (2, PEER)],
    );
    assert_eq!(revoked(&moved), [vec![0]]);
    let declined = s.decline(&holds[0].execution_id);
    let done = s.commit_all(declined.clone());
    let mut all = writes(&declined);
    all.extend(writes(&done));
    assert!(
        all.contains(&"-/j/sharding/0/running".to_string()),
        "{all:?}"
    );
    assert!(
        !all.iter().any(|w| w.contains("/shardcar/retries/0")),
        "no restart backoff for the next holder: {all:?}"
    );
}

#[test]
fn every_hold_is_revoked_when_its_server_is_disabled() {
    let (mut s, _) = holding();
    s.at(100);
    let path = s.paths.server(IP);
    let changed = seen(
        &mut s,
        WatchEvent::DataChanged(path),
        Some(node("DISABLED", 1, 200)),
    );
    let mut got = revoked(&changed);
    got.sort();
    assert_eq!(got, [vec![0], vec![1]], "{:?}", kinds(&changed));
    assert!(triggers(&changed).is_empty(), "nothing starts meanwhile");
}

#[test]
fn a_disabled_items_hold_is_revoked_alone() {
    let (mut s, _) = holding();
    s.at(100);
    let p = s.paths.clone();
    // ElasticJob's console disables an item with a `disabled` child of its node.
    let changed = seen(
        &mut s,
        WatchEvent::Created(p.item_disabled(1)),
        Some(node("", 0, 210)),
    );
    assert_eq!(revoked(&changed), [vec![1]], "{:?}", kinds(&changed));
}

#[test]
fn a_hold_whose_worker_never_declines_is_released_at_the_end_of_its_lease() {
    let (mut s, holds) = holding();
    s.at(100);
    let moved = owners_become(
        &mut s,
        &[(0, PEER), (1, ME), (2, PEER), (3, PEER)],
        &[(0, ME), (1, ME), (2, PEER)],
    );
    assert_eq!(revoked(&moved), [vec![0]]);
    // No Decline; no renewal goes out meanwhile, so the lease sent at the join runs out.
    let before = s.tick(LEASE.as_millis() as u64 - 100);
    assert!(
        !writes(&before).contains(&"-/j/sharding/0/running".to_string()),
        "not while the worker may still hold it: {:?}",
        writes(&before)
    );
    let after = s.tick(LEASE.as_millis() as u64 + 200);
    let mut all = after.clone();
    all.extend(s.commit_all(after));
    assert!(
        writes(&all).contains(&"-/j/sharding/0/running".to_string()),
        "{:?}",
        writes(&all)
    );
    let _ = holds;
}

#[test]
fn a_drain_revokes_every_hold() {
    let (mut s, _) = holding();
    s.at(100);
    let deadline = s.env.now + Duration::from_secs(10);
    let drained = s.step(Input::Drain {
        reply: 99,
        deadline,
    });
    let mut got = revoked(&drained);
    got.sort();
    assert_eq!(got, [vec![0], vec![1]], "{:?}", kinds(&drained));
}

#[test]
fn a_hold_that_lasted_longer_than_the_longest_backoff_restarts_from_the_first() {
    // A worker whose hold ended after a long life is not punished for earlier short ones.
    let (mut s, holds) = holding();
    s.at(1000);
    let ended = s.answer(&holds[0].execution_id, &[0]);
    s.commit_all(ended);
    let first = triggers(&s.tick(2100));
    assert_eq!(first[0].attempt, 1);
    // This hold lasts past the longest backoff (1 min by default): the next restart is a first.
    s.at(2100 + 61_000);
    let ended = s.answer(&first[0].execution_id, &[0]);
    s.commit_all(ended);
    let restart = s.state.mirror.view().items[&0]
        .retry
        .clone()
        .expect("a restart");
    assert_eq!(restart.attempt, 1, "the backoff starts over");
}

#[test]
fn a_resize_revokes_the_holds_of_items_beyond_the_new_count() {
    let (mut s, _) = holding();
    s.at(100);
    let p = s.paths.clone();
    let mut smaller = config(1, false);
    smaller.cron = None;
    let resized = seen(
        &mut s,
        WatchEvent::DataChanged(p.config()),
        Some(node(&smaller.to_yaml(), 1, 400)),
    );
    assert_eq!(
        revoked(&resized),
        [vec![1]],
        "item 1 is beyond the count; item 0's hold goes on: {:?}",
        kinds(&resized)
    );
}
