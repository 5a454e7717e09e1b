//! A step's way out: what the job asked of the registry and has not heard back ([`Io`]: the
//! actions in flight, the items they touch, the session generation its writes go to, and the
//! reads it owes itself), and the context every part of the state decides in ([`Cx`]).
//!
//! Rules every write keeps (`docs/architecture.md`):
//! - nothing decided in one session is written in another ([`Action::Commit`] carries the
//!   generation the job's instances are registered in);
//! - at most one action touches an item at a time (`locked`): nothing else is decided about
//!   an item while a write of it is in flight;
//! - a write refused, or whose outcome is unknown, makes the job be read again before
//!   anything else is decided ([`Cx::write_failed`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::mirror::{JobView, Mirror};
use super::{Action, Env, LatchKey, Observation, OpId, Reply, ReplyId, Settings, StreamKey};
use crate::coordination::events::WorkerEvent;
use crate::coordination::CoordError;
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::elasticjob::paths::JobPaths;
use crate::registry::{Error as RegError, Op};

/// How long to wait before re-reading the job after a failed or refused write.
pub(super) const RETRY: Duration = Duration::from_millis(200);

/// The job a state is for: its name, its paths and this sidecar's settings.
#[derive(Debug)]
pub(super) struct Job {
    pub name: String,
    pub paths: JobPaths,
    pub settings: Settings,
}

/// Who takes over, in the very write that releases them, items whose runner is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Taker {
    /// A local instance with room.
    Here(String),
    /// An idle worker of a peer sidecar, whose sidecar runs them when it reads the write.
    Peer(String),
}

impl Taker {
    /// The taker's instance id.
    pub(super) fn id(&self) -> &str {
        match self {
            Taker::Here(id) | Taker::Peer(id) => id,
        }
    }
}

/// What a write in flight handed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Handed {
    /// To a local instance: its FAILOVER execution, sent once the write is answered.
    Here(String),
    /// To a peer's worker: nothing to start here.
    Peer,
}

impl Handed {
    /// The local execution that takes the items, if it is local.
    pub(super) fn execution(self) -> Option<String> {
        match self {
            Handed::Here(execution_id) => Some(execution_id),
            Handed::Peer => None,
        }
    }
}

/// An action in flight and what to do with its result.
#[derive(Debug)]
pub(super) enum Pending {
    SetUp,
    /// The instance node of a joining worker.
    Register {
        instance_id: String,
    },
    /// Re-creating instance nodes in a new session.
    Reregister {
        instance_id: String,
    },
    /// The `running` nodes of a new execution.
    Start {
        execution_id: String,
    },
    /// Held answers being written (their outcomes are in the execution's `held`).
    Finish {
        execution_id: String,
        items: Vec<i32>,
    },
    /// Releasing the unanswered items of a void execution.
    Release {
        execution_id: String,
        items: Vec<i32>,
    },
    /// Removing a local instance (and releasing what it ran, or handing it in the same write
    /// to another instance: `handed`).
    Leave {
        instance_id: String,
        handed: Option<Handed>,
    },
    MisfireFlags,
    /// The `necessary` flag, set by the leader ahead of a reshard that takes items from a live
    /// ElasticJob member, or by a member to ask an ElasticJob leader for a reshard.
    ReshardFlag,
    Reshard,
    /// The leader's clean-up of items whose runner is gone (and those it hands over in the
    /// same write: `handed`).
    Cleanup {
        items: Vec<i32>,
        handed: Option<Handed>,
    },
    ReleaseStale {
        items: Vec<i32>,
    },
    /// Waiting for the election latch, then creating the leader node.
    ElectLatch {
        instance_id: String,
    },
    Elect {
        latch: LatchKey,
    },
    Abdicate,
    /// Deleting instance nodes of this host that no local instance stands for.
    Orphans,
    /// Waiting for the failover latch, then claiming flagged items.
    ClaimLatch,
    /// Claiming flagged items: under the latch (`latch` held), or without it, in a multi-op
    /// that also asserts the latch is free (`docs/elasticjob-compat.md` §7).
    Claim {
        latch: Option<LatchKey>,
        executions: Vec<String>,
    },
    /// Taking a trigger-once request (with the job parameter its node names, if any).
    TakeTrigger {
        instance_id: String,
        parameter: Option<String>,
    },
    /// This sidecar's liveness node (`shardcar/sidecars/{ip}`).
    SidecarNode,
    /// Nodes that registry events named: one [`Action::Read`], or one [`Action::ReadMany`]
    /// for the events of one step.
    Read,
    /// The owners of every item and the sharding's `processing` flag, read at once.
    ReadOwners,
    Reload,
    Watch,
    Persist,
    /// maxTimeDiffSeconds: the fire waits for the registry's clock.
    Clock {
        fire_time: chrono::DateTime<chrono::Utc>,
    },
}

