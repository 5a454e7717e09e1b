//! Table tests of the job state machine: sequences of inputs and the actions they must (and
//! must not) produce, with no registry, no tokio time and no sleeps. The registry's part is
//! played by [`Script`]: it answers each commit as ZooKeeper would (one zxid per multi-op,
//! versions counted), so a scenario reads as "this happened, then the sidecar did that".
//!
//! The real-ZooKeeper tests in `tests/` stay the outer ring.

pub(super) use std::collections::BTreeMap;
pub(super) use std::time::{Duration, Instant};

pub(super) use chrono::{DateTime, TimeZone, Utc};

pub(super) use super::state::JobState;
pub(super) use super::*;
pub(super) use crate::coordination::events::ItemOutcome;
pub(super) use crate::coordination::events::{Source, StreamEnd, Trigger, WorkerEvent};
pub(super) use crate::elasticjob::config::JobConfiguration;
pub(super) use crate::elasticjob::instance::instance_yaml;
pub(super) use crate::elasticjob::paths::JobPaths;
pub(super) use crate::registry::{Error as RegError, Node, Op, OpResult, SessionState, Stat};

pub(super) const IP: &str = "10.0.0.1";
pub(super) const ME: &str = "10.0.0.1@-@7";
pub(super) const PEER: &str = "10.0.0.2@-@9";
pub(super) const SESSION: Duration = Duration::from_secs(10);
pub(super) const LEASE: Duration = Duration::from_secs(3);

/// The state machine, its clock and session, and a registry that answers like ZooKeeper.
pub(super) struct Script {
    pub(super) state: JobState,
    pub(super) env: Env,
    pub(super) t0: Instant,
    pub(super) paths: JobPaths,
    zxid: i64,
    /// Versions of nodes written through the script.
    versions: BTreeMap<String, i32>,
    next_reply: ReplyId,
    next_stream: StreamKey,
    /// The `max_concurrent_executions` the next joining worker asks for.
    pub(super) max_concurrent: u32,
}

/// The scripts' start: midway between two instants of the jobs' cron (`config`: every 5 s),
/// so that no reshard is held back for a fire instant (`RESHARD_QUIET`) unless a test moves
/// the clock to one.
pub(super) fn wall0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 2).unwrap() + chrono::Duration::milliseconds(500)
}

