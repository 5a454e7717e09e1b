//! The job's state: a mirror of its subtree (and the [`JobView`] parsed from it), its local
//! instances, their executions, and the actions in flight. [`JobState::step`] dispatches an
//! input to the concern that handles it and then runs [`JobState::reconcile`], which compares
//! what is with what should be and acts on the difference. Being level-triggered, it needs no
//! memory of events: a lost one is recovered by the next reload.
//!
//! Rules every decision here keeps (`docs/architecture.md`):
//! - nothing is decided while the session is not connected, and nothing decided in one session
//!   is written in another ([`Action::Commit`] carries the generation);
//! - every write that starts, ends or hands over an item is conditional on the versions it was
//!   decided from, so a stale view makes a write fail, never land (`failover.rs`);
//! - at most one action touches an item at a time (`locked`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::{Action, Env, Input, LatchKey, OpId, Reply, ReplyId, Settings, StreamKey};
use crate::coordination::events::Source;
use crate::coordination::execution::Execution;
use crate::coordination::lease::WorkerLease;
use crate::coordination::small_map::SmallMap;
use crate::coordination::view::{JobView, ParseMemo};
use crate::coordination::CoordError;
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::elasticjob::paths::JobPaths;
use crate::registry::{CreateMode, Node, Op, TreeCache};

/// How long to wait before re-reading the job after a failed or refused write.
pub(super) const RETRY: Duration = Duration::from_millis(200);
/// How often to look again at the session's health while something waits on it.
pub(super) const HEALTH_POLL: Duration = Duration::from_millis(100);
/// How long after its instant a run claimed ahead goes out if the timer's fire never came.
pub(super) const HELD_FALLBACK: Duration = Duration::from_millis(50);

/// Where the job is in its setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// No local instance has joined yet.
    New,
    /// Config, server node, watch and first read in flight.
    SettingUp,
    /// The subtree is mirrored and watched.
    Ready,
}

/// One worker stream of this job on this sidecar.
#[derive(Debug)]
pub(super) struct Local {
    pub stream: StreamKey,
    /// The call to answer once the instance node exists.
    pub join_reply: Option<ReplyId>,
    /// Whether its instance node exists in `generation` (false while being created).
    pub registered: bool,
    /// The session generation of its instance node.
    pub generation: u64,
    /// Whether the cache has shown its instance node (so its absence means removal).
    pub seen: bool,
    /// The last assignment sent: items, leader flag, epoch.
    pub sent: Option<(Vec<i32>, bool, i64)>,
    pub lease: WorkerLease,
    /// No renewals while revoked items wait for the worker's acknowledgement.
    pub withheld: bool,
    /// The executions in flight, oldest first: at most `max_concurrent`; with more than one,
    /// every one after the first is a FAILOVER or MISFIRE run.
    pub executions: Vec<String>,
    /// How many executions the worker runs at once (1: one at a time, as an ElasticJob
    /// instance).
    pub max_concurrent: u32,
    /// A fire it could not take (no lease, unhealthy session): a catch-up is due.
    pub missed: bool,
    /// A fire or trigger-once request that came while a resharding was pending: it runs on
    /// the new items once the sharding is written and read whole.
    pub deferred: Option<DeferredFire>,
    /// Its run claimed ahead of a fire instant, whose trigger waits for that instant
    /// (`executions.rs`, "claiming ahead").
    pub held: Option<String>,
    /// The fire instant its run was claimed ahead for: the fire itself leaves the instance to
    /// that run.
    pub claimed_fire: Option<chrono::DateTime<chrono::Utc>>,
    /// `Shutdown` was sent (drain, remote shutdown): no new work.
    pub shutting_down: bool,
    /// The stream ended (or is being ended): how, and when its items may be released.
    pub gone: Option<Gone>,
}

/// A fire held back until a pending resharding is done, as ElasticJob's non-leaders block
/// before they run (`docs/elasticjob-compat.md` §6). Nothing polls for it: the reshard landing
/// (its events and reads) and the instance's run ending are inputs, each followed by a reconcile.
#[derive(Debug, Clone, Copy)]
pub(super) struct DeferredFire {
    pub source: Source,
    pub fire_time: chrono::DateTime<chrono::Utc>,
    pub since: Instant,
}

