//! Table tests of the state's parts one at a time, each given what it needs of the others (as
//! raft-rs tests its `ProgressTracker` apart from `Raft`): the mirror's reading of events and
//! results, the reads [`Io`] owes, an instance's assignments and leases, the job's setup, the
//! answers a run holds, when the leader may write a reshard, and how failover tells a claim
//! refused by ElasticJob's latch from one refused by the items.

use std::collections::BTreeSet;

use super::*;
use crate::coordination::job::instances::Instances;
use crate::coordination::job::io::{Cx, Io, Job, Pending};
use crate::coordination::job::mirror::{Mirror, Watched};
use crate::coordination::job::runs::execution::{HeldAnswers, HeldWrite};
use crate::registry::CreateMode;

fn job() -> Job {
    Job {
        name: "j".into(),
        paths: JobPaths::new("j"),
        settings: Settings {
            ip: IP.into(),
            session_timeout: SESSION,
            lease: LEASE,
        },
    }
}

fn env(t0: Instant, ms: u64) -> Env {
    Env {
        now: t0 + Duration::from_millis(ms),
        wall: wall0() + chrono::Duration::milliseconds(ms as i64),
        session: SessionState::Connected {
            generation: 1,
            session_id: 77,
        },
        proof: Some(t0 + Duration::from_millis(ms)),
        entropy: 1,
        claim_lead: Duration::ZERO,
    }
}

/// A mirror of a job of `total` items owned here, with this instance's node.
fn mirror(total: i32) -> Mirror {
    let s = Script::new("j");
    let owners: Vec<(i32, &str)> = (0..total).map(|i| (i, ME)).collect();
    let mut tree = s.tree(&config(total, false), &owners, ME);
    tree.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    let mut m = Mirror::new(&JobPaths::new("j"));
    m.arrange(tree);
    m
}

#[test]
fn the_mirror_reads_what_an_event_names_and_nothing_it_already_knows() {
    let p = JobPaths::new("j");
    let item = |i: i32| {
        vec![
            p.item(i),
            p.item_running(i),
            p.item_failover(i),
            p.item_failovering(i),
            p.retry(i),
        ]
    };
    let cases: Vec<(&str, WatchEvent, Watched, Vec<String>)> = vec![
        (
            "a resync reads everything",
            WatchEvent::Resync,
            Watched::Reload,
            vec![],
        ),
        (
            "an owner changed: all owners are read at once",
            WatchEvent::DataChanged(p.item_instance(1)),
            Watched::Owners,
            vec![],
        ),
        (
            "the sharding being written: the owners again",
            WatchEvent::Created(p.sharding_processing()),
            Watched::Owners,
            vec![],
        ),
        (
            "a peer's running node: the item's nodes together",
            WatchEvent::Created(p.item_running(2)),
            Watched::Noted,
            item(2),
        ),
        (
            "an epoch moved: the same",
            WatchEvent::DataChanged(p.item(0)),
            Watched::Noted,
            item(0),
        ),
        (
            "a node created that the mirror holds exactly: no read",
            WatchEvent::Created(p.instance(ME)),
            Watched::Noted,
            vec![],
        ),
        (
            "the failover latch's directory",
            WatchEvent::Created(p.failover_latch()),
            Watched::FailoverLatch(true),
            vec![],
        ),
        (
            "and gone again",
            WatchEvent::Deleted(p.failover_latch()),
            Watched::FailoverLatch(false),
            vec![],
        ),
        (
            "an election contender means nothing to the view",
            WatchEvent::Created(format!(
                "{}/_c_1-latch-0000000001",
                p.leader_election_latch()
            )),
            Watched::Noted,
            vec![],
        ),
        (
            "a pending retry: with the item's other nodes",
            WatchEvent::Created(p.retry(3)),
            Watched::Noted,
            item(3),
        ),
        (
            "any other node: that node",
            WatchEvent::DataChanged(p.config()),
            Watched::Noted,
            vec![p.config()],
        ),
    ];
    for (case, ev, watched, reads) in cases {
        let mut m = mirror(4);
        assert_eq!(m.on_watched(ev), watched, "{case}");
        assert_eq!(m.take_event_reads(), reads, "{case}");
    }
}

