//! Joining and leaving.

use super::*;
use crate::coordination::job::leadership::RESHARD_QUIET;

#[test]
fn a_join_sets_the_job_up_registers_then_answers_with_registered_assignment_and_lease() {
    let mut s = Script::new("j");
    let actions = s.step(Input::Join {
        reply: 1,
        stream: 1,
        instance_id: ME.into(),
        config: None,
        overwrite: false,
        max_concurrent: 1,
    });
    assert_eq!(kinds(&actions), ["SetUp"], "nothing else before the setup");
    let tree = s.tree(&config(2, false), &[], "");
    let actions = s.step(Input::Done {
        op: setup_op(&actions).unwrap(),
        result: IoResult::SetUp(Ok(tree)),
    });
    assert_eq!(writes(&actions), ["+/j/instances/10.0.0.1@-@7"]);
    assert!(
        !kinds(&actions).contains(&"Reply"),
        "no reply before the node exists"
    );
    let registered = s.commit_all(actions);
    let k = kinds(&registered);
    let order: Vec<_> = k
        .iter()
        .filter(|k| ["Registered", "Assignment", "Lease", "Reply"].contains(k))
        .collect();
    assert_eq!(order, [&"Registered", &"Assignment", &"Lease", &"Reply"]);
}

#[test]
fn a_subscribe_cancelled_before_its_instance_exists_leaves_no_ghost() {
    // #9 defect 1: the stream ends while the instance node is being created.
    let mut s = Script::new("j");
    let actions = s.step(Input::Join {
        reply: 1,
        stream: 1,
        instance_id: ME.into(),
        config: None,
        overwrite: false,
        max_concurrent: 1,
    });
    let tree = s.tree(&config(2, false), &[], "");
    let actions = s.step(Input::Done {
        op: setup_op(&actions).unwrap(),
        result: IoResult::SetUp(Ok(tree)),
    });
    let ended = s.step(Input::StreamEnded {
        stream: 1,
        end: StreamEnd::ByWorker,
    });
    assert!(
        writes(&ended).is_empty(),
        "its create is still in flight: {:?}",
        writes(&ended)
    );
    let after = s.commit_all(actions);
    assert!(
        writes(&after).contains(&"-/j/instances/10.0.0.1@-@7".to_string()),
        "the instance created for a stream that already ended is removed at once: {:?}",
        kinds(&after)
    );
    assert!(!kinds(&after).contains(&"Registered"));
    assert!(kinds(&after).contains(&"EndStream"));
    assert!(
        s.state.idle(),
        "nothing is left of the cancelled subscription"
    );
}

#[test]
fn a_subscribe_cancelled_while_the_job_is_set_up_leaves_no_ghost() {
    // Found by the nemesis (seed 1123): a Subscribe cancelled 11 ms after it was sent, while a
    // new job driver was still setting the job up. The end of the stream came before the join
    // had a local instance, was dropped, and the instance then lived on without a stream,
    // owning items and leading the job.
    let mut s = Script::new("j");
    let actions = s.step(Input::Join {
        reply: 1,
        stream: 1,
        instance_id: ME.into(),
        config: None,
        overwrite: false,
        max_concurrent: 1,
    });
    assert_eq!(kinds(&actions), ["SetUp"]);
    let ended = s.step(Input::StreamEnded {
        stream: 1,
        end: StreamEnd::ByWorker,
    });
    assert!(writes(&ended).is_empty(), "{:?}", kinds(&ended));
    let tree = s.tree(&config(2, false), &[], "");
    let after = s.step(Input::Done {
        op: setup_op(&actions).unwrap(),
        result: IoResult::SetUp(Ok(tree)),
    });
    let after = s.commit_all(after);
    assert!(
        !writes(&after).contains(&"+/j/instances/10.0.0.1@-@7".to_string()),
        "no instance is created for a stream that already ended: {:?}",
        writes(&after)
    );
    assert!(!kinds(&after).contains(&"Registered"));
    assert!(
        s.state.idle(),
        "nothing is left of the cancelled subscription"
    );
}