/// A local instance whose stream is over.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gone {
    /// Not before this instant are its items released and its instance removed: a worker that
    /// may not know its stream is over can work on until its lease ends.
    pub release_at: Instant,
    /// Its instance node was removed by someone else (remote shutdown).
    pub removed_remotely: bool,
}

impl Local {
    pub fn new(stream: StreamKey, reply: ReplyId, max_concurrent: u32) -> Local {
        Local {
            stream,
            join_reply: Some(reply),
            registered: false,
            generation: 0,
            seen: false,
            sent: None,
            lease: WorkerLease::new(),
            withheld: false,
            executions: Vec::new(),
            max_concurrent,
            missed: false,
            deferred: None,
            held: None,
            claimed_fire: None,
            shutting_down: false,
            gone: None,
        }
    }

    /// Registered, stream open, not shutting down: may be given work.
    pub fn live(&self) -> bool {
        self.registered && self.gone.is_none()
    }

    /// Runs nothing: may take a cron fire or a trigger-once request.
    pub fn idle(&self) -> bool {
        self.executions.is_empty()
    }

    /// Runs fewer executions than it can: may take FAILOVER and MISFIRE runs.
    pub fn has_room(&self) -> bool {
        self.executions.len() < self.max_concurrent.max(1) as usize
    }

    /// [`Local::has_room`] for a failover claim, which a run claimed ahead does not hold back:
    /// that run has not started, and if the claim still occupies the instance at its instant,
    /// the fire finds the instance busy, as it would have had nothing been claimed ahead.
    pub fn has_room_for_failover(&self) -> bool {
        self.executions.len() - usize::from(self.held.is_some())
            < self.max_concurrent.max(1) as usize
    }

    /// Forgets a finished or void execution.
    pub fn drop_execution(&mut self, execution_id: &str) {
        self.executions.retain(|e| e != execution_id);
        if self.held.as_deref() == Some(execution_id) {
            self.held = None;
        }
    }
}