#[test]
fn the_mirror_takes_the_event_of_its_own_write_once_and_reads_a_later_writers() {
    let p = JobPaths::new("j");
    let mut m = mirror(1);
    let ops = [Op::SetData {
        path: p.item(0),
        data: Vec::new(),
        version: Some(0),
    }];
    let stat = Stat {
        mzxid: 200,
        version: 1,
        ..Stat::default()
    };
    m.apply_commit(&ops, &[OpResult::DataSet { stat }], 77);
    assert_eq!(
        m.view().items[&0].version,
        Some(1),
        "mirrored from the result"
    );
    let ev = || WatchEvent::DataChanged(p.item(0));
    assert_eq!(m.on_watched(ev()), Watched::Noted);
    assert!(
        m.take_event_reads().is_empty(),
        "our own write needs no read"
    );
    m.on_watched(ev());
    assert_eq!(
        m.take_event_reads().len(),
        5,
        "a second event is another writer's"
    );
}

#[test]
fn a_node_created_in_a_multi_is_exact_when_the_multi_set_data_and_not_otherwise() {
    let p = JobPaths::new("j");
    let create = || Op::create(p.item_running(0), ME, CreateMode::Persistent);
    let created = || OpResult::Created {
        path: p.item_running(0),
        stat: None,
    };
    let set = Op::SetData {
        path: p.item(0),
        data: Vec::new(),
        version: Some(0),
    };
    let stat = Stat {
        mzxid: 300,
        mtime: 5,
        version: 1,
        ..Stat::default()
    };
    let mut m = mirror(1);
    m.apply_commit(
        &[set, create()],
        &[OpResult::DataSet { stat }, created()],
        77,
    );
    assert!(
        m.knows(&p.item_running(0)),
        "the multi's zxid makes it exact"
    );
    assert_eq!(m.cache().get(&p.item_running(0)).unwrap().stat.czxid, 300);
    let mut m = mirror(1);
    m.apply_commit(&[create()], &[created()], 77);
    assert!(
        !m.knows(&p.item_running(0)),
        "without a zxid it is read again"
    );
}

#[test]
fn io_owes_each_read_once_and_the_whole_job_not_before_its_retry() {
    let t0 = crate::testing::epoch();
    let p = JobPaths::new("j");
    let m = mirror(2);
    let kinds_of = |io: &mut Io, ms: u64| {
        let mut out = Vec::new();
        io.issue_reads(env(t0, ms).now, None, || m.owner_paths(), &mut out);
        kinds(&out)
    };
    let mut io = Io::default();
    assert!(kinds_of(&mut io, 0).is_empty(), "nothing owed");
    io.want_watch();
    io.want_owners();
    assert_eq!(kinds_of(&mut io, 0), ["Watch", "ReadMany"]);
    assert!(
        kinds_of(&mut io, 0).is_empty(),
        "each once, while in flight"
    );
    let mut io = Io::default();
    io.want_reload();
    io.retry_after(t0, Duration::from_millis(200));
    assert!(kinds_of(&mut io, 100).is_empty(), "not before the retry");
    assert_eq!(kinds_of(&mut io, 200), ["Reload"]);
    assert!(io.reloading(), "decisions wait for it");
    assert_eq!(
        m.owner_paths().last(),
        Some(&p.sharding_processing()),
        "the owners are read with the processing flag"
    );
}

#[test]
fn io_locks_a_commits_items_until_its_result_and_writes_in_its_generation() {
    let t0 = crate::testing::epoch();
    let job = job();
    let m = mirror(2);
    let mut io = Io::default();
    io.set_generation(3);
    let mut out = Vec::new();
    let env = env(t0, 0);
    let op = {
        let mut cx = Cx {
            job: &job,
            env: &env,
            mirror: &m,
            io: &mut io,
            out: &mut out,
        };
        cx.commit(Pending::MisfireFlags, Vec::new(), &[0, 1])
    };
    assert!(matches!(out[..], [Action::Commit { generation: 3, .. }]));
    assert!(io.is_locked(0) && io.is_locked(1));
    assert!(matches!(io.take_pending(op), Some(Pending::MisfireFlags)));
    io.unlock(&[0, 1]);
    assert!(!io.is_locked(0) && io.is_idle());
}