#[test]
fn a_worker_that_closes_its_stream_leaves_at_once_and_its_running_items_fail_over() {
    let (mut s, stream) = ready(2, true);
    let t = run(&mut s, 1000);
    let left = s.step(Input::StreamEnded {
        stream,
        end: StreamEnd::ByWorker,
    });
    assert_eq!(
        writes(&left),
        [
            "-/j/instances/10.0.0.1@-@7",
            "=/j/sharding/0",
            "-/j/sharding/0/running",
            "+/j/leader/failover",
            "+/j/leader/failover/items",
            "+/j/leader/failover/items/0",
            "=/j/sharding/1",
            "-/j/sharding/1/running",
            "+/j/leader/failover/items/1",
            "-/j/leader/election/instance"
        ],
        "instance, fenced release with failover flags (and missing parents), leadership: one multi-op"
    );
    let late = s.answer(&t.execution_id, &[0]);
    assert!(
        answered(&late)[0].is_err(),
        "an answer after the stream ended is refused"
    );
}

#[test]
fn a_stream_the_sidecar_closed_keeps_its_items_until_the_workers_lease_has_run_out() {
    let (mut s, stream) = ready(1, true);
    run(&mut s, 1000); // the trigger came with a fresh lease, sent at 1.0 s
    let ended = s.step(Input::StreamEnded {
        stream,
        end: StreamEnd::BySidecar,
    });
    assert!(
        writes(&ended).is_empty(),
        "keepalive closed it: the worker may still run"
    );
    let waiting = s.tick(3900);
    assert!(
        writes(&waiting).is_empty(),
        "its lease (sent at 1 s, 3 s long) still runs: {:?}",
        kinds(&waiting)
    );
    let released = s.tick(4000);
    eprintln!("{:?}", kinds(&released));
    assert!(
        writes(&released).contains(&"+/j/leader/failover/items/0".to_string()),
        "{:?}",
        writes(&released)
    );
}

#[test]
fn the_job_retires_once_its_last_instance_has_left_and_its_node_is_gone() {
    let (mut s, stream) = ready(1, false);
    assert!(!s.state.idle());
    let left = s.step(Input::StreamEnded {
        stream,
        end: StreamEnd::ByWorker,
    });
    let after = s.commit_all(left.clone());
    let all: Vec<String> = writes(&left).into_iter().chain(writes(&after)).collect();
    assert!(
        all.contains(&"-/j/instances/10.0.0.1@-@7".to_string()),
        "{all:?}"
    );
    assert!(
        all.contains(&"-/j/shardcar/sidecars/10.0.0.1".to_string()),
        "the sidecar stops looking after the job: {all:?}"
    );
    assert!(s.state.idle(), "nothing left: the driver retires the job");
}

/// The assignments sent among `actions`: items and epoch.
fn assignments(actions: &[Action]) -> Vec<(Vec<i32>, i64)> {
    events(actions)
        .into_iter()
        .filter_map(|e| match e {
            WorkerEvent::Assignment { items, epoch, .. } => {
                Some((items.iter().map(|(i, _)| *i).collect(), *epoch))
            }
            _ => None,
        })
        .collect()
}

/// Answers a multi-read with the nodes of `state` (absent when not there).
pub(super) fn answer_reads(
    s: &mut Script,
    (op, paths): (OpId, Vec<String>),
    state: &BTreeMap<String, Node>,
) -> Vec<Action> {
    let nodes = paths.iter().map(|p| state.get(p).cloned()).collect();
    s.step(Input::Done {
        op,
        result: IoResult::ReadMany {
            paths,
            nodes: Ok(nodes),
        },
    })
}

