//! One job on this sidecar: a state machine that decides ([`JobState`]) and a driver task that
//! performs ([`driver`]).
//!
//! [`JobState::step`] takes an [`Input`] (a worker command, a registry event, the result of an
//! earlier action, a cron fire or the passing of time) together with an [`Env`] snapshot
//! (clocks, session state, random bits) and returns the [`Action`]s to perform: write these
//! nodes, send this event to that worker, take this latch, reply to that call. It never awaits
//! and never reads a clock of its own (clippy's `disallowed-methods` says so), so every decision
//! can be replayed in a test as a table of inputs and expected actions (`tests/`). The driver
//! performs actions with deadlines and feeds their results back as inputs, in the order the
//! registry answered them.
//!
//! The state is made of parts, each owning its fields and its pure helpers:
//! - [`mirror`]: the mirror of the job's subtree and the [`mirror::JobView`] parsed from it;
//! - [`io`]: the actions in flight and the reads owed, and the [`io::Cx`] every part decides in;
//! - [`instances`]: the local instances (joining, leaving, sessions, drain, leases, assignments);
//! - [`runs`]: the executions (plans, fires, starts, answers, releases);
//! - [`leadership`]: election, resharding and the leader's clean-up;
//! - [`failover`]: claims of flagged items and hand-overs;
//!
//! and [`state`] steps them: it dispatches each input to its part ([`results`] for the results
//! of actions, [`membership`] for what takes several parts) and reconciles them in order.
//!
//! The life of a cron fire: the timer's thread (`crate::schedule`) puts it in the job's command
//! queue; the driver steps it; [`runs`] plans the instance's run ([`runs::plan`]) and writes its
//! start ([`writes::start_ops`], through [`io`]); the driver commits it; its result is
//! mirrored ([`mirror`]) and handed back to [`runs`], which sends the `Trigger` under a fresh
//! lease ([`instances`]); the driver queues it on the worker's stream (`crate::api`).

mod driver;
pub(crate) mod failover;
mod instances;
mod io;
mod leadership;
mod membership;
pub(super) mod mirror;
mod results;
pub(super) mod runs;
mod state;
pub(crate) mod writes;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::events::{ItemOutcome, Source, StreamEnd, WorkerEvent};
use super::finished::Finished;
use super::observer::ExecutionRecord;
use super::CoordError;
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::registry::{Error as RegError, Node, Op, OpResult, SessionState, WatchEvent};
use crate::schedule::CronSchedule;

pub(crate) use driver::{spawn, JobCmd, JobSender};

/// Identifies one worker stream of the sidecar.
pub(crate) type StreamKey = u64;
/// Identifies a pending reply to a worker or operator call.
pub(crate) type ReplyId = u64;
/// Identifies an action whose result comes back as [`Input::Done`].
pub(crate) type OpId = u64;
/// Identifies a latch the driver holds for the state.
pub(crate) type LatchKey = u64;

/// What the state machine needs to know about this sidecar.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The advertised IP: `servers/{ip}` and the prefix of local instance ids.
    pub ip: String,
    /// The registry session timeout: self-fencing after 2/3 of it without a proof of life.
    pub session_timeout: Duration,
    /// How long each worker lease is valid (at most half the session timeout).
    pub lease: Duration,
}

/// A snapshot of the world outside the state machine, taken by the driver for each step.
#[derive(Debug, Clone)]
pub(crate) struct Env {
    /// The monotonic clock.
    pub now: Instant,
    /// The wall clock (fire times, lease deadlines sent to workers, history).
    pub wall: DateTime<Utc>,
    /// The registry session as last published.
    pub session: SessionState,
    /// The registry's latest proof that the current session is alive (see
    /// [`crate::registry::Registry::last_proof`]).
    pub proof: Option<Instant>,
    /// Random bits drawn for this step: the state draws none of its own (execution ids are
    /// derived from these, [`execution_id`]).
    pub entropy: u128,
    /// How long before a cron instant the timer's notices come ([`Input::FireAhead`]), as the
    /// timer last sized it ([`crate::schedule::ClaimLead::current`]): a leader keeps its
    /// reshards off that lead too (zero: no notices).
    pub claim_lead: Duration,
}