/// Instances set up, with `ME` joined and registered: returns them and what was sent.
fn joined(job: &Job, m: &Mirror, io: &mut Io, env: &Env) -> (Instances, Vec<Action>) {
    let mut instances = Instances::new();
    let mut out = Vec::new();
    io.set_generation(1);
    let mut cx = Cx {
        job,
        env,
        mirror: m,
        io,
        out: &mut out,
    };
    instances.set_up(&mut cx, Ok(()));
    let join = Input::Join {
        reply: 1,
        stream: 1,
        instance_id: ME.into(),
        config: None,
        overwrite: false,
        max_concurrent: 1,
    };
    instances.join(&mut cx, join);
    instances.registered(&mut cx, ME, Ok(()));
    (instances, out)
}

#[test]
fn an_instance_is_told_its_items_once_and_its_epoch_never_goes_back() {
    let t0 = crate::testing::epoch();
    let job = job();
    let mut io = Io::default();
    let env = env(t0, 0);
    let m = mirror(2);
    let (mut instances, out) = joined(&job, &m, &mut io, &env);
    let assignments = |out: &[Action]| -> Vec<(Vec<i32>, i64)> {
        events(out)
            .into_iter()
            .filter_map(|e| match e {
                WorkerEvent::Assignment { items, epoch, .. } => {
                    Some((items.iter().map(|(i, _)| *i).collect(), *epoch))
                }
                _ => None,
            })
            .collect()
    };
    let first = assignments(&out);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].0, [0, 1]);
    let push = |instances: &mut Instances, io: &mut Io, m: &Mirror| {
        let mut out = Vec::new();
        let mut cx = Cx {
            job: &job,
            env: &env,
            mirror: m,
            io,
            out: &mut out,
        };
        instances.push_assignments(&mut cx);
        assignments(&out)
    };
    assert!(
        push(&mut instances, &mut io, &m).is_empty(),
        "unchanged: nothing sent"
    );
    // One item fewer (the job's item count lowered), with no owner node changed: the epoch
    // still grows.
    let mut fewer = mirror(2);
    let s = Script::new("j");
    let mut tree = s.tree(&config(1, false), &[(0, ME), (1, ME)], ME);
    tree.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    fewer.arrange(tree);
    let next = push(&mut instances, &mut io, &fewer);
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].0, [0]);
    assert!(next[0].1 > first[0].1, "{next:?} after {first:?}");
}

#[test]
fn a_lease_is_renewed_at_a_third_and_not_while_withheld() {
    let t0 = crate::testing::epoch();
    let job = job();
    let mut io = Io::default();
    let m = mirror(1);
    let (mut instances, out) = joined(&job, &m, &mut io, &env(t0, 0));
    assert!(
        kinds(&out).contains(&"Lease"),
        "a lease with the registration"
    );
    let renew = |instances: &mut Instances, io: &mut Io, ms: u64, withheld: &[&str]| {
        let env = env(t0, ms);
        let mut out = Vec::new();
        let mut cx = Cx {
            job: &job,
            env: &env,
            mirror: &m,
            io,
            out: &mut out,
        };
        let withheld: BTreeSet<String> = withheld.iter().map(|s| s.to_string()).collect();
        instances.renew(&mut cx, &withheld);
        kinds(&out).iter().filter(|k| **k == "Lease").count()
    };
    let third = LEASE.as_millis() as u64 / 3;
    assert_eq!(renew(&mut instances, &mut io, third - 1, &[]), 0, "not yet");
    assert_eq!(
        renew(&mut instances, &mut io, third + 1, &[ME]),
        0,
        "withheld"
    );
    assert_eq!(renew(&mut instances, &mut io, third + 1, &[]), 1);
}

#[test]
fn a_held_answer_call_settles_when_all_its_items_have_an_outcome() {
    let mut held = HeldAnswers::default();
    held.hold(0, ItemOutcome::Completed);
    held.hold(0, ItemOutcome::Failed("second".into()));
    held.hold(1, ItemOutcome::Completed);
    held.wait(7, [0, 1].into());
    held.wait(8, [1].into());
    assert_eq!(held.at(HeldWrite::Due), [0, 1]);
    held.set(&[0, 1], HeldWrite::InFlight);
    held.set(&[1], HeldWrite::Unknown);
    assert!(held.once_unknown(&[1]) && !held.once_unknown(&[0]));
    let released = held.release(&[0]);
    assert_eq!(
        released,
        [(0, ItemOutcome::Completed)],
        "the first answer stands"
    );
    let mut outcomes = BTreeMap::new();
    outcomes.insert(1, ItemOutcome::Completed);
    assert_eq!(
        held.settled(&outcomes),
        [(8, Ok(()))],
        "7 still waits for item 0"
    );
    outcomes.insert(0, ItemOutcome::Revoked("taken back".into()));
    assert_eq!(
        held.settled(&outcomes),
        [(7, Err((0, "taken back".to_string())))],
        "refused: one of its items was taken back"
    );
    assert!(held.settled(&outcomes).is_empty(), "each call settles once");
}

