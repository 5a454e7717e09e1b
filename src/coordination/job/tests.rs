//! Table tests of the job state machine: sequences of inputs and the actions they must (and
//! must not) produce, with no registry, no tokio time and no sleeps. The registry's part is
//! played by [`Script`]: it answers each commit as ZooKeeper would (one zxid per multi-op,
//! versions counted), so a scenario reads as "this happened, then the sidecar did that".
//!
//! The real-ZooKeeper tests in `tests/` stay the outer ring.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};

use super::state::JobState;
use super::*;
use crate::coordination::events::{Source, StreamEnd, Trigger, WorkerEvent};
use crate::coordination::execution::ItemOutcome;
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::instance::instance_yaml;
use crate::elasticjob::paths::JobPaths;
use crate::registry::{Error as RegError, Node, Op, OpResult, SessionState, Stat};

const IP: &str = "10.0.0.1";
const ME: &str = "10.0.0.1@-@7";
const PEER: &str = "10.0.0.2@-@9";
const SESSION: Duration = Duration::from_secs(10);
const LEASE: Duration = Duration::from_secs(3);

/// The state machine, its clock and session, and a registry that answers like ZooKeeper.
struct Script {
    state: JobState,
    env: Env,
    t0: Instant,
    paths: JobPaths,
    zxid: i64,
    /// Versions of nodes written through the script.
    versions: BTreeMap<String, i32>,
    next_reply: ReplyId,
    next_stream: StreamKey,
}

fn wall0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap()
}

fn node(data: &str, version: i32, zxid: i64) -> Node {
    Node {
        data: data.as_bytes().to_vec(),
        stat: Stat {
            czxid: zxid,
            mzxid: zxid,
            version,
            ..Stat::default()
        },
    }
}

impl Script {
    fn new(job: &str) -> Script {
        let t0 = Instant::now();
        Script {
            state: JobState::new(
                job,
                Settings {
                    ip: IP.into(),
                    session_timeout: SESSION,
                    lease: LEASE,
                },
            ),
            env: Env {
                now: t0,
                wall: wall0(),
                session: SessionState::Connected {
                    generation: 1,
                    session_id: 77,
                },
                proof: Some(t0),
            },
            t0,
            paths: JobPaths::new(job),
            zxid: 100,
            versions: BTreeMap::new(),
            next_reply: 0,
            next_stream: 0,
        }
    }

    /// Moves both clocks to `ms` after the start; the session is proven alive now unless
    /// `unhealthy` was called.
    fn at(&mut self, ms: u64) {
        self.env.now = self.t0 + Duration::from_millis(ms);
        self.env.wall = wall0() + chrono::Duration::milliseconds(ms as i64);
        if self.env.proof.is_some_and(|p| p >= self.t0)
            && !matches!(self.env.session, SessionState::Disconnected { .. })
        {
            self.env.proof = Some(self.env.now);
        }
    }

    /// The session stops answering: no proof after now.
    fn unhealthy(&mut self) {
        self.env.proof = Some(self.env.now);
        self.env.session = SessionState::Disconnected {
            generation: self.generation(),
            since: self.env.now,
        };
    }

    fn healthy(&mut self) {
        self.env.session = SessionState::Connected {
            generation: self.generation(),
            session_id: 77,
        };
        self.env.proof = Some(self.env.now);
    }

    fn generation(&self) -> u64 {
        self.env.session.generation()
    }

    fn step(&mut self, input: Input) -> Vec<Action> {
        let env = self.env.clone();
        self.state.step(input, &env)
    }

    /// The job's subtree as ElasticJob leaves it: config, an enabled server, `sharding/{i}`
    /// nodes owned as given (the leader elected).
    fn tree(
        &self,
        config: &JobConfiguration,
        owners: &[(i32, &str)],
        leader: &str,
    ) -> BTreeMap<String, Node> {
        let p = &self.paths;
        let mut t = BTreeMap::new();
        t.insert(p.root(), node("", 0, 1));
        t.insert(p.config(), node(&config.to_yaml(), 0, 2));
        t.insert(p.servers(), node("", 0, 3));
        t.insert(p.server(IP), node("ENABLED", 0, 4));
        t.insert(p.instances(), node("", 0, 5));
        t.insert(p.sharding(), node("", 0, 6));
        for (i, owner) in owners {
            t.insert(p.item(*i), node("", 0, 7));
            t.insert(p.item_instance(*i), node(owner, 0, 8));
        }
        if !leader.is_empty() {
            t.insert(p.leader_election_instance(), node(leader, 0, 9));
        }
        if owners.iter().any(|(_, o)| *o == PEER) {
            t.insert(
                p.instance(PEER),
                node(&instance_yaml(PEER, "10.0.0.2"), 0, 10),
            );
        }
        with_ancestors(t)
    }