impl Env {
    /// The session generation if connected.
    pub fn connected_generation(&self) -> Option<u64> {
        match self.session {
            SessionState::Connected { generation, .. } => Some(generation),
            _ => None,
        }
    }
}

/// One input of [`JobState::step`].
#[derive(Debug)]
pub(crate) enum Input {
    /// A worker subscribes; its events go to `stream`.
    Join {
        reply: ReplyId,
        stream: StreamKey,
        instance_id: String,
        config: Option<Box<(JobConfiguration, JobExtras)>>,
        overwrite: bool,
        /// Executions it runs at once (≥ 1).
        max_concurrent: u32,
    },
    /// A worker's stream ended.
    StreamEnded { stream: StreamKey, end: StreamEnd },
    /// `Complete` / `ReportFailure`.
    Answer {
        reply: ReplyId,
        instance_id: String,
        execution_id: String,
        outcomes: Vec<(i32, ItemOutcome)>,
    },
    /// `Decline`: items given back without an outcome (empty: all of them).
    Decline {
        reply: ReplyId,
        instance_id: String,
        execution_id: String,
        items: Vec<i32>,
        reason: String,
    },
    /// Graceful shutdown: finish what runs by `deadline`, then leave.
    Drain { reply: ReplyId, deadline: Instant },
    /// A `TriggerJob` call is about to write its trigger nodes: the next MANUAL execution of
    /// each local instance (started within `for_` from now) continues `parent`'s trace, or,
    /// with `None` (an untraced call), starts a trace of its own.
    ContinueTrace {
        parent: Option<crate::coordination::trace::TraceParent>,
        for_: Duration,
    },
    /// A cron fire of the job's schedule.
    Fire { fire_time: DateTime<Utc> },
    /// The timer's notice, `claim_ahead` before the cron instant `fire_time`: the run it will
    /// start may be claimed now, its trigger held until the instant.
    FireAhead { fire_time: DateTime<Utc> },
    /// The registry session changed.
    Session(SessionState),
    /// A registry event, delivered after the results of every read and write issued before
    /// it was received (so it never applies out of order with them).
    Watched(WatchEvent),
    /// The job's registry watch ended (the driver starts another after [`Action::Watch`]).
    WatchLost,
    /// The result of an action, in the order the registry answered.
    Done { op: OpId, result: IoResult },
    /// Time passed (a deadline of [`JobState::next_wakeup`] was reached).
    Tick,
}

/// What came of an action.
#[derive(Debug)]
pub(crate) enum IoResult {
    /// [`Action::SetUp`]: the job's subtree as read after setting it up.
    SetUp(Result<std::collections::BTreeMap<String, Node>, CoordError>),
    /// [`Action::Commit`].
    Committed(Result<Vec<OpResult>, RegError>),
    /// [`Action::Read`]: the node, or `None` if absent.
    Read {
        path: String,
        node: Result<Option<Node>, RegError>,
    },
    /// [`Action::ReadMany`]: the nodes, read at one point in the registry's history.
    ReadMany {
        paths: Vec<String>,
        nodes: Result<Vec<Option<Node>>, RegError>,
    },
    /// [`Action::Reload`]: the whole subtree.
    Loaded(Result<std::collections::BTreeMap<String, Node>, RegError>),
    /// [`Action::Persist`].
    Persisted(Result<(), RegError>),
    /// [`Action::AcquireLatch`]: the latch is held under this key (release it with
    /// [`Action::ReleaseLatch`]).
    Latched(Result<LatchKey, RegError>),
    /// [`Action::Watch`].
    Watching(Result<(), RegError>),
    /// [`Action::TouchClock`]: the stat of `systemTime/current` after touching it.
    Clock(Result<crate::registry::Stat, RegError>),
}

/// The reply to a pending call.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    Joined(Result<Box<JobConfiguration>, CoordError>),
    Answered(Result<(), CoordError>),
    /// The drain is over: whether every local instance has left (else the deadline came).
    Drained {
        released: bool,
    },
}