#[test]
fn the_leader_keeps_a_reshard_that_moves_a_live_owners_item_off_the_fire_instants() {
    use crate::coordination::job::leadership::reshard::quiet_until;
    use crate::coordination::job::leadership::sharding::ShardingPlan;
    use crate::schedule::CronSchedule;
    // Every 5 s: the first fire after wall0 (12:00:02.5) is 2500 ms into the test.
    let cron = CronSchedule::parse("0/5 * * * * ?", "").expect("a cron");
    let s = Script::new("j");
    let gone = "10.0.0.3@-@1";
    let mut tree = s.tree(&config(2, false), &[(0, ME), (1, gone)], ME);
    tree.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    tree.insert(
        s.paths.instance(PEER),
        node(&instance_yaml(PEER, "10.0.0.2"), 0, 12),
    );
    let mut m = Mirror::new(&JobPaths::new("j"));
    m.arrange(with_ancestors(tree));
    let plan = |moves: &[(i32, &str)]| ShardingPlan {
        owners: moves.iter().map(|(i, o)| (*i, o.to_string())).collect(),
        reason: "membership or server status changed",
    };
    let live_moved = plan(&[(0, PEER), (1, PEER)]);
    let gone_moved = plan(&[(0, ME), (1, PEER)]);
    let t0 = crate::testing::epoch();
    // (what, now in ms, claim lead in ms, the plan, the cron, written at: None now, else ms)
    type Case<'a> = (&'a str, u64, u64, &'a ShardingPlan, bool, Option<u64>);
    let cases: Vec<Case> = vec![
        ("far from an instant", 1000, 0, &live_moved, true, None),
        (
            "just before an instant",
            2450,
            0,
            &live_moved,
            true,
            Some(2600),
        ),
        (
            "just after an instant",
            2550,
            0,
            &live_moved,
            true,
            Some(2600),
        ),
        ("past the quiet time", 2650, 0, &live_moved, true, None),
        (
            "within the claim lead's quiet time",
            2350,
            100,
            &live_moved,
            true,
            Some(2600),
        ),
        ("before it without a lead", 2350, 0, &live_moved, true, None),
        (
            "only a gone owner's item moves",
            2450,
            0,
            &gone_moved,
            true,
            None,
        ),
        ("no cron", 2450, 0, &live_moved, false, None),
    ];
    for (what, ms, ahead, plan, with_cron, expected) in cases {
        let job = job();
        let env = Env {
            claim_lead: Duration::from_millis(ahead),
            ..env(t0, ms)
        };
        let (mut io, mut out) = (Io::default(), Vec::new());
        let cx = Cx {
            job: &job,
            env: &env,
            mirror: &m,
            io: &mut io,
            out: &mut out,
        };
        let at = quiet_until(&cx, with_cron.then_some(&cron), plan);
        let expected = expected.map(|ms| t0 + Duration::from_millis(ms));
        assert_eq!(at, expected, "{what}");
    }
}