pub(super) fn node(data: &str, version: i32, zxid: i64) -> Node {
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
    pub(super) fn new(job: &str) -> Script {
        let t0 = crate::testing::epoch();
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
                entropy: 0x5eed,
                claim_lead: Duration::ZERO,
            },
            t0,
            paths: JobPaths::new(job),
            zxid: 100,
            versions: BTreeMap::new(),
            next_reply: 0,
            next_stream: 0,
            max_concurrent: 1,
        }
    }

    /// Moves both clocks to `ms` after the start; the session is proven alive now unless
    /// `unhealthy` was called.
    pub(super) fn at(&mut self, ms: u64) {
        self.env.now = self.t0 + Duration::from_millis(ms);
        self.env.wall = wall0() + chrono::Duration::milliseconds(ms as i64);
        if self.env.proof.is_some_and(|p| p >= self.t0)
            && !matches!(self.env.session, SessionState::Disconnected { .. })
        {
            self.env.proof = Some(self.env.now);
        }
    }

    /// The session stops answering: no proof after now.
    pub(super) fn unhealthy(&mut self) {
        self.env.proof = Some(self.env.now);
        self.env.session = SessionState::Disconnected {
            generation: self.generation(),
            since: self.env.now,
        };
    }

    pub(super) fn healthy(&mut self) {
        self.env.session = SessionState::Connected {
            generation: self.generation(),
            session_id: 77,
        };
        self.env.proof = Some(self.env.now);
    }

    pub(super) fn generation(&self) -> u64 {
        self.env.session.generation()
    }

    pub(super) fn step(&mut self, input: Input) -> Vec<Action> {
        self.env.entropy = self.env.entropy.wrapping_add(1 << 64);
        let env = self.env.clone();
        self.state.step(input, &env)
    }

    /// The job's subtree as ElasticJob leaves it: config, an enabled server, `sharding/{i}`
    /// nodes owned as given (the leader elected).
    pub(super) fn tree(
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
    pub(super) fn ok(&mut self, ops: &[Op]) -> Vec<OpResult> {
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
    pub(super) fn commit_all(&mut self, actions: Vec<Action>) -> Vec<Action> {
        let mut out = Vec::new();
        let mut queue: std::collections::VecDeque<Action> = actions.into();
        while let Some(action) = queue.pop_front() {
            let next = match &action {
                Action::Commit { op, ops, .. } => {
                    let results = self.ok(ops);
                    self.step(Input::Done {
                        op: *op,
                        result: IoResult::Committed(Ok(results)),
                    })
                }
                // The read-back of an instance node just registered: created by the latest
                // commit.
                Action::Read { op, path }
                    if path
                        .strip_prefix(&self.paths.instances())
                        .is_some_and(|rest| rest.starts_with('/')) =>
                {
                    let node = self.state.mirror.cache().get(path).map(|node| Node {
                        data: node.data.to_vec(),
                        stat: Stat {
                            czxid: self.zxid,
                            mzxid: self.zxid,
                            mtime: node.stat.mtime,
                            ephemeral_owner: node.stat.ephemeral_owner,
                            version: node.stat.version,
                            ..Stat::default()
                        },
                    });
                    self.step(Input::Done {
                        op: *op,
                        result: IoResult::Read {
                            path: path.clone(),
                            node: Ok(node),
                        },
                    })
                }
                _ => continue,
            };
            queue.extend(next.iter().cloned());
            out.extend(next);
        }
        out
    }

    /// Joins a worker (setting the job up on the first) and answers the writes (and the
    /// instance node's read-back): returns the
    /// stream and what was sent.
    pub(super) fn join(
        &mut self,
        tree: Option<BTreeMap<String, Node>>,
    ) -> (StreamKey, Vec<Action>) {
        self.next_reply += 1;
        self.next_stream += 1;
        let stream = self.next_stream;
        let mut actions = self.step(Input::Join {
            reply: self.next_reply,
            stream,
            instance_id: ME.into(),
            config: None,
            overwrite: false,
            max_concurrent: self.max_concurrent,
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
    pub(super) fn tick(&mut self, ms: u64) -> Vec<Action> {
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

    pub(super) fn fire(&mut self, ms: u64) -> Vec<Action> {
        self.at(ms);
        let fire_time = self.env.wall;
        self.fire_of(fire_time)
    }

    /// The fire of the instant `fire_time`, now, as the driver steps it: what the instant
    /// needs first ([`JobState::step_fire`]), then the rest of the reconcile, which the driver
    /// owes until the instant's fires are all taken up (at once here: one job).
    pub(super) fn fire_of(&mut self, fire_time: DateTime<Utc>) -> Vec<Action> {
        let mut out = self.fire_step_only(fire_time);
        if self.state.reconcile_owed() {
            out.extend(self.step(Input::Tick));
        }
        out
    }

    /// The fire of the instant `fire_time`, now: its own step only, the rest left owed.
    pub(super) fn fire_step_only(&mut self, fire_time: DateTime<Utc>) -> Vec<Action> {
        self.step(Input::Fire { fire_time })
    }

    /// The timer's notice at `ms`, `claim_ahead` before the cron instant at `fire_ms`.
    pub(super) fn fire_ahead(&mut self, ms: u64, fire_ms: u64) -> Vec<Action> {
        self.at(ms);
        let fire_time = wall0() + chrono::Duration::milliseconds(fire_ms as i64);
        self.step(Input::FireAhead { fire_time })
    }

    pub(super) fn answer(&mut self, execution_id: &str, items: &[i32]) -> Vec<Action> {
        self.next_reply += 1;
        self.step(Input::Answer {
            reply: self.next_reply,
            instance_id: ME.into(),
            execution_id: execution_id.into(),
            outcomes: items.iter().map(|i| (*i, ItemOutcome::Completed)).collect(),
        })
    }

    pub(super) fn fail(&mut self, execution_id: &str, items: &[i32]) -> Vec<Action> {
        self.next_reply += 1;
        self.step(Input::Answer {
            reply: self.next_reply,
            instance_id: ME.into(),
            execution_id: execution_id.into(),
            outcomes: items
                .iter()
                .map(|i| (*i, ItemOutcome::Failed("boom".into())))
                .collect(),
        })
    }

    pub(super) fn decline(&mut self, execution_id: &str) -> Vec<Action> {
        self.decline_items(execution_id, &[])
    }

    /// A `Decline` of `items` of an execution (empty: all of them).
    pub(super) fn decline_items(&mut self, execution_id: &str, items: &[i32]) -> Vec<Action> {
        self.next_reply += 1;
        self.step(Input::Decline {
            reply: self.next_reply,
            instance_id: ME.into(),
            execution_id: execution_id.into(),
            items: items.to_vec(),
            reason: "stopped".into(),
        })
    }
}

/// `tree` with every missing ancestor (within the job) as an empty node, as ZooKeeper has them.
pub(super) fn with_ancestors(mut tree: BTreeMap<String, Node>) -> BTreeMap<String, Node> {
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

pub(super) fn config(total: i32, failover: bool) -> JobConfiguration {
    let mut c = JobConfiguration::new("j", total);
    c.cron = Some("0/5 * * * * ?".into());
    c.failover = failover;
    c
}

pub(super) fn setup_op(actions: &[Action]) -> Option<OpId> {
    actions.iter().find_map(|a| match a {
        Action::SetUp { op, .. } => Some(*op),
        _ => None,
    })
}

pub(super) fn events(actions: &[Action]) -> Vec<&WorkerEvent> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send { event, .. } => Some(event),
            _ => None,
        })
        .collect()
}

pub(super) fn triggers(actions: &[Action]) -> Vec<Trigger> {
    events(actions)
        .into_iter()
        .filter_map(|e| match e {
            WorkerEvent::Trigger(t) => Some(t.as_ref().clone()),
            _ => None,
        })
        .collect()
}

pub(super) fn kinds(actions: &[Action]) -> Vec<&'static str> {
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
            Action::Remembered { .. } => "Remembered",
            Action::SetUp { .. } => "SetUp",
            Action::Commit { .. } => "Commit",
            Action::Persist { .. } => "Persist",
            Action::Read { .. } => "Read",
            Action::ReadMany { .. } => "ReadMany",
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
pub(super) fn writes(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Commit { ops, .. } => Some(ops.iter()),
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

pub(super) fn answered(actions: &[Action]) -> Vec<Result<(), String>> {
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

/// The multi-read among `actions`, if any: its op and paths.
pub(super) fn read_many(actions: &[Action]) -> Option<(OpId, Vec<String>)> {
    actions.iter().find_map(|a| match a {
        Action::ReadMany { op, paths } => Some((*op, paths.clone())),
        _ => None,
    })
}

/// The tree of a job of 4 items (`failover` as given) led by `leader`: the local instance
/// (its node there) owns items 0 and 1, the peer 2 and 3.
pub(super) fn shared_with_peer(s: &Script, failover: bool, leader: &str) -> BTreeMap<String, Node> {
    let mut tree = s.tree(
        &config(4, failover),
        &[(0, ME), (1, ME), (2, PEER), (3, PEER)],
        leader,
    );
    tree.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    tree
}

/// `tree` with the node of the peer's sidecar (`shardcar/sidecars/10.0.0.2`): the peer is a
/// shardcar instance, whose items a reshard moves at once (not an ElasticJob member, whose
/// items wait for the resharding flag first, `leadership::ELASTICJOB_HOLD`).
pub(super) fn with_peer_sidecar_node(
    s: &Script,
    mut tree: BTreeMap<String, Node>,
) -> BTreeMap<String, Node> {
    let mut sidecar = node("", 0, 13);
    sidecar.stat.ephemeral_owner = PEER_SESSION;
    tree.insert(s.paths.sidecar("10.0.0.2"), sidecar);
    // The peer's instance node is on the same session as its sidecar's node.
    if let Some(peer) = tree.get_mut(&s.paths.instance(PEER)) {
        peer.stat.ephemeral_owner = PEER_SESSION;
    }
    with_ancestors(tree)
}

/// The session of the peer sidecar (`10.0.0.2`) and of the instance nodes it registered.
pub(super) const PEER_SESSION: i64 = 55;

/// A job of `total` items all owned by the local instance (leader), joined, with its lease.
pub(super) fn ready(total: i32, failover: bool) -> (Script, StreamKey) {
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
pub(super) fn run(s: &mut Script, ms: u64) -> Trigger {
    let fired = s.fire(ms);
    let started = s.commit_all(fired);
    triggers(&started).pop().expect("a trigger")
}

mod ahead;
mod answers;
mod drain;
mod leases;
mod membership;
mod parts;
mod plan;
mod release;
mod resident;
mod retries;
mod sessions;
mod work;
mod writes;