    /// ZooKeeper's answer to a successful multi-op: one zxid for all, versions counted.
    fn ok(&mut self, ops: &[Op]) -> Vec<OpResult> {
        self.zxid += 1;
        let zxid = self.zxid;
        ops.iter()
            .map(|op| match op {
                Op::Create { path, .. } => {
                    self.versions.insert(path.clone(), 0);
                    OpResult::Created {
                        path: path.clone(),
                        stat: None, // as ZooKeeper 3.8 answers inside a multi
                    }
                }
                Op::SetData { path, version, .. } => {
                    let v = version.unwrap_or_else(|| *self.versions.get(path).unwrap_or(&0)) + 1;
                    self.versions.insert(path.clone(), v);
                    OpResult::DataSet {
                        stat: Stat {
                            czxid: if path.ends_with("/running") { zxid } else { 7 },
                            mzxid: zxid,
                            version: v,
                            ..Stat::default()
                        },
                    }
                }
                Op::Delete { .. } => OpResult::Deleted,
                Op::Check { .. } => OpResult::Checked,
            })
            .collect()
    }

    /// Answers every commit among `actions` successfully (in order), and the commits that
    /// leads to, as an instant registry would; returns everything that followed.
    fn commit_all(&mut self, actions: Vec<Action>) -> Vec<Action> {
        let mut out = Vec::new();
        let mut queue: std::collections::VecDeque<Action> = actions.into();
        while let Some(action) = queue.pop_front() {
            if let Action::Commit { op, ops, .. } = &action {
                let results = self.ok(ops);
                let next = self.step(Input::Done {
                    op: *op,
                    result: IoResult::Committed(Ok(results)),
                });
                queue.extend(next.iter().cloned());
                out.extend(next);
            }
        }
        out
    }

    /// Joins a worker (setting the job up on the first) and answers the writes: returns the
    /// stream and what was sent.
    fn join(&mut self, tree: Option<BTreeMap<String, Node>>) -> (StreamKey, Vec<Action>) {
        self.next_reply += 1;
        self.next_stream += 1;
        let stream = self.next_stream;
        let mut actions = self.step(Input::Join {
            reply: self.next_reply,
            stream,
            instance_id: ME.into(),
            config: None,
            overwrite: false,
        });
        if let Some(tree) = tree {
            let op = setup_op(&actions).expect("a setup");
            actions = self.step(Input::Done {
                op,
                result: IoResult::SetUp(Ok(tree)),
            });
        }
        let mut all = actions.clone();
        all.extend(self.commit_all(actions));
        (stream, all)
    }

    /// Lets time pass to `ms` as the driver does: a tick at every instant the state asked to
    /// be woken, commits answered at once. Returns everything that happened.
    fn tick(&mut self, ms: u64) -> Vec<Action> {
        let target = self.t0 + Duration::from_millis(ms);
        let mut out = Vec::new();
        loop {
            let env = self.env.clone();
            match self.state.next_wakeup(&env) {
                Some(at) if at < target && at > self.env.now => {
                    let at_ms = at.duration_since(self.t0).as_millis() as u64;
                    self.at(at_ms.max(1));
                    let actions = self.step(Input::Tick);
                    out.extend(actions.iter().cloned());
                    out.extend(self.commit_all(actions));
                }
                _ => break,
            }
        }
        self.at(ms);
        let actions = self.step(Input::Tick);
        out.extend(actions.iter().cloned());
        out.extend(self.commit_all(actions));
        out
    }

    fn fire(&mut self, ms: u64) -> Vec<Action> {
        self.at(ms);
        let fire_time = self.env.wall;
        self.step(Input::Fire { fire_time })
    }