#[test]
fn a_latch_free_claim_refused_by_the_latch_is_told_from_one_refused_by_the_items() {
    use crate::coordination::job::failover::{Failover, FreeClaims};
    use crate::coordination::job::writes::latch_free_ops;
    let job = job();
    let p = &job.paths;
    let m = mirror(1);
    let t0 = crate::testing::epoch();
    let env = env(t0, 0);
    // The latch-free assertion when its directory is believed gone (create, delete), then an
    // op of the claim itself.
    let mut ops = latch_free_ops(p, false);
    ops.push(Op::Check {
        path: p.item(0),
        version: 3,
    });
    let failed = |index: usize, source: RegError| RegError::MultiFailed {
        index,
        source: Box::new(source),
    };
    let dir = p.failover_latch();
    // (what, the error, refused by the latch, the directory believed there, refusals, free)
    type Case = (&'static str, RegError, bool, bool, u32, bool);
    let cases: Vec<Case> = vec![
        (
            "the directory exists",
            failed(0, RegError::NodeExists(dir.clone())),
            true,
            true,
            1,
            true,
        ),
        (
            "the directory is gone",
            failed(1, RegError::NoNode(dir.clone())),
            true,
            false,
            1,
            true,
        ),
        (
            "a process holds or waits for the latch",
            failed(1, RegError::NotEmpty(dir.clone())),
            true,
            true,
            FreeClaims::LIMIT + 1,
            false,
        ),
        (
            "an item's version moved",
            failed(2, RegError::BadVersion(p.item(0))),
            false,
            false,
            0,
            true,
        ),
        ("no answer", RegError::ConnectionLoss, false, false, 0, true),
    ];
    for (what, error, refused, dir_there, count, free) in cases {
        let mut failover = Failover::default();
        let (mut io, mut out) = (Io::default(), Vec::new());
        let cx = Cx {
            job: &job,
            env: &env,
            mirror: &m,
            io: &mut io,
            out: &mut out,
        };
        assert_eq!(failover.latch_refused(&cx, &error, &ops), refused, "{what}");
        let claims = failover.claims();
        assert_eq!(claims.latch_dir, dir_there, "{what}: the directory");
        assert_eq!(claims.refused, count, "{what}: refusals in a row");
        assert_eq!(
            claims.refused < FreeClaims::LIMIT,
            free,
            "{what}: the next claim goes free"
        );
    }
    // Refused by the latch's state twice in a row: the next claim takes the latch.
    let mut failover = Failover::default();
    let (mut io, mut out) = (Io::default(), Vec::new());
    let cx = Cx {
        job: &job,
        env: &env,
        mirror: &m,
        io: &mut io,
        out: &mut out,
    };
    for _ in 0..FreeClaims::LIMIT {
        assert!(failover.latch_refused(&cx, &failed(0, RegError::NodeExists(dir.clone())), &ops));
    }
    assert_eq!(failover.claims().refused, FreeClaims::LIMIT);
}

#[test]
fn the_first_worker_writes_the_config_only_where_the_job_has_none_or_it_overwrites() {
    use crate::coordination::job::instances::ConfigSetup;
    let enabled = config(2, false).to_yaml();
    let mut off = config(2, false);
    off.disabled = true;
    let disabled = off.to_yaml();
    // (what, the config node, a config brought, overwrite, what the setup does)
    type Case<'a> = (
        &'a str,
        Option<&'a [u8]>,
        bool,
        bool,
        Result<ConfigSetup, &'a str>,
    );
    let cases: Vec<Case> = vec![
        (
            "no job, no config brought",
            None,
            false,
            false,
            Err("does not exist"),
        ),
        (
            "no job: the worker's is written",
            None,
            true,
            false,
            Ok(ConfigSetup::Write),
        ),
        (
            "a job: its own is kept",
            Some(enabled.as_bytes()),
            true,
            false,
            Ok(ConfigSetup::Keep { disabled: false }),
        ),
        (
            "a disabled job is kept disabled",
            Some(disabled.as_bytes()),
            false,
            false,
            Ok(ConfigSetup::Keep { disabled: true }),
        ),
        (
            "overwrite writes the worker's",
            Some(disabled.as_bytes()),
            true,
            true,
            Ok(ConfigSetup::Write),
        ),
        (
            "overwrite without a config keeps the job's",
            Some(disabled.as_bytes()),
            false,
            true,
            Ok(ConfigSetup::Keep { disabled: true }),
        ),
        (
            "an unreadable config is refused",
            Some(b"shardingTotalCount: [".as_slice()),
            false,
            false,
            Err("unreadable"),
        ),
    ];
    for (what, existing, brought, overwrite, expected) in cases {
        let got = ConfigSetup::decide("j", existing, brought, overwrite);
        match (got, expected) {
            (Ok(got), Ok(expected)) => assert_eq!(got, expected, "{what}"),
            (Err(e), Err(text)) => assert!(e.to_string().contains(text), "{what}: {e}"),
            (got, expected) => panic!("{what}: got {got:?}, expected {expected:?}"),
        }
    }
}