/// Something the driver must do.
#[derive(Debug, Clone)]
pub(crate) enum Action {
    /// Queue an event on a worker's stream (never waiting: a full stream is a slow worker,
    /// reported back as [`Input::StreamEnded`] with [`StreamEnd::BySidecar`]).
    Send {
        stream: StreamKey,
        event: WorkerEvent,
    },
    /// End a worker's stream once its queued events are read.
    EndStream { stream: StreamKey },
    /// Answer a pending call.
    Reply { reply: ReplyId, result: Reply },
    /// Answer a call about an execution this job does not hold (any more) from the sidecar's
    /// memory of finished executions ([`remembered_reply`]).
    Remembered {
        reply: ReplyId,
        execution_id: String,
        instance_id: String,
        /// A `Decline`, which is fine for any execution but another instance's.
        decline: bool,
    },
    /// First local instance: write the config if needed, the server node, watch the subtree
    /// and read it (one child task).
    SetUp {
        op: OpId,
        config: Option<Box<(JobConfiguration, JobExtras)>>,
        overwrite: bool,
    },
    /// An atomic multi-op, in session `generation` only.
    Commit {
        op: OpId,
        generation: u64,
        /// Shared with the state, which applies them to its mirror when they are committed.
        ops: Arc<[Op]>,
    },
    /// Create-or-replace one node (config, server status).
    Persist {
        op: OpId,
        path: String,
        data: Vec<u8>,
    },
    /// Read one node.
    Read { op: OpId, path: String },
    /// Read several nodes at one point in the registry's history (a multi-read).
    ReadMany { op: OpId, paths: Vec<String> },
    /// Read the whole job subtree.
    Reload { op: OpId },
    /// Watch the job's subtree again (the watch was lost).
    Watch { op: OpId },
    /// Take a Curator-compatible latch in `dir` (a child task with a deadline).
    AcquireLatch { op: OpId, dir: String },
    /// Let go of a latch taken earlier.
    ReleaseLatch { latch: LatchKey },
    /// Touch `systemTime/current` and return its stat (maxTimeDiffSeconds).
    TouchClock { op: OpId },
    /// Fire on this schedule (parsed by the state from the job's config), or stop firing.
    Schedule(Option<CronSchedule>),
    /// Tell the observer (history, metrics).
    Observe(Observation),
    /// Route answers for this execution id to this job.
    TrackExecution { id: String },
    /// Stop routing answers for this execution id; remember how it finished.
    ForgetExecution { id: String, finished: Finished },
}

/// What the observer hears.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Observation {
    TriggerSent {
        source: Source,
        items: Vec<i32>,
        latency: Duration,
    },
    Finished(Box<ExecutionRecord>),
    Misfired(Vec<i32>),
    ItemFailed(Box<crate::coordination::observer::ItemFailure>),
    FailoverTaken(Vec<i32>),
    Revoked {
        items: Vec<i32>,
        reason: String,
    },
    Worker {
        joined: bool,
    },
    Leadership {
        leading: bool,
    },
    /// A resident item's hold started on a local instance; `waited` is from this sidecar
    /// reading that the item is the instance's to the hold's start (a hand-off), `None` for a
    /// restart after the holder ended the last hold.
    HoldStarted {
        item: i32,
        waited: Option<Duration>,
    },
    /// The write of a run claimed ahead of cron instant `fire_time` was answered (landed or
    /// refused): what the claim lead measures ([`crate::schedule::ClaimLead::claimed`]).
    ClaimAnswered {
        fire_time: DateTime<Utc>,
    },
}

/// Item → parameter of the job's config.
pub(crate) type Parameters = BTreeMap<i32, String>;

/// The reply to an answer (or, with `decline`, a decline) for an execution no job holds, from
/// what the sidecar remembers of it: giving back what is already given back is fine, another
/// instance's is not.
pub(crate) fn remembered_reply(
    decline: bool,
    remembered: Result<(), CoordError>,
) -> Result<(), CoordError> {
    match remembered {
        Err(e @ CoordError::PermissionDenied(_)) => Err(e),
        _ if decline => Ok(()),
        other => other,
    }
}