    fn answer(&mut self, execution_id: &str, items: &[i32]) -> Vec<Action> {
        self.next_reply += 1;
        self.step(Input::Answer {
            reply: self.next_reply,
            instance_id: ME.into(),
            execution_id: execution_id.into(),
            outcomes: items.iter().map(|i| (*i, ItemOutcome::Completed)).collect(),
        })
    }

    fn decline(&mut self, execution_id: &str) -> Vec<Action> {
        self.next_reply += 1;
        self.step(Input::Decline {
            reply: self.next_reply,
            instance_id: ME.into(),
            execution_id: execution_id.into(),
            items: Vec::new(),
            reason: "stopped".into(),
        })
    }
}

/// `tree` with every missing ancestor (within the job) as an empty node, as ZooKeeper has them.
fn with_ancestors(mut tree: BTreeMap<String, Node>) -> BTreeMap<String, Node> {
    let paths: Vec<String> = tree.keys().cloned().collect();
    for path in paths {
        let mut at = path.as_str();
        while let Some((parent, _)) = at.rsplit_once('/') {
            if parent.is_empty() {
                break;
            }
            tree.entry(parent.to_string())
                .or_insert_with(|| node("", 0, 1));
            at = parent;
        }
    }
    tree
}

fn config(total: i32, failover: bool) -> JobConfiguration {
    let mut c = JobConfiguration::new("j", total);
    c.cron = Some("0/5 * * * * ?".into());
    c.failover = failover;
    c
}

fn setup_op(actions: &[Action]) -> Option<OpId> {
    actions.iter().find_map(|a| match a {
        Action::SetUp { op, .. } => Some(*op),
        _ => None,
    })
}

fn events(actions: &[Action]) -> Vec<&WorkerEvent> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send { event, .. } => Some(event),
            _ => None,
        })
        .collect()
}

fn triggers(actions: &[Action]) -> Vec<Trigger> {
    events(actions)
        .into_iter()
        .filter_map(|e| match e {
            WorkerEvent::Trigger(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

fn kinds(actions: &[Action]) -> Vec<&'static str> {
    actions
        .iter()
        .map(|a| match a {
            Action::Send { event, .. } => match event {
                WorkerEvent::Registered { .. } => "Registered",
                WorkerEvent::Assignment { .. } => "Assignment",
                WorkerEvent::Lease { .. } => "Lease",
                WorkerEvent::Trigger(_) => "Trigger",
                WorkerEvent::Revoke { .. } => "Revoke",
                WorkerEvent::Shutdown { .. } => "Shutdown",
            },
            Action::EndStream { .. } => "EndStream",
            Action::Reply { .. } => "Reply",
            Action::SetUp { .. } => "SetUp",
            Action::Commit { .. } => "Commit",
            Action::Persist { .. } => "Persist",
            Action::Read { .. } => "Read",
            Action::Reload { .. } => "Reload",
            Action::Watch { .. } => "Watch",
            Action::AcquireLatch { .. } => "AcquireLatch",
            Action::ReleaseLatch { .. } => "ReleaseLatch",
            Action::TouchClock { .. } => "TouchClock",
            Action::Schedule(_) => "Schedule",
            Action::Observe(_) => "Observe",
            Action::TrackExecution { .. } => "Track",
            Action::ForgetExecution { .. } => "Forget",
        })
        .collect()
}

/// The writes of every commit among `actions`, as `+path`, `-path`, `=path` and `?path`.
fn writes(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Commit { ops, .. } => Some(ops),
            _ => None,
        })
        .flatten()
        .map(|op| match op {
            Op::Create { path, .. } => format!("+{path}"),
            Op::Delete { path, .. } => format!("-{path}"),
            Op::SetData { path, .. } => format!("={path}"),
            Op::Check { path, .. } => format!("?{path}"),
        })
        .collect()
}

fn answered(actions: &[Action]) -> Vec<Result<(), String>> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Reply {
                result: Reply::Answered(r),
                ..
            } => Some(r.clone().map_err(|e| e.to_string())),
            _ => None,
        })
        .collect()
}