/// A traced `TriggerJob` call's context, for the one MANUAL execution it starts on each local
/// instance that was live when it came.
#[derive(Debug, Clone)]
pub(super) struct ManualTrace {
    pub parent: crate::coordination::trace::TraceParent,
    pub until: Instant,
    pub instances: BTreeSet<String>,
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
    /// ElasticJob member (`leadership.rs`, [`ELASTICJOB_HOLD`]), or by a member to ask an
    /// ElasticJob leader for a reshard.
    ///
    /// [`ELASTICJOB_HOLD`]: super::leadership::ELASTICJOB_HOLD
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
    /// Taking a trigger-once request.
    TakeTrigger {
        instance_id: String,
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

/// A pending drain.
#[derive(Debug, Clone, Copy)]
pub(super) struct Drain {
    pub reply: ReplyId,
    pub deadline: Instant,
}

/// The state of one job on this sidecar; see the module docs.
pub(crate) struct JobState {
    pub(super) name: String,
    pub(super) paths: JobPaths,
    pub(super) settings: Settings,
    pub(super) phase: Phase,
    pub(super) cache: TreeCache,
    /// Paths whose cached stat is not known exactly (created by a multi whose result had none).
    pub(super) inexact: BTreeSet<String>,
    /// The data changes and deletions our own committed writes are still to be told of by
    /// the watch, per path: already mirrored from their results, they need no read.
    pub(super) own_events: HashMap<String, u32>,
    /// Nodes the events of the step being taken name, in their order (repeats included),
    /// read together, each once, when it ends.
    pub(super) event_reads: Vec<String>,
    pub(super) view: JobView,
    pub(super) view_stale: bool,
    /// The job's YAML nodes as last parsed, so a rebuilt view parses only what changed.
    pub(super) parse_memo: ParseMemo,
    /// Most jobs have one local instance: a B-tree would hold it in a node of eleven.
    pub(super) locals: SmallMap<String, Box<Local>>,
    /// Each worker stream's local instance (most jobs have one).
    pub(super) streams: SmallMap<StreamKey, String>,
    /// A job has one execution in flight or two (a run claimed ahead of its instant is one
    /// between its runs): a B-tree would hold it in a node of eleven. Boxed, as the entries
    /// move when one is inserted before them.
    pub(super) executions: SmallMap<String, Box<Execution>>,
    /// The session generation the local instances are registered in (0 before setup).
    pub(super) generation: u64,
    /// Actions in flight, oldest first (ids only grow). A job has a few at most: a vector
    /// holds them in a fraction of a B-tree node's room (eleven entries), which every job with
    /// anything in flight allocated.
    pub(super) pending: Vec<(OpId, Pending)>,
    /// The operations of each commit in flight, mirrored into the cache when it succeeds.
    pub(super) commit_ops: BTreeMap<OpId, Arc<[Op]>>,
    /// Items an action in flight touches: nothing else is decided about them meanwhile.
    pub(super) locked: BTreeSet<i32>,
    next_op: OpId,
    /// Re-read the job at this instant (after a refused write or a failed read).
    pub(super) retry_at: Option<Instant>,
    /// A fresh read of the whole subtree is wanted (after a reconnect, a refused write).
    pub(super) reload_wanted: bool,
    /// An owner node (or the sharding's `processing` flag) changed: the owners are to be read
    /// again at one point in the registry's history, so that another writer's sharding, one
    /// transaction, is never seen half applied. Assignments wait for that read.
    pub(super) owners_reread: bool,
    /// The trace the next MANUAL execution of each listed local instance continues, until when
    /// (see [`Input::ContinueTrace`]).
    pub(super) manual_parent: Option<ManualTrace>,
    /// The watch is gone: ask the driver for another.
    pub(super) watch_wanted: bool,
    pub(super) schedule: Option<(String, String)>,
    /// `schedule` parsed (`None` without a cron or with one that cannot be used): the leader
    /// keeps its reshards off the fire instants (`leadership.rs`, [`RESHARD_QUIET`]).
    ///
    /// [`RESHARD_QUIET`]: super::leadership::RESHARD_QUIET
    pub(super) cron: Option<crate::schedule::CronSchedule>,
    /// A reshard waits for this instant: it would have moved items of a live owner too close
    /// to a fire instant.
    pub(super) reshard_after: Option<Instant>,
    /// When this sidecar, leading, first saw the `necessary` flag set (cleared when it sees the
    /// flag gone or stops leading): a reshard that takes items from a live ElasticJob member
    /// waits [`ELASTICJOB_HOLD`] from then.
    ///
    /// [`ELASTICJOB_HOLD`]: super::leadership::ELASTICJOB_HOLD
    pub(super) necessary_seen: Option<Instant>,
    /// The sharding (`leadership.rs`, `sharding_digest`) for which this sidecar last asked an
    /// ElasticJob leader to reshard.
    pub(super) asked_reshard: Option<u64>,
    /// Whether one of the local instances leads the job (as last told to the observer).
    pub(super) leading: bool,
    pub(super) last_reload: Option<Instant>,
    /// Joins waiting for the setup.
    pub(super) joins_waiting: Vec<Input>,
    pub(super) drain: Option<Drain>,
    pub(super) lease_sequence: u64,
    /// The wakeup last asked for: a step long after it means this process was paused.
    pub(super) expected_wakeup: Option<Instant>,
    /// How to claim failover items without the failover latch: whether `leader/failover/latch`
    /// is believed to exist, and how many latch-free claims in a row the latch's state refused.
    pub(super) claims: FreeClaims,
    /// A step at a fire instant decided only what that instant needs (see
    /// [`JobState::step_fire`]); the rest of the reconcile is owed, and the driver asks for it
    /// once the instant's fires have all been taken up.
    pub(super) reconcile_owed: bool,
    /// Execution ids drawn so far (each from the step's [`Env::entropy`] and this count).
    ids_drawn: u64,
}

/// What a latch-free failover claim goes on (see [`Pending::Claim`]).
#[derive(Debug, Default)]
pub(crate) struct FreeClaims {
    /// Whether the latch's directory is believed to exist. Only a hint: the latch's events are
    /// not read back, and a wrong guess costs one refused claim, which corrects it.
    pub(crate) latch_dir: bool,
    /// Latch-free claims refused in a row by the latch's state; at [`FreeClaims::LIMIT`] the
    /// next claim takes the latch.
    pub(crate) refused: u32,
}

impl FreeClaims {
    /// Refusals in a row after which a claim takes the latch instead.
    pub(crate) const LIMIT: u32 = 2;
}

impl JobState {
    pub(crate) fn new(name: &str, settings: Settings) -> JobState {
        let paths = JobPaths::new(name);
        JobState {
            name: name.to_string(),
            cache: TreeCache::from_nodes(&paths.root(), BTreeMap::new()),
            paths,
            settings,
            phase: Phase::New,
            inexact: BTreeSet::new(),
            own_events: HashMap::new(),
            event_reads: Vec::new(),
            view: JobView::default(),
            view_stale: false,
            parse_memo: ParseMemo::default(),
            locals: SmallMap::new(),
            streams: SmallMap::new(),
            executions: SmallMap::new(),
            generation: 0,
            pending: Vec::new(),
            commit_ops: BTreeMap::new(),
            locked: BTreeSet::new(),
            next_op: 0,
            retry_at: None,
            reload_wanted: false,
            owners_reread: false,
            manual_parent: None,
            watch_wanted: false,
            schedule: None,
            cron: None,
            reshard_after: None,
            necessary_seen: None,
            asked_reshard: None,
            leading: false,
            last_reload: None,
            joins_waiting: Vec::new(),
            drain: None,
            lease_sequence: 0,
            expected_wakeup: None,
            claims: FreeClaims::default(),
            reconcile_owed: false,
            ids_drawn: 0,
        }
    }

    /// A fresh execution id, from the step's random bits.
    pub(super) fn next_execution_id(&mut self, env: &Env) -> String {
        self.ids_drawn += 1;
        crate::coordination::execution::execution_id(env.entropy, self.ids_drawn)
    }

    /// The job's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Whether the state has nothing left to do: no local instance, nothing in flight. The
    /// driver retires the job then.
    pub(crate) fn idle(&self) -> bool {
        self.locals.is_empty()
            && self.pending.is_empty()
            && self.executions.is_empty()
            && self.joins_waiting.is_empty()
            && self.drain.is_none()
    }

    /// Whether `path` is mirrored with an exact stat (a creation event for it needs no read).
    pub(crate) fn knows(&self, path: &str) -> bool {
        self.cache.contains(path) && !self.inexact.contains(path)
    }

    pub(super) fn next_op(&mut self) -> OpId {
        self.next_op += 1;
        self.next_op
    }

    /// Registers `pending` and returns its id.
    pub(super) fn start_op(&mut self, pending: Pending) -> OpId {
        let op = self.next_op();
        self.pending.push((op, pending));
        op
    }

    /// Removes and returns what `op` was for, if it is in flight.
    pub(super) fn take_pending(&mut self, op: OpId) -> Option<Pending> {
        let at = self.pending.iter().position(|(o, _)| *o == op)?;
        Some(self.pending.remove(at).1)
    }

    /// Whether an action of this kind is in flight.
    pub(super) fn in_flight(&self, pred: impl Fn(&Pending) -> bool) -> bool {
        self.pending.iter().any(|(_, p)| pred(p))
    }

    /// The one entry point: applies `input` at `env` and returns what to do.
    pub(crate) fn step(&mut self, input: Input, env: &Env) -> Vec<Action> {
        self.step_all([input], env)
    }

    /// Applies inputs that arrived together, in their order, and then reconciles once, on
    /// everything they tell.
    ///
    /// Reconciling is level-triggered, so deciding after the last input instead of after
    /// each loses nothing; it saves the work of deciding again after every result and event
    /// of a run (a run of many items brings hundreds), and no decision is made on a reading
    /// that the very next input already contradicts. Each input is handled on the view of
    /// everything mirrored before it, as it would be one step at a time, and every write is
    /// still conditional on the versions it was decided on.
    pub(crate) fn step_all(
        &mut self,
        inputs: impl IntoIterator<Item = Input>,
        env: &Env,
    ) -> Vec<Action> {
        self.step_inputs(inputs, env, true)
    }

    /// Applies the fire of an instant ([`Input::Fire`]) and decides only what the instant
    /// needs: its trigger (a run claimed ahead is sent, or one is started now), with every
    /// check that gates it (self-fencing, lapsed leases, the session). What the rest of the
    /// reconcile decides (membership, runs gone stale, failover, leadership, items to work on)
    /// is owed ([`JobState::reconcile_owed`]) until the next full step.
    ///
    /// When a thousand jobs fire at one instant, their triggers wait for each other's steps on
    /// the sidecar's cores; the rest of each step moves after them. Nothing is lost: the
    /// reconcile is level-triggered, and a step that comes a few milliseconds later decides
    /// on what is then, as a slower step would have.
    pub(crate) fn step_fire(&mut self, input: Input, env: &Env) -> Vec<Action> {
        self.step_inputs([input], env, false)
    }

    /// A step: `inputs` applied in their order, then the whole reconcile (`whole`) or only its
    /// first part, the rest owed.
    fn step_inputs(
        &mut self,
        inputs: impl IntoIterator<Item = Input>,
        env: &Env,
        whole: bool,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        self.notice_pause(env);
        // Before any input: an answer that comes first after this process was stopped past
        // 2/3 of its session is handled on executions already taken back (and refused as
        // such), not on the state from before the pause.
        self.check_self_fencing(env, &mut out);
        for (n, input) in inputs.into_iter().enumerate() {
            if n > 0 {
                // What the reconcile after the input before would have done first.
                self.refresh_view();
            }
            self.apply(input, env, &mut out);
        }
        self.read_named(&mut out);
        if whole {
            self.reconcile(env, &mut out);
        } else if self.phase == Phase::Ready && self.reconcile_urgent(env, &mut out) {
            self.reconcile_owed = true;
        }
        self.give_back_emptied();
        out
    }

    /// Whether a step at a fire instant left the rest of the reconcile to a later step.
    pub(crate) fn reconcile_owed(&self) -> bool {
        self.reconcile_owed
    }

    /// Frees the collections the step emptied. A B-tree keeps its emptied node (room for
    /// eleven entries) and a vector its capacity; a sidecar has a thousand jobs, each idle
    /// between its runs with nothing in flight, nothing locked and no execution, and each would
    /// otherwise hold the room its last run needed.
    fn give_back_emptied(&mut self) {
        macro_rules! free_if_empty {
            ($($field:ident),*) => {$(
                if self.$field.is_empty() {
                    self.$field = Default::default();
                }
            )*};
        }
        free_if_empty!(
            pending,
            commit_ops,
            locked,
            inexact,
            executions,
            locals,
            streams,
            joins_waiting
        );
    }

    /// Hands `input` to the concern it is for; deciding what else to do is the reconcile's.
    fn apply(&mut self, input: Input, env: &Env, out: &mut Vec<Action>) {
        match input {
            Input::Join { .. } => self.on_join(input, env, out),
            Input::StreamEnded { stream, end } => self.on_stream_ended(stream, end, env, out),
            Input::Answer {
                reply,
                instance_id,
                execution_id,
                outcomes,
            } => self.on_answer(reply, &instance_id, &execution_id, outcomes, env, out),
            Input::Decline {
                reply,
                instance_id,
                execution_id,
                items,
                reason,
            } => self.on_decline(reply, &instance_id, &execution_id, items, &reason, env, out),
            Input::Drain { reply, deadline } => self.on_drain(reply, deadline, env, out),
            Input::ContinueTrace { parent, for_ } => {
                let until = env.now + for_;
                self.manual_parent = parent.map(|parent| {
                    debug!(job = %self.name, trace = %parent.trace_id_hex(),
                           "the trigger's manual executions continue the caller's trace");
                    ManualTrace {
                        parent,
                        until,
                        instances: self.locals.keys().cloned().collect(),
                    }
                });
            }
            Input::Fire { fire_time } => self.on_fire(fire_time, Source::Cron, env, out),
            Input::FireAhead { fire_time } => self.on_fire_ahead(fire_time, env, out),
            Input::Session(state) => self.on_session(state, env, out),
            Input::Watched(ev) => self.on_watched(ev),
            Input::WatchLost => {
                self.watch_wanted = true;
                self.own_events = HashMap::new();
            }
            Input::Done { op, result } => self.on_done(op, result, env, out),
            Input::Tick => {}
        }
    }

    /// A step long after the wakeup the state asked for means this process was paused (or
    /// starved): what it knows may be stale. Re-read everything before acting on it; the
    /// conditional writes keep anything decided meanwhile from landing on a changed state.
    fn notice_pause(&mut self, env: &Env) {
        if let Some(expected) = self.expected_wakeup.take() {
            let late = env.now.saturating_duration_since(expected);
            if late > self.settings.session_timeout / 4 && self.phase == Phase::Ready {
                warn!(job = %self.name, late_ms = late.as_millis() as u64,
                      "this process did not run for a while: re-reading the job before acting");
                self.reload_wanted = true;
            }
        }
    }

    /// When [`JobState::step`] wants a [`Input::Tick`] next (remembered, so a step far past
    /// it is noticed as a pause of this process).
    pub(crate) fn next_wakeup(&mut self, env: &Env) -> Option<Instant> {
        let at = self.wakeup(env);
        self.expected_wakeup = at;
        at
    }

    /// The earliest instant something is due. An instant that has passed was acted on by the
    /// step just taken; if it is still due, something in flight holds it up, whose result comes
    /// as an input: such instants only make the state look again a little later, never spin.
    fn wakeup(&self, env: &Env) -> Option<Instant> {
        let valid_for = self.settings.lease;
        let mut due: Vec<Instant> = self.retry_at.into_iter().collect();
        let mut waits_on_health = self.reload_wanted || self.watch_wanted;
        for local in self.locals.values() {
            if let Some(gone) = &local.gone {
                due.push(gone.release_at);
                continue;
            }
            if !local.registered {
                continue;
            }
            due.extend(local.lease.expires(valid_for));
            if !local.withheld {
                match local.lease.next_renewal(valid_for) {
                    Some(t) if t > env.now => due.push(t),
                    _ => waits_on_health = true,
                }
            }
            waits_on_health |= local.missed;
        }
        // A run claimed ahead goes out at its instant, when the timer's fire comes. Should that
        // fire never come (the schedule changed meanwhile, its queue was full), the run goes out
        // `HELD_FALLBACK` later. Not at the instant itself: a thousand jobs firing together
        // would each be stepped twice at the busiest moment.
        for exec in self
            .locals
            .values()
            .filter_map(|l| l.held.as_ref().and_then(|id| self.executions.get(id)))
        {
            if let Ok(wait) = (exec.fire_time - env.wall).to_std() {
                due.push(env.now + wait + HELD_FALLBACK);
            }
        }
        let live = self.executions.values().filter(|e| e.void.is_none());
        for exec in live.clone() {
            due.extend(exec.timeout.map(|t| exec.started + t));
        }
        if live.count() > 0 {
            match env.proof {
                Some(proof) => due.push(proof + self.settings.session_timeout * 2 / 3),
                None => waits_on_health = true,
            }
        }
        if let Some(drain) = &self.drain {
            due.push(drain.deadline.checked_sub(valid_for).unwrap_or(env.now));
            due.push(drain.deadline);
        }
        // Only ahead: once passed, the reshard is the leader's to decide again (if it still leads).
        due.extend(self.reshard_after.filter(|t| *t > env.now));
        if let (Some(last), Some(minutes)) = (self.last_reload, self.reconcile_interval()) {
            due.push(last + minutes);
        }
        let soon = env.now + HEALTH_POLL;
        let held_up = due.iter().any(|t| *t <= env.now);
        due.retain(|t| *t > env.now);
        if waits_on_health || held_up {
            due.push(soon);
        }
        due.into_iter().min()
    }

    fn reconcile_interval(&self) -> Option<Duration> {
        let minutes = self.view.config.as_ref()?.reconcile_interval_minutes;
        (minutes > 0).then(|| Duration::from_secs(60 * minutes as u64))
    }

    /// Whether `execution_id` is a run claimed ahead of its instant and not sent yet (its
    /// instance's `Local::held`): giving it up frees its items as if they were never claimed.
    pub(super) fn is_held(&self, execution_id: &str) -> bool {
        self.executions
            .get(execution_id)
            .and_then(|e| self.locals.get(&e.instance_id))
            .is_some_and(|l| l.held.as_deref() == Some(execution_id))
    }

    /// Whether the session is connected in the generation the locals are registered in.
    pub(super) fn connected(&self, env: &Env) -> bool {
        env.connected_generation() == Some(self.generation) && self.generation > 0
    }

    /// Whether a lease may be granted now: connected, and the session proven alive recently
    /// enough that it cannot expire before the lease ends.
    pub(super) fn may_grant(&self, env: &Env) -> bool {
        self.connected(env)
            && env.proof.is_some_and(|p| {
                env.now.saturating_duration_since(p) < self.settings.session_timeout / 4
            })
    }

    /// Level-triggered: compares what is with what should be, and acts.
    pub(super) fn reconcile(&mut self, env: &Env, out: &mut Vec<Action>) {
        self.reconcile_owed = false;
        if self.phase != Phase::Ready {
            return;
        }
        if self.reconcile_urgent(env, out) {
            self.reconcile_rest(env, out);
        }
    }

    /// The reconcile's first part: the checks every step makes (self-fencing, lapsed leases,
    /// the session), the reads it owes, the schedule, the leases, and the runs claimed ahead
    /// whose instant has come. Returns whether the rest is to be decided on this view (not
    /// when disconnected, nor while a reload is wanted or in flight).
    fn reconcile_urgent(&mut self, env: &Env, out: &mut Vec<Action>) -> bool {
        if self.retry_at.is_some_and(|r| env.now >= r) && !self.reload_wanted {
            self.retry_at = None;
        }
        self.check_self_fencing(env, out);
        self.check_lapses(env, out);
        if !self.connected(env) {
            return false;
        }
        if self.watch_wanted && !self.in_flight(|p| matches!(p, Pending::Watch)) {
            self.watch_wanted = false;
            let op = self.start_op(Pending::Watch);
            out.push(Action::Watch { op });
        }
        if self.reload_wanted
            && self.retry_at.is_none_or(|r| env.now >= r)
            && !self.in_flight(|p| matches!(p, Pending::Reload))
        {
            self.reload_wanted = false;
            let op = self.start_op(Pending::Reload);
            out.push(Action::Reload { op });
        }
        if self.retry_at.is_some_and(|r| env.now >= r) {
            self.retry_at = None;
        }
        if self.owners_reread && !self.in_flight(|p| matches!(p, Pending::ReadOwners)) {
            self.owners_reread = false;
            let op = self.start_op(Pending::ReadOwners);
            out.push(Action::ReadMany {
                op,
                paths: self.owner_paths(),
            });
        }
        if self
            .last_reload
            .zip(self.reconcile_interval())
            .is_some_and(|(last, every)| env.now >= last + every)
            && !self.in_flight(|p| matches!(p, Pending::Reload))
        {
            // ElasticJob's reconcile, as a safety net: read everything again.
            self.last_reload = Some(env.now);
            let op = self.start_op(Pending::Reload);
            out.push(Action::Reload { op });
        }
        self.refresh_view();
        self.update_schedule(out);
        self.reconcile_leases(env, out);
        self.reconcile_held(env, out);
        if self.reload_wanted || self.in_flight(|p| matches!(p, Pending::Reload)) {
            // A write was refused or events may have been lost: decide nothing more on this
            // view; the reload comes first (after a short pause, see `write_failed`).
            self.push_assignments(out);
            return false;
        }
        true
    }

    /// The rest of the reconcile: membership, runs, failover, leadership, the items to work
    /// on, the workers' assignments.
    fn reconcile_rest(&mut self, env: &Env, out: &mut Vec<Action>) {
        self.reconcile_answers(env, out);
        self.reconcile_membership(env, out);
        self.reconcile_executions(env, out);
        self.refresh_view();
        // Interrupted items first: a job's writes go one after the other, and a claim sent
        // behind the leader's reshard (which the same crash often brings) would wait for it.
        self.reconcile_adoptions(env, out);
        self.reconcile_claims(env, out);
        self.reconcile_leadership(env, out);
        self.refresh_view();
        self.reconcile_work(env, out);
        self.push_assignments(out);
        self.observe_leadership(out);
    }

    fn update_schedule(&mut self, out: &mut Vec<Action>) {
        // Compared borrowed: every step looks, and the schedule nearly never changes.
        let wanted = self
            .view
            .config
            .as_ref()
            .map(|c| {
                (
                    c.cron.as_deref().unwrap_or_default(),
                    c.time_zone.as_deref().unwrap_or_default(),
                )
            })
            .filter(|(cron, _)| !cron.trim().is_empty());
        let same = match (wanted, &self.schedule) {
            (None, None) => true,
            (Some((cron, tz)), Some((c, t))) => cron == c && tz == t,
            _ => false,
        };
        if !same {
            let wanted = wanted.map(|(cron, tz)| (cron.to_string(), tz.to_string()));
            self.schedule = wanted.clone();
            self.cron = wanted
                .as_ref()
                .and_then(|(cron, tz)| crate::schedule::CronSchedule::parse(cron, tz).ok());
            out.push(Action::Schedule(wanted));
        }
    }

    /// The effective config, or the error a joining worker gets when there is none.
    pub(super) fn effective_config(&self) -> Result<(JobConfiguration, JobExtras), CoordError> {
        match &self.view.config {
            Some(c) => Ok((JobConfiguration::clone(c), self.view.extras)),
            None => Err(CoordError::FailedPrecondition(format!(
                "the config of job {} in the registry is unusable: {}",
                self.name,
                self.view.config_error.clone().unwrap_or_default()
            ))),
        }
    }

    pub(super) fn reply(&self, reply: ReplyId, result: Reply, out: &mut Vec<Action>) {
        out.push(Action::Reply { reply, result });
    }

    /// The first setup of the job is done: mirror the subtree, then register the waiting joins.
    pub(super) fn on_set_up(
        &mut self,
        result: Result<BTreeMap<String, Node>, CoordError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let joins = std::mem::take(&mut self.joins_waiting);
        match result {
            Ok(nodes) => {
                self.phase = Phase::Ready;
                self.cache.replace_all(nodes);
                self.view_stale = true;
                self.last_reload = Some(env.now);
                self.generation = env.connected_generation().unwrap_or(0);
                self.refresh_view();
                info!(job = %self.name, generation = self.generation, "job set up");
                for join in joins {
                    self.on_join(join, env, out);
                }
            }
            Err(e) => {
                self.phase = Phase::New;
                warn!(job = %self.name, error = %e, "cannot set the job up");
                for join in joins {
                    if let Input::Join { reply, stream, .. } = join {
                        self.reply(reply, Reply::Joined(Err(e.clone())), out);
                        out.push(Action::EndStream { stream });
                    }
                }
            }
        }
    }
}

/// `Create` with empty data.
pub(super) fn create_empty(path: String, mode: CreateMode) -> Op {
    Op::create(path, Vec::new(), mode)
}