/// The actions in flight and the reads owed.
#[derive(Debug, Default)]
pub(crate) struct Io {
    next_op: OpId,
    /// Actions in flight, oldest first (ids only grow). A job has a few at most: a vector
    /// holds them in a fraction of a B-tree node's room.
    pending: Vec<(OpId, Pending)>,
    /// The operations of each commit in flight, mirrored into the cache when it succeeds.
    commit_ops: BTreeMap<OpId, Arc<[Op]>>,
    /// Items an action in flight touches: nothing else is decided about them meanwhile.
    locked: BTreeSet<i32>,
    /// The session generation the local instances are registered in (0 before setup): every
    /// commit is for this generation only.
    generation: u64,
    /// Re-read the job at this instant (after a refused write or a failed read).
    retry_at: Option<Instant>,
    /// A fresh read of the whole subtree is wanted (after a reconnect, a refused write).
    reload_wanted: bool,
    /// An owner node (or the sharding's `processing` flag) changed: the owners are to be read
    /// again at one point in the registry's history, so that another writer's sharding, one
    /// transaction, is never seen half applied. Assignments wait for that read.
    owners_reread: bool,
    /// The watch is gone: ask the driver for another.
    watch_wanted: bool,
    /// When the whole job was last read (ElasticJob's reconcile interval counts from it).
    last_reload: Option<Instant>,
}

impl Io {
    /// Registers `pending` and returns its id.
    pub(super) fn start_op(&mut self, pending: Pending) -> OpId {
        self.next_op += 1;
        self.pending.push((self.next_op, pending));
        self.next_op
    }

    /// Removes and returns what `op` was for, if it is in flight.
    pub(super) fn take_pending(&mut self, op: OpId) -> Option<Pending> {
        let at = self.pending.iter().position(|(o, _)| *o == op)?;
        Some(self.pending.remove(at).1)
    }

    /// The operations of commit `op`, once its result is in.
    pub(super) fn take_commit_ops(&mut self, op: OpId) -> Arc<[Op]> {
        self.commit_ops.remove(&op).unwrap_or_else(|| Arc::from([]))
    }

    /// Whether an action of this kind is in flight.
    pub(super) fn in_flight(&self, pred: impl Fn(&Pending) -> bool) -> bool {
        self.pending.iter().any(|(_, p)| pred(p))
    }

    /// Whether nothing is in flight.
    pub(super) fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether an action in flight touches item `i`.
    pub(super) fn is_locked(&self, i: i32) -> bool {
        self.locked.contains(&i)
    }

    pub(super) fn unlock(&mut self, items: &[i32]) {
        for i in items {
            self.locked.remove(i);
        }
    }