/// A job of `total` items all owned by the local instance (leader), joined, with its lease.
fn ready(total: i32, failover: bool) -> (Script, StreamKey) {
    let mut s = Script::new("j");
    let owners: Vec<(i32, &str)> = (0..total).map(|i| (i, ME)).collect();
    let mut tree = s.tree(&config(total, failover), &owners, ME);
    tree.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    let (stream, actions) = s.join(Some(tree));
    assert_eq!(
        kinds(&actions)
            .into_iter()
            .filter(|k| ["Registered", "Lease", "Reply"].contains(k))
            .collect::<Vec<_>>(),
        ["Registered", "Lease", "Reply"],
        "a worker is told who it is and gets a lease before its call returns"
    );
    (s, stream)
}

/// Fires and answers the start: returns the trigger sent.
fn run(s: &mut Script, ms: u64) -> Trigger {
    let fired = s.fire(ms);
    let started = s.commit_all(fired);
    triggers(&started).pop().expect("a trigger")
}

// ----- joining and leaving ---------------------------------------------------------------------

#[test]
fn a_join_sets_the_job_up_registers_then_answers_with_registered_assignment_and_lease() {
    let mut s = Script::new("j");
    let actions = s.step(Input::Join {
        reply: 1,
        stream: 1,
        instance_id: ME.into(),
        config: None,
        overwrite: false,
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

// ----- leases and triggers ---------------------------------------------------------------------

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

// ----- revoke and timeout ------------------------------------------------------------------------

#[test]
fn a_revoked_item_is_released_only_once_the_worker_declines_it() {
    let (mut s, _) = ready(1, false);
    s.state.view.extras.execution_timeout_seconds = 1;
    let mut tree = s.tree(&config(1, false), &[(0, ME)], ME);
    tree.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    tree.insert(
        s.paths.shardcar(),
        node("executionTimeoutSeconds: 1\n", 0, 12),
    );
    s.state.cache.replace_all(tree);
    s.state.view_stale = true;
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

// ----- misfire and failover ----------------------------------------------------------------------

#[test]
fn a_catch_up_runs_once_per_missed_fire_and_clears_every_flag_it_runs() {
    // #9 defect 2: a run during which no fire instant passed is not followed by a catch-up.
    let (mut s, _) = ready(2, false);
    let first = run(&mut s, 1000);
    let busy = s.fire(2000);
    assert_eq!(
        writes(&busy),
        ["+/j/sharding/0/misfire", "+/j/sharding/1/misfire"]
    );
    s.commit_all(busy);
    let done = s.answer(&first.execution_id, &[0, 1]);
    let finished = s.commit_all(done);
    let catch_up = triggers(&finished);
    assert_eq!(catch_up.len(), 1);
    assert_eq!(catch_up[0].source, Source::Misfire);
    assert!(
        writes(&finished).contains(&"-/j/sharding/0/misfire".to_string())
            && writes(&finished).contains(&"-/j/sharding/1/misfire".to_string()),
        "the catch-up clears the flags of every item it runs: {:?}",
        writes(&finished)
    );
    let done = s.answer(&catch_up[0].execution_id, &[0, 1]);
    let after = s.commit_all(done);
    assert!(
        triggers(&after).is_empty(),
        "no fire passed during the catch-up: no second one"
    );
}

#[test]
fn an_idle_member_claims_every_flagged_item_at_once_before_any_catch_up() {
    // #9 defect 2: failover work does not wait behind catch-ups, and is not one item per run.
    let mut s = Script::new("j");
    let mut tree = s.tree(
        &config(4, true),
        &[(0, ME), (1, ME), (2, PEER), (3, PEER)],
        ME,
    );
    tree.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    tree.insert(s.paths.item_misfire(0), node("", 0, 12));
    tree.insert(s.paths.failover_items(), node("", 0, 13));
    tree.insert(s.paths.failover_item(2), node("", 0, 14));
    tree.insert(s.paths.failover_item(3), node("", 0, 15));
    let (_, actions) = s.join(Some(tree));
    let latch = actions.iter().find_map(|a| match a {
        Action::AcquireLatch { op, dir } if dir.ends_with("failover/latch") => Some(*op),
        _ => None,
    });
    let op = latch.expect("the failover latch is taken first");
    assert!(
        triggers(&actions).is_empty(),
        "no catch-up ahead of the failover"
    );
    let claimed = s.step(Input::Done {
        op,
        result: IoResult::Latched(Ok(1)),
    });
    let w = writes(&claimed);
    for item in [2, 3] {
        assert!(
            w.contains(&format!("-/j/leader/failover/items/{item}")),
            "{w:?}"
        );
        assert!(w.contains(&format!("+/j/sharding/{item}/running")), "{w:?}");
    }
    let started = s.commit_all(claimed);
    let t = triggers(&started);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].source, Source::Failover);
    assert_eq!(
        t[0].items.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [2, 3]
    );
    assert!(kinds(&started).contains(&"ReleaseLatch"));
}

#[test]
fn the_leader_leaves_items_of_a_live_sidecar_to_it_and_cleans_up_those_of_a_gone_one() {
    // #19: the clean-up never fails over an item a live instance may be running.
    let mut s = Script::new("j");
    let mut tree = s.tree(&config(2, true), &[(0, ME), (1, ME)], ME);
    tree.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    let gone = "10.0.0.3@-@5";
    tree.insert(s.paths.item_running(0), node(gone, 1, 20));
    let (_, actions) = s.join(Some(tree.clone()));
    assert!(
        writes(&actions).contains(&"-/j/sharding/0/running".to_string()),
        "no sidecar of 10.0.0.3 is alive: the leader releases its item"
    );
    let mut s = Script::new("j");
    tree.insert(s.paths.sidecars(), node("", 0, 21));
    tree.insert(s.paths.sidecar("10.0.0.3"), node("", 0, 22));
    let (_, actions) = s.join(Some(tree));
    assert!(
        !writes(&actions).contains(&"-/j/sharding/0/running".to_string()),
        "10.0.0.3's sidecar lives: it decides when its worker has stopped"
    );
}

// ----- sessions ----------------------------------------------------------------------------------

#[test]
fn after_a_session_expiry_nothing_from_the_old_session_is_accepted_or_written() {
    // #19 case 1.
    let (mut s, _) = ready(1, true);
    let t = run(&mut s, 1000);
    s.at(9000);
    s.env.session = SessionState::Connected {
        generation: 2,
        session_id: 78,
    };
    s.env.proof = None;
    let new = s.step(Input::Session(s.env.session.clone()));
    assert!(
        kinds(&new).contains(&"Revoke"),
        "the worker is told its work is void"
    );
    let late = s.answer(&t.execution_id, &[0]);
    assert!(
        answered(&late)[0].is_err(),
        "an answer from the old session is refused"
    );
    for a in s.step(Input::Tick) {
        if let Action::Commit { generation, .. } = a {
            assert_eq!(generation, 2, "writes are made in the new session only");
        }
    }
}

#[test]
fn a_write_decided_in_a_session_carries_it() {
    let (mut s, _) = ready(1, false);
    let fired = s.fire(1000);
    assert!(fired
        .iter()
        .any(|a| matches!(a, Action::Commit { generation: 1, .. })));
}

#[test]
fn a_refused_write_is_decided_again_only_after_a_fresh_read() {
    let (mut s, _) = ready(1, false);
    let fired = s.fire(1000);
    let op = fired
        .iter()
        .find_map(|a| match a {
            Action::Commit { op, .. } => Some(*op),
            _ => None,
        })
        .unwrap();
    let refused = s.step(Input::Done {
        op,
        result: IoResult::Committed(Err(RegError::BadVersion("/j/sharding/0".into()))),
    });
    assert!(writes(&refused).is_empty(), "no retry on the same view");
    assert!(!kinds(&refused).contains(&"Reload"), "after a short pause");
    let later = s.tick(1300);
    assert!(kinds(&later).contains(&"Reload"));
}

#[test]
fn retries_keep_the_earliest_instant() {
    // #9: `retry_at` was overwritten instead of taking the earlier instant.
    let (mut s, _) = ready(1, false);
    let env = s.env.clone();
    s.state.retry_after(&env, Duration::from_millis(100));
    s.state.retry_after(&env, Duration::from_secs(5));
    assert_eq!(s.state.retry_at, Some(env.now + Duration::from_millis(100)));
}

// ----- drain -------------------------------------------------------------------------------------

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