/// A watch event on a node, then the read it makes answered with `node` (`None`: the node is
/// gone): everything both steps produced.
pub(super) fn seen(s: &mut Script, event: WatchEvent, node: Option<Node>) -> Vec<Action> {
    let path = match &event {
        WatchEvent::Created(p) | WatchEvent::Deleted(p) | WatchEvent::DataChanged(p) => p.clone(),
        WatchEvent::Resync => panic!("a resync reads no one node"),
    };
    let mut all = s.step(Input::Watched(event));
    let op = all
        .iter()
        .find_map(|a| match a {
            Action::Read { op, path: read } if *read == path => Some(*op),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{path} is read: {:?}", kinds(&all)));
    all.extend(s.step(Input::Done {
        op,
        result: IoResult::Read {
            path,
            node: Ok(node),
        },
    }));
    all
}

/// A job of 4 items led by the peer: the local instance owns 0 and 1, the peer 2 and 3.
fn led_by_peer() -> (Script, Vec<Action>) {
    let mut s = Script::new("j");
    let tree = shared_with_peer(&s, false, PEER);
    let (_, actions) = s.join(Some(tree));
    (s, actions)
}

#[test]
fn another_writers_sharding_is_read_whole_and_sent_once() {
    // Another sidecar's leader moves item 1 to the peer and item 2 here in one multi-op: its
    // events arrive one by one, but the worker must never see half of it (#12 interop).
    let (mut s, joined) = led_by_peer();
    assert_eq!(assignments(&joined), [(vec![0, 1], 8)]);
    s.at(100);
    let p = s.paths.clone();
    let first = s.step(Input::Watched(WatchEvent::DataChanged(p.item_instance(1))));
    assert!(assignments(&first).is_empty());
    let read = read_many(&first).expect("the owners are read again, all at once");
    assert!(read.1.contains(&p.item_instance(3)) && read.1.contains(&p.sharding_processing()));
    let second = s.step(Input::Watched(WatchEvent::DataChanged(p.item_instance(2))));
    assert!(assignments(&second).is_empty());
    assert!(read_many(&second).is_none(), "one multi-read at a time");
    let after: BTreeMap<String, Node> = [
        (p.item_instance(0), node(ME, 0, 8)),
        (p.item_instance(1), node(PEER, 1, 200)),
        (p.item_instance(2), node(ME, 1, 200)),
        (p.item_instance(3), node(PEER, 0, 8)),
    ]
    .into();
    let answered = answer_reads(&mut s, read, &after);
    // The second event came while the first read was out: it may be newer, so it is read too
    // before anything is sent.
    assert!(assignments(&answered).is_empty());
    let again = read_many(&answered).expect("read again for the event that came meanwhile");
    let answered = answer_reads(&mut s, again, &after);
    assert_eq!(assignments(&answered), [(vec![0, 2], 200)]);
    assert!(read_many(&answered).is_none());
}

#[test]
fn an_elasticjob_resharding_under_processing_is_held_until_it_is_committed() {
    // ElasticJob's leader creates `processing`, deletes every owner node, then writes the new
    // owners and deletes `processing` in one transaction. No empty assignment, no epoch 0.
    let (mut s, _) = led_by_peer();
    s.at(100);
    let p = s.paths.clone();
    let created = s.step(Input::Watched(WatchEvent::Created(p.sharding_processing())));
    let read = read_many(&created).expect("processing makes the owners be read");
    let resetting: BTreeMap<String, Node> = [(p.sharding_processing(), node("", 0, 150))].into();
    let held = answer_reads(&mut s, read, &resetting);
    assert!(assignments(&held).is_empty(), "{:?}", kinds(&held));
    let mut all = Vec::new();
    for i in 0..4 {
        all.extend(s.step(Input::Watched(WatchEvent::Deleted(p.item_instance(i)))));
    }
    let committed: BTreeMap<String, Node> = [
        (p.item_instance(0), node(PEER, 0, 160)),
        (p.item_instance(1), node(ME, 0, 160)),
        (p.item_instance(2), node(ME, 0, 160)),
        (p.item_instance(3), node(PEER, 0, 160)),
    ]
    .into();
    for i in 0..4 {
        all.extend(s.step(Input::Watched(WatchEvent::Created(p.item_instance(i)))));
    }
    all.extend(s.step(Input::Watched(WatchEvent::Deleted(p.sharding_processing()))));
    assert!(assignments(&all).is_empty());
    // Reads answered in turn with what ZooKeeper has by then (the commit is in).
    let mut next = read_many(&all);
    let mut sent = Vec::new();
    while let Some(read) = next {
        let answered = answer_reads(&mut s, read, &committed);
        sent.extend(assignments(&answered));
        next = read_many(&answered);
    }
    assert_eq!(sent, [(vec![1, 2], 160)]);
}

#[test]
fn the_epoch_grows_when_items_are_only_taken_away() {
    // A disabled server keeps every owner node as it is: the owners' zxids do not move, yet
    // the worker's items change, so the epoch must.
    let (mut s, joined) = led_by_peer();
    assert_eq!(assignments(&joined), [(vec![0, 1], 8)]);
    s.at(100);
    let server = s.paths.server(IP);
    let seen = s.step(Input::Watched(WatchEvent::DataChanged(server.clone())));
    let op = seen
        .iter()
        .find_map(|a| match a {
            Action::Read { op, .. } => Some(*op),
            _ => None,
        })
        .expect("the server node is read");
    let disabled = s.step(Input::Done {
        op,
        result: IoResult::Read {
            path: server,
            node: Ok(Some(node("DISABLED", 1, 90))),
        },
    });
    assert_eq!(assignments(&disabled), [(vec![], 9)]);
}

/// A job of 2 items led by an ElasticJob peer that owns both; the local instance has just
/// joined, so the peer's `necessary` flag is set and the reshard waits for the leader's fire.
fn joined_before_the_leaders_reshard() -> Script {
    let mut s = Script::new("j");
    let mut tree = s.tree(&config(2, false), &[(0, PEER), (1, PEER)], PEER);
    tree.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    tree.insert(s.paths.sharding_necessary(), node("", 0, 12));
    let (_, joined) = s.join(Some(tree));
    assert_eq!(assignments(&joined), [(vec![], 8)]);
    s
}

/// The ElasticJob leader's reshard lands: item 1 is the local instance's now, and the
/// `necessary` flag is gone (one transaction, its events one by one).
fn the_leader_reshards(s: &mut Script, ms: u64) -> Vec<Action> {
    s.at(ms);
    let p = s.paths.clone();
    let mut all = s.step(Input::Watched(WatchEvent::DataChanged(p.item_instance(1))));
    all.extend(seen(s, WatchEvent::Deleted(p.sharding_necessary()), None));
    let after: BTreeMap<String, Node> = [
        (p.item_instance(0), node(PEER, 0, 8)),
        (p.item_instance(1), node(ME, 1, 300)),
    ]
    .into();
    let mut next = read_many(&all);
    while let Some(read) = next {
        let answered = answer_reads(s, read, &after);
        next = read_many(&answered);
        all.extend(answered.iter().cloned());
        all.extend(s.commit_all(answered));
    }
    all
}

#[test]
fn a_fire_during_an_elasticjob_leaders_pending_reshard_runs_the_new_items() {
    // ElasticJob's non-leaders block at a fire until the leader's reshard is written, then run
    // what it gives them. Running the old items instead would skip item 1 at this fire: its
    // old owner no longer has it after the reshard, its new one ran nothing.
    let mut s = joined_before_the_leaders_reshard();
    let fired = s.fire(1000);
    let fire_time = s.env.wall;
    assert!(
        triggers(&fired).is_empty() && writes(&fired).is_empty(),
        "{:?}",
        kinds(&fired)
    );
    let again = s.fire(1500);
    assert!(
        triggers(&again).is_empty() && writes(&again).is_empty(),
        "{:?}",
        kinds(&again)
    );
    let resharded = the_leader_reshards(&mut s, 1600);
    assert_eq!(assignments(&resharded), [(vec![1], 300)]);
    let sent = triggers(&resharded);
    assert_eq!(
        sent.len(),
        1,
        "the fires held are one run: {:?}",
        kinds(&resharded)
    );
    assert_eq!(
        sent[0].items.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [1]
    );
    assert_eq!(sent[0].source, Source::Cron);
    assert_eq!(
        sent[0].fire_time, fire_time,
        "the first fire held is the one run"
    );
    let written = writes(&resharded);
    assert!(
        written.contains(&"+/j/sharding/1/running".to_string())
            && !written.contains(&"+/j/sharding/0/running".to_string()),
        "{written:?}"
    );
}

#[test]
fn a_trigger_once_during_a_pending_reshard_runs_the_new_items() {
    let mut s = joined_before_the_leaders_reshard();
    s.at(1000);
    let p = s.paths.clone();
    let cache_event = seen(
        &mut s,
        WatchEvent::Created(p.trigger(ME)),
        Some(node("", 0, 200)),
    );
    let taken = s.commit_all(cache_event.clone());
    assert_eq!(writes(&cache_event), [format!("-{}", p.trigger(ME))]);
    assert!(triggers(&taken).is_empty(), "held: {:?}", kinds(&taken));
    let resharded = the_leader_reshards(&mut s, 1200);
    let sent = triggers(&resharded);
    assert_eq!(sent.len(), 1, "{:?}", kinds(&resharded));
    assert_eq!(
        sent[0].items.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [1]
    );
    assert_eq!(sent[0].source, Source::Manual);
}

/// The server node changes to `status`, and is read back.
fn server_becomes(s: &mut Script, status: &str, version: i32) -> Vec<Action> {
    let server = s.paths.server(IP);
    let status = node(status, version, 250 + i64::from(version));
    seen(s, WatchEvent::DataChanged(server), Some(status))
}

#[test]
fn a_fire_held_for_a_reshard_is_dropped_when_the_server_is_disabled_meanwhile() {
    // A disabled server runs nothing; its held fire must not run later, when it is enabled
    // again long after the fire.
    let mut s = joined_before_the_leaders_reshard();
    let fired = s.fire(1000);
    assert!(triggers(&fired).is_empty());
    s.at(1100);
    let disabled = server_becomes(&mut s, "DISABLED", 1);
    assert!(triggers(&disabled).is_empty());
    let resharded = the_leader_reshards(&mut s, 1200);
    assert!(triggers(&resharded).is_empty(), "{:?}", kinds(&resharded));
    s.at(5000);
    let enabled = server_becomes(&mut s, "ENABLED", 2);
    let after = s.commit_all(enabled.clone());
    assert!(
        triggers(&enabled).is_empty() && triggers(&after).is_empty(),
        "the held fire was dropped: {:?}",
        kinds(&after)
    );
}

/// The writes of the reshards among `actions` (the item owner nodes they set).
pub(super) fn reshard_writes(actions: &[Action]) -> Vec<String> {
    writes(actions)
        .into_iter()
        .filter(|w| w.starts_with("=/j/sharding/") && w.ends_with("/instance"))
        .collect()
}

pub(super) fn peer_instance(s: &mut Script, ms: u64, zxid: i64) -> Vec<Action> {
    s.at(ms);
    let path = s.paths.instance(PEER);
    seen(
        s,
        WatchEvent::Created(path),
        Some(node(&instance_yaml(PEER, "10.0.0.2"), 0, zxid)),
    )
}

#[test]
fn a_reshard_moving_a_live_owners_items_waits_until_just_after_the_fire_instant() {
    // Seed 6161 of the nemesis: a reshard decided 15 ms before a fire instant was written 0.08
    // ms after it. The old owner had held its fire for it, and ran its new items; the new
    // owner had fired before it read the sharding, on its old ones: two items ran at neither.
    let (mut s, _) = ready(4, false);
    // The scripts start at 12:00:02.5; the cron fires every 5 s. 20 ms before 12:00:05:
    let joined = peer_instance(&mut s, 2480, 50);
    assert_eq!(reshard_writes(&joined), Vec::<String>::new());
    let wake = s.state.next_wakeup(&s.env.clone()).expect("a wakeup");
    assert_eq!(wake, s.t0 + Duration::from_millis(2500) + RESHARD_QUIET);
    // The fire runs on the owners everyone has: nothing is held for the reshard.
    let fired = s.fire(2500);
    let started = s.commit_all(fired);
    assert_eq!(triggers(&started)[0].items.len(), 4);
    s.at(2590);
    assert_eq!(reshard_writes(&s.step(Input::Tick)), Vec::<String>::new());
    // Once every member has fired, the reshard goes out.
    s.at(2600);
    let after = s.step(Input::Tick);
    assert_eq!(
        reshard_writes(&after),
        ["=/j/sharding/0/instance", "=/j/sharding/1/instance"],
        "{:?}",
        writes(&after)
    );
}

#[test]
fn a_reshard_of_a_gone_owners_items_is_not_held_for_a_fire_instant() {
    // No one else would run those items at the fire.
    let (mut s, _) = ready(4, false);
    let joined = peer_instance(&mut s, 1000, 50);
    assert_eq!(
        reshard_writes(&joined),
        ["=/j/sharding/0/instance", "=/j/sharding/1/instance"],
        "far from a fire instant, at once"
    );
    s.commit_all(joined);
    s.at(2480);
    let path = s.paths.instance(PEER);
    let left = seen(&mut s, WatchEvent::Deleted(path), None);
    assert_eq!(
        reshard_writes(&left),
        ["=/j/sharding/0/instance", "=/j/sharding/1/instance"],
        "{:?}",
        writes(&left)
    );
}

#[test]
fn a_reshard_that_takes_items_from_a_live_elasticjob_member_sets_the_flag_and_waits_first() {
    // LifecycleApiTest, one run in twelve: this leader moved item 2 from the ElasticJob member
    // 12 ms after giving it to it. The member, triggered, had read the item as its own, checked
    // that it was not running and went on to write its `running` node, replacing the one a
    // worker here had written when it started the item: both ran it.
    use crate::coordination::job::leadership::ELASTICJOB_HOLD;
    let mut s = Script::new("j");
    // The peer has no sidecar (`shardcar/sidecars/10.0.0.2`): an ElasticJob member. Joining,
    // this instance is given items 2 and 3, the peer's, and the peer 0 and 1.
    let tree = shared_with_peer(&s, false, ME);
    let (_, joined) = s.join(Some(tree));
    assert_eq!(
        reshard_writes(&joined),
        Vec::<String>::new(),
        "{:?}",
        writes(&joined)
    );
    assert!(
        writes(&joined).contains(&"+/j/leader/sharding/necessary".to_string()),
        "the flag is set first: {:?}",
        writes(&joined)
    );
    assert!(s.state.mirror.view().necessary, "the flag is read back");
    let wake = s.state.next_wakeup(&s.env.clone()).expect("a wakeup");
    assert_eq!(wake, s.env.now + ELASTICJOB_HOLD);
    let held_ms = wake.duration_since(s.t0).as_millis() as u64;
    assert_eq!(reshard_writes(&s.tick(held_ms - 1)), Vec::<String>::new());
    let after = s.tick(held_ms);
    assert_eq!(
        reshard_writes(&after),
        [
            "=/j/sharding/0/instance",
            "=/j/sharding/1/instance",
            "=/j/sharding/2/instance",
            "=/j/sharding/3/instance"
        ],
        "{:?}",
        writes(&after)
    );
    assert!(
        writes(&after).contains(&"-/j/leader/sharding/necessary".to_string()),
        "the reshard removes the flag: {:?}",
        writes(&after)
    );
}

#[test]
fn a_reshard_that_takes_items_from_a_peer_sidecars_instance_goes_at_once() {
    // A sidecar's items are fenced on their owner nodes: nothing to wait for.
    let mut s = Script::new("j");
    let tree = with_peer_sidecar_node(&s, shared_with_peer(&s, false, ME));
    let (_, joined) = s.join(Some(tree));
    assert_eq!(reshard_writes(&joined).len(), 4, "{:?}", writes(&joined));
    assert!(!writes(&joined).iter().any(|w| w.contains("necessary")));
}

/// A job of 4 items all owned by the peer, which leads, and this sidecar's instance (its node
/// there, joined), with the peer's sidecar node when `peer_sidecar`.
fn all_to_the_leading_peer(s: &mut Script, peer_sidecar: bool) -> Vec<Action> {
    let owners: Vec<(i32, &str)> = (0..4).map(|i| (i, PEER)).collect();
    let mut tree = s.tree(&config(4, false), &owners, PEER);
    tree.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    if peer_sidecar {
        tree = with_peer_sidecar_node(s, tree);
    }
    s.join(Some(tree)).1
}

#[test]
fn a_member_left_without_items_by_an_elasticjob_leaders_sharding_sets_the_flag_once() {
    // LifecycleApiTest under load: the ElasticJob leader's fire just after the console enabled
    // the job sharded every item to itself (its cache still had the sidecars' servers
    // disabled), and nothing set the flag again: the sidecars' workers stayed without items.
    let mut s = Script::new("j");
    let joined = all_to_the_leading_peer(&mut s, false);
    let flag = "+/j/leader/sharding/necessary".to_string();
    assert_eq!(
        writes(&joined).iter().filter(|w| **w == flag).count(),
        1,
        "the flag is set once: {:?}",
        writes(&joined)
    );
    assert_eq!(
        reshard_writes(&joined),
        Vec::<String>::new(),
        "the peer reshards, not us"
    );
    // The leader reshards the same way again (the flag gone, the owners as they were): it is
    // not asked again for that sharding.
    let path = s.paths.sharding_necessary();
    let removed = seen(&mut s, WatchEvent::Deleted(path), None);
    let later = s.tick(3000);
    assert!(
        !writes(&removed).contains(&flag) && !writes(&later).contains(&flag),
        "{:?} {:?}",
        writes(&removed),
        writes(&later)
    );
}

#[test]
fn a_member_under_a_leading_peer_sidecar_leaves_the_resharding_to_it() {
    // A sidecar leader reshards on what it sees, with no flag to ask for.
    let mut s = Script::new("j");
    let joined = all_to_the_leading_peer(&mut s, true);
    assert!(
        !writes(&joined).iter().any(|w| w.contains("necessary")),
        "{:?}",
        writes(&joined)
    );
}

#[test]
fn a_remote_shutdown_keeps_the_stream_open_until_what_it_revoked_is_declined() {
    // The nemesis, seed 1: the stream was ended in the step that revoked the run, so the
    // worker's Decline came on a closed stream and the items waited out the worker's lease.
    let (mut s, _) = ready(1, false);
    let t = run(&mut s, 1000);
    s.at(1500);
    let path = s.paths.instance(ME);
    let removed = seen(&mut s, WatchEvent::Deleted(path), None);
    let told: Vec<&str> = events(&removed)
        .iter()
        .map(|e| match e {
            WorkerEvent::Revoke { .. } => "Revoke",
            WorkerEvent::Shutdown { .. } => "Shutdown",
            _ => "other",
        })
        .filter(|k| *k != "other")
        .collect();
    assert_eq!(told, ["Shutdown", "Revoke"], "{:?}", kinds(&removed));
    assert!(
        !kinds(&removed).contains(&"EndStream"),
        "the stream stays open for the Decline: {:?}",
        kinds(&removed)
    );
    s.at(1600);
    let declined = s.decline(&t.execution_id);
    assert_eq!(answered(&declined), [Ok(())]);
    let mut all = declined.clone();
    all.extend(s.commit_all(declined));
    assert!(
        writes(&all).contains(&"-/j/sharding/0/running".to_string()),
        "released on the Decline, not at the end of the lease: {:?}",
        writes(&all)
    );
    assert!(
        kinds(&all).contains(&"EndStream"),
        "and then the stream ends: {:?}",
        kinds(&all)
    );
}

#[test]
fn a_remote_shutdown_that_is_never_declined_ends_the_stream_at_the_end_of_the_lease() {
    let (mut s, _) = ready(1, false);
    let t = run(&mut s, 1000);
    s.at(1500);
    let path = s.paths.instance(ME);
    let removed = seen(&mut s, WatchEvent::Deleted(path), None);
    assert!(!kinds(&removed).contains(&"EndStream"));
    // No Decline: no lease is renewed after the Revoke, and the last ran out by 1000 + LEASE.
    let late = 1000 + LEASE.as_millis() as u64 + 100;
    let lapsed = s.tick(late);
    let mut all = lapsed.clone();
    all.extend(s.commit_all(lapsed));
    assert!(
        writes(&all).contains(&"-/j/sharding/0/running".to_string()),
        "released once the lease ran out: {:?}",
        writes(&all)
    );
    assert!(kinds(&all).contains(&"EndStream"), "{:?}", kinds(&all));
    let _ = t;
}