    /// Commits `ops` (ancestors included, [`Mirror::with_parents`]) in this generation as
    /// `pending`, locking `items` until the result is back.
    fn commit(
        &mut self,
        pending: Pending,
        ops: Vec<Op>,
        items: &[i32],
        out: &mut Vec<Action>,
    ) -> OpId {
        let ops: Arc<[Op]> = ops.into();
        self.locked.extend(items.iter().copied());
        let op = self.start_op(pending);
        self.commit_ops.insert(op, Arc::clone(&ops));
        out.push(Action::Commit {
            op,
            generation: self.generation,
            ops,
        });
        op
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// The local instances are (to be) registered in this session from now on.
    pub(super) fn set_generation(&mut self, generation: u64) {
        self.generation = generation;
    }

    // ----- reads owed -------------------------------------------------------------------------

    /// Asks for a fresh read of the whole job before anything else is decided.
    pub(super) fn want_reload(&mut self) {
        self.reload_wanted = true;
    }

    /// Whether a whole read is wanted or in flight: nothing more is decided until it is in.
    pub(super) fn reloading(&self) -> bool {
        self.reload_wanted || self.in_flight(|p| matches!(p, Pending::Reload))
    }

    /// Asks for the owners to be read again at once.
    pub(super) fn want_owners(&mut self) {
        self.owners_reread = true;
    }

    /// Whether the owners are to be read again, or being read: what the mirror shows of the
    /// sharding may be half of one.
    pub(super) fn owners_unsettled(&self) -> bool {
        self.owners_reread || self.in_flight(|p| matches!(p, Pending::ReadOwners))
    }

    /// Asks the driver for a new watch of the job.
    pub(super) fn want_watch(&mut self) {
        self.watch_wanted = true;
    }

    /// The whole job was read now.
    pub(super) fn reloaded(&mut self, now: Instant) {
        self.last_reload = Some(now);
    }

    /// A retry that has passed with no reload wanted is over.
    pub(super) fn retry_passed(&mut self, now: Instant) {
        if self.retry_at.is_some_and(|r| now >= r) && !self.reload_wanted {
            self.retry_at = None;
        }
    }

    /// Asks for a step at `now + delay`, keeping an earlier one.
    pub(super) fn retry_after(&mut self, now: Instant, delay: Duration) {
        let at = now + delay;
        self.retry_at = Some(self.retry_at.map_or(at, |r| r.min(at)));
    }

    /// The reads owed now: a new watch, the whole job (not before `retry_at`), the owners, and
    /// ElasticJob's periodic reconcile (every `every`, counted from the last whole read).
    pub(super) fn issue_reads(
        &mut self,
        now: Instant,
        every: Option<Duration>,
        owner_paths: impl FnOnce() -> Vec<String>,
        out: &mut Vec<Action>,
    ) {
        if self.watch_wanted && !self.in_flight(|p| matches!(p, Pending::Watch)) {
            self.watch_wanted = false;
            let op = self.start_op(Pending::Watch);
            out.push(Action::Watch { op });
        }
        if self.reload_wanted
            && self.retry_at.is_none_or(|r| now >= r)
            && !self.in_flight(|p| matches!(p, Pending::Reload))
        {
            self.reload_wanted = false;
            let op = self.start_op(Pending::Reload);
            out.push(Action::Reload { op });
        }
        if self.retry_at.is_some_and(|r| now >= r) {
            self.retry_at = None;
        }
        if self.owners_reread && !self.in_flight(|p| matches!(p, Pending::ReadOwners)) {
            self.owners_reread = false;
            let op = self.start_op(Pending::ReadOwners);
            out.push(Action::ReadMany {
                op,
                paths: owner_paths(),
            });
        }
        if self
            .last_reload
            .zip(every)
            .is_some_and(|(last, every)| now >= last + every)
            && !self.in_flight(|p| matches!(p, Pending::Reload))
        {
            // ElasticJob's reconcile, as a safety net: read everything again.
            self.last_reload = Some(now);
            let op = self.start_op(Pending::Reload);
            out.push(Action::Reload { op });
        }
    }

    /// The instants the reads owed are due (a retry, the periodic reconcile), and whether one
    /// waits for the session to be healthy.
    pub(super) fn due(&self, every: Option<Duration>) -> (Vec<Instant>, bool) {
        let mut due: Vec<Instant> = self.retry_at.into_iter().collect();
        if let (Some(last), Some(every)) = (self.last_reload, every) {
            due.push(last + every);
        }
        (due, self.reload_wanted || self.watch_wanted)
    }

    /// Frees the collections emptied: a thousand idle jobs would otherwise each keep the room
    /// its last run needed.
    pub(super) fn give_back_emptied(&mut self) {
        if self.pending.is_empty() {
            self.pending = Vec::new();
        }
        if self.commit_ops.is_empty() {
            self.commit_ops = BTreeMap::new();
        }
        if self.locked.is_empty() {
            self.locked = BTreeSet::new();
        }
    }

    #[cfg(test)]
    pub(super) fn locked(&self) -> &BTreeSet<i32> {
        &self.locked
    }

    #[cfg(test)]
    pub(super) fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }

    #[cfg(test)]
    pub(super) fn reload_is_wanted(&self) -> bool {
        self.reload_wanted
    }

    #[cfg(test)]
    pub(super) fn pending_count(&self) -> usize {
        self.pending.len()
    }

    #[cfg(test)]
    pub(super) fn commits_in_flight(&self) -> usize {
        self.commit_ops.len()
    }
}

/// What every part of the state decides in, for one step: the job, the world as the driver
/// saw it, the mirror (read only: it changes only by what the registry answered), and where
/// actions go.
pub(super) struct Cx<'a> {
    pub job: &'a Job,
    pub env: &'a Env,
    pub mirror: &'a Mirror,
    pub io: &'a mut Io,
    pub out: &'a mut Vec<Action>,
}

impl Cx<'_> {
    /// The job's name, for logs.
    pub fn name(&self) -> &str {
        &self.job.name
    }

    pub fn paths(&self) -> &JobPaths {
        &self.job.paths
    }

    pub fn settings(&self) -> &Settings {
        &self.job.settings
    }

    /// The job's view, as last mirrored.
    pub fn view(&self) -> &JobView {
        self.mirror.view()
    }

    /// Whether the session is connected in the generation the locals are registered in.
    pub fn connected(&self) -> bool {
        connected(self.env, self.io.generation())
    }

    /// Whether a lease may be granted now: connected, and the session proven alive recently
    /// enough that it cannot expire before the lease ends.
    pub fn may_grant(&self) -> bool {
        self.connected()
            && self.env.proof.is_some_and(|p| {
                self.env.now.saturating_duration_since(p) < self.job.settings.session_timeout / 4
            })
    }

    /// Whether a resharding is pending or not yet seen whole: the `necessary` flag (set by
    /// ElasticJob members; its leader reshards at its next fire), a sharding being written under
    /// `processing`, or changed owners not read back yet.
    pub fn resharding_pending(&self) -> bool {
        let view = self.view();
        view.necessary || view.processing || self.io.owners_unsettled()
    }

    /// Commits `ops` as `pending` (see [`Io`]), creating first the missing ancestors of the
    /// nodes they create, as ElasticJob creates missing parents.
    pub fn commit(&mut self, pending: Pending, ops: Vec<Op>, items: &[i32]) -> OpId {
        let ops = self.mirror.with_parents(ops);
        self.io.commit(pending, ops, items, self.out)
    }

    /// A write was refused or its outcome is unknown: the view was stale, or the session is in
    /// trouble. The job is read again before anything else is decided.
    pub fn write_failed(&mut self, what: &str, error: &RegError) {
        if error.is_connection_problem() {
            warn!(job = %self.job.name, error = %error, "{what}: no answer from the registry; will re-read");
        } else {
            debug!(job = %self.job.name, error = %error, "{what}: refused (the state changed); re-reading");
        }
        self.io.want_reload();
        self.io.retry_after(self.env.now, RETRY);
    }

    pub fn send(&mut self, stream: StreamKey, event: WorkerEvent) {
        self.out.push(Action::Send { stream, event });
    }

    pub fn reply(&mut self, reply: ReplyId, result: Reply) {
        self.out.push(Action::Reply { reply, result });
    }

    pub fn observe(&mut self, observation: Observation) {
        self.out.push(Action::Observe(observation));
    }

    /// The effective config, or the error a joining worker gets when there is none.
    pub fn effective_config(&self) -> Result<(JobConfiguration, JobExtras), CoordError> {
        let view = self.view();
        match &view.config {
            Some(c) => Ok((JobConfiguration::clone(c), view.extras)),
            None => Err(CoordError::FailedPrecondition(format!(
                "the config of job {} in the registry is unusable: {}",
                self.job.name,
                view.config_error.clone().unwrap_or_default()
            ))),
        }
    }
}

/// Whether `env`'s session is connected in `generation` (0: not set up).
pub(super) fn connected(env: &Env, generation: u64) -> bool {
    env.connected_generation() == Some(generation) && generation > 0
}
