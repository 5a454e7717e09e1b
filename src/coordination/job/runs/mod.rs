//! Runs: the executions of the job's local instances, from the fire that plans one to the
//! outcome of its last item. [`fire`] is a cron fire's path to the worker's trigger (what it
//! runs, the start's write, a run claimed ahead going out at its instant, the trigger),
//! [`ahead`] the claims of runs ahead of their instant,
//! [`work`] everything else that starts runs (fires held for a reshard, trigger-once,
//! catch-ups, FAILOVER runs), [`answers`] records how a run ended, and [`release`] takes items
//! back (revoke, timeout, lease lapse, self-fencing) without ever letting two workers run one
//! item at once.
//!
//! An item is started only by a conditional write that proves nobody runs it; it is given
//! back only once its worker has certainly stopped: it answered or declined it, or its lease
//! ran out. A worker that was told `Revoke` gets no lease renewal until it acknowledges, so
//! that moment always comes.

mod ahead;
mod answers;
pub(super) mod execution;
mod fire;
mod release;
mod resident;
mod work;

use std::collections::BTreeSet;
use std::time::{Instant, SystemTime};

use chrono::{DateTime, Utc};
use tracing::{info, warn};

pub(crate) use execution::{execution_id, Execution, Void};
#[cfg(test)]
pub(super) use fire::{plan_fire, FirePlan};

use super::instances::{Instances, Local};
use super::io::Cx;
use super::{Action, Env, Observation, Settings};
use crate::coordination::events::{ItemOutcome, Source};
use crate::coordination::finished::Finished;
use crate::coordination::job::mirror::JobView;
use crate::coordination::observer::{ExecutionRecord, ItemFailure};
use crate::coordination::small_map::SmallMap;
use crate::coordination::trace::{TraceContext, TraceParent};

/// How long after its instant a run claimed ahead goes out if the timer's fire never came.
pub(super) const HELD_FALLBACK: std::time::Duration = std::time::Duration::from_millis(50);

/// A fire held back until a pending resharding is done, as ElasticJob's non-leaders block
/// before they run (`docs/elasticjob-compat.md` §6). Nothing polls for it: the reshard landing
/// (its events and reads) and the instance's run ending are inputs, each followed by a reconcile.
#[derive(Debug, Clone)]
pub(super) struct DeferredFire {
    pub source: Source,
    pub fire_time: DateTime<Utc>,
    pub since: Instant,
    /// The job parameter a trigger-once request named for its run.
    pub parameter: Option<String>,
}

/// What the runs of one local instance need beyond its executions' own records.
#[derive(Debug, Default)]
struct Slot {
    /// Its executions in flight, oldest first: at most its worker's `max_concurrent`; with more
    /// than one, every one after the first is a FAILOVER or MISFIRE run.
    executions: Vec<String>,
    /// A fire it could not take (no lease, unhealthy session): a catch-up is due.
    missed: bool,
    /// A fire or trigger-once request that came while a resharding was pending: it runs on
    /// the new items once the sharding is written and read whole.
    deferred: Option<DeferredFire>,
    /// Its run claimed ahead of a fire instant, whose trigger waits for that instant.
    held: Option<String>,
    /// The fire instant its run was claimed ahead for: the fire itself leaves the instance to
    /// that run.
    claimed_fire: Option<DateTime<Utc>>,
    /// A revoke waits for its worker's acknowledgement: no renewals, no new work, until every
    /// execution of the instance that was revoked is over.
    withheld: bool,
}

impl Slot {
    fn is_empty(&self) -> bool {
        self.executions.is_empty()
            && !self.missed
            && self.deferred.is_none()
            && self.held.is_none()
            && self.claimed_fire.is_none()
            && !self.withheld
    }
}

/// Tells the observer that item `i` of `exec` failed with `error`, once the write that ended it
/// landed: the view then shows the retry it scheduled, if any (none: the failure stands).
pub(super) fn note_failure(cx: &mut Cx, exec: &Execution, i: i32, error: &str) {
    let view = cx.view();
    // A resident hold is restarted whatever its end, not retried: each failure stands.
    let retry = view
        .items
        .get(&i)
        .and_then(|it| it.retry.as_ref())
        .map(|r| r.attempt)
        .filter(|a| *a > exec.attempt && !view.resident());
    let config = view.config.as_ref();
    let failure = ItemFailure {
        job: cx.name().to_string(),
        execution_id: exec.id.clone(),
        task_id: exec.task_id.clone(),
        instance_id: exec.instance_id.clone(),
        item: i,
        attempt: exec.attempt,
        error: error.to_string(),
        at: SystemTime::from(cx.env.wall),
        retry,
        retrying: view.extras.retry.is_some() && !view.resident(),
        error_handler: config.and_then(|c| c.job_error_handler_type.clone()),
        props: config.map(|c| c.props.clone()).unwrap_or_default(),
    };
    match retry {
        Some(next) => {
            info!(job = %cx.name(), item = i, attempt = next, "item failed: retry scheduled")
        }
        None if failure.retrying => {
            warn!(job = %cx.name(), item = i, attempts = exec.attempt + 1, "item failed: its attempts ran out")
        }
        None => {}
    }
    cx.observe(Observation::ItemFailed(Box::new(failure)));
}

/// A traced `TriggerJob` call's context, for the one MANUAL execution it starts on each local
/// instance that was live when it came.
#[derive(Debug, Clone)]
struct ManualTrace {
    parent: TraceParent,
    until: Instant,
    instances: BTreeSet<String>,
}

/// The runs of the job's local instances; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Runs {
    /// A job has one execution in flight or two (a run claimed ahead of its instant is one
    /// between its runs): a B-tree would hold it in a node of eleven. Boxed, as the entries
    /// move when one is inserted before them.
    executions: SmallMap<String, Box<Execution>>,
    /// Per local instance (most jobs have one).
    slots: SmallMap<String, Slot>,
    /// The trace the next MANUAL execution of each listed local instance continues, until when
    /// (see [`super::Input::ContinueTrace`]).
    manual: Option<ManualTrace>,
    /// Execution ids drawn so far (each from the step's `Env::entropy` and this count).
    ids_drawn: u64,
    /// A resident job's items that are a local instance's to hold and are not held yet, since
    /// when this sidecar has read so (the hand-off time).
    holds_waiting: std::collections::BTreeMap<i32, Instant>,
}

impl Runs {
    pub(super) fn contains(&self, execution_id: &str) -> bool {
        self.executions.contains_key(execution_id)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.executions.is_empty()
    }

    /// (instance, item) of every execution in flight.
    pub(super) fn executing_on(&self) -> impl Iterator<Item = (&str, i32)> {
        self.executions
            .values()
            .flat_map(|e| e.items.iter().map(|i| (e.instance_id.as_str(), *i)))
    }

    /// The executions of local instance `id`, oldest first.
    pub(super) fn of_instance(&self, id: &str) -> &[String] {
        self.slots.get(id).map_or(&[], |s| s.executions.as_slice())
    }

    /// Whether local instance `id` runs nothing: it may take a cron fire or a trigger-once.
    pub(super) fn idle(&self, id: &str) -> bool {
        self.of_instance(id).is_empty()
    }

    /// Whether `id` runs fewer executions than its worker can: it may take FAILOVER and
    /// MISFIRE runs.
    fn has_room(&self, id: &str, local: &Local) -> bool {
        self.of_instance(id).len() < local.max_concurrent() as usize
    }

    /// [`Runs::has_room`] for a failover claim, which a run claimed ahead does not hold back:
    /// that run has not started, and if the claim still occupies the instance at its instant,
    /// the fire finds the instance busy, as it would have had nothing been claimed ahead.
    fn has_room_for_failover(&self, id: &str, local: &Local) -> bool {
        let held = self.slots.get(id).is_some_and(|s| s.held.is_some());
        self.of_instance(id).len() - usize::from(held) < local.max_concurrent() as usize
    }

    /// Whether `execution_id` is a run claimed ahead of its instant and not sent yet: giving
    /// it up frees its items as if they were never claimed.
    pub(super) fn is_held(&self, execution_id: &str) -> bool {
        self.executions
            .get(execution_id)
            .and_then(|e| self.slots.get(&e.instance_id))
            .is_some_and(|s| s.held.as_deref() == Some(execution_id))
    }

    /// The instances whose revoke waits for an acknowledgement: no renewals for them.
    pub(super) fn withheld(&self) -> BTreeSet<String> {
        self.slots
            .iter()
            .filter(|(_, s)| s.withheld)
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn withholds(&self, id: &str) -> bool {
        self.slots.get(id).is_some_and(|s| s.withheld)
    }

    /// Items of this sidecar's executions in flight (taken back ones included, until their
    /// worker has stopped): never started again meanwhile, whatever the registry shows yet.
    pub(super) fn executing(&self) -> BTreeSet<i32> {
        self.executions
            .values()
            .flat_map(|e| e.items.iter().copied())
            .collect()
    }

    fn slot(&mut self, id: &str) -> &mut Slot {
        if !self.slots.contains_key(id) {
            self.slots.insert(id.to_string(), Slot::default());
        }
        self.slots.get_mut(id).expect("just inserted")
    }

    /// A fresh execution id, from the step's random bits.
    fn next_id(&mut self, cx: &Cx) -> String {
        self.ids_drawn += 1;
        execution_id(cx.env.entropy, self.ids_drawn)
    }

    /// Lists a new execution on its instance.
    fn insert(&mut self, exec: Execution) {
        let (id, instance) = (exec.id.clone(), exec.instance_id.clone());
        self.executions.insert(id.clone(), Box::new(exec));
        self.slot(&instance).executions.push(id);
    }

    /// The trace of a new execution of `source` on local instance `id`: a MANUAL one continues
    /// the trace of the traced `TriggerJob` call that asked for it, if one is waiting for `id`.
    pub(super) fn trace_for(
        &mut self,
        cx: &Cx,
        id: &str,
        source: Source,
        execution_id: &str,
    ) -> TraceContext {
        let now = cx.env.now;
        let parent = match (source, self.manual.as_mut()) {
            (Source::Manual, Some(m)) if now < m.until => {
                m.instances.remove(id).then(|| m.parent.clone())
            }
            _ => None,
        };
        if self
            .manual
            .as_ref()
            .is_some_and(|m| m.instances.is_empty() || now >= m.until)
        {
            self.manual = None;
        }
        TraceContext::for_execution(execution_id, parent.as_ref())
    }

    /// The next MANUAL execution of each local instance now live continues `parent`'s trace
    /// until `until` (`None`: an untraced call, which ends an earlier call's).
    pub(super) fn continue_trace(
        &mut self,
        parent: Option<TraceParent>,
        until: Instant,
        instances: &Instances,
    ) {
        self.manual = parent.map(|parent| ManualTrace {
            parent,
            until,
            instances: instances.ids().into_iter().collect(),
        });
    }

    /// Local instances that may be given work now, among those `free` says have room: live,
    /// not shutting down, not waiting for a revoke's acknowledgement, in the mirror, holding a
    /// valid lease (renewals come before this in every reconcile), on an enabled server, with
    /// the session proven alive.
    fn ready(
        &self,
        cx: &Cx,
        instances: &Instances,
        free: impl Fn(&Self, &str, &Local) -> bool,
    ) -> Vec<String> {
        if !cx.view().server_enabled(&cx.settings().ip) || !cx.may_grant() {
            return Vec::new();
        }
        instances
            .iter()
            .filter(|(id, l)| {
                l.live()
                    && !l.shutting_down()
                    && !self.withholds(id)
                    && free(self, id, l)
                    && cx.view().instances.contains_key(*id)
                    && l.lease().valid(cx.env.now, cx.settings().lease)
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Local instances that may be given any work now: running nothing.
    pub(super) fn idle_locals(&self, cx: &Cx, instances: &Instances) -> Vec<String> {
        self.ready(cx, instances, |runs, id, _| runs.idle(id))
    }

    /// Local instances that may be given a FAILOVER or MISFIRE run now.
    fn spare_locals(&self, cx: &Cx, instances: &Instances) -> Vec<String> {
        self.ready(cx, instances, |runs, id, l| runs.has_room(id, l))
    }

    /// Local instances that may take over failover items now (a run claimed ahead leaves
    /// room).
    pub(super) fn claim_locals(&self, cx: &Cx, instances: &Instances) -> Vec<String> {
        self.ready(cx, instances, |runs, id, l| {
            runs.has_room_for_failover(id, l)
        })
    }

    // ----- the end of an execution ------------------------------------------------------------

    /// Records `outcome` for `items`; the execution is over once every item has one.
    fn record_outcomes(
        &mut self,
        cx: &mut Cx,
        execution_id: &str,
        items: &[i32],
        outcome: &ItemOutcome,
    ) {
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        let now = SystemTime::from(cx.env.wall);
        for i in items {
            if let ItemOutcome::Failed(error) = outcome {
                warn!(job = %cx.name(), execution = %execution_id, item = *i, error = %error, "item failed");
                note_failure(cx, exec, *i, error);
            }
            let mut attributes = vec![
                ("item", i.to_string()),
                ("outcome", outcome.kind().to_string()),
            ];
            if let ItemOutcome::Failed(error) | ItemOutcome::Revoked(error) = outcome {
                attributes.push(("error", error.clone()));
            }
            exec.note(now, "answer", attributes);
            exec.outcomes.insert(*i, outcome.clone());
        }
        self.settle_answers(cx, execution_id);
        if self.executions[execution_id].is_done() {
            self.finish(cx, execution_id);
        }
    }

    /// Every item has an outcome: free the instance and tell the observer.
    fn finish(&mut self, cx: &mut Cx, execution_id: &str) {
        self.settle_answers(cx, execution_id);
        let Some(exec) = self.executions.remove(execution_id) else {
            return;
        };
        // Renewals resume once no revoke of the instance waits for its acknowledgement: the
        // executions it runs on (a resident job's other holds) were never taken back.
        let executions = &self.executions;
        if let Some(slot) = self.slots.get_mut(&exec.instance_id) {
            slot.executions.retain(|e| e != execution_id);
            if slot.held.as_deref() == Some(execution_id) {
                slot.held = None;
            }
            let waiting = slot.executions.iter().any(|e| {
                executions
                    .get(e)
                    .and_then(|e| e.void.as_ref())
                    .is_some_and(|v| v.waiting_ack)
            });
            if !waiting {
                slot.withheld = false;
            }
        }
        let failed = exec
            .outcomes
            .values()
            .filter(|o| matches!(o, ItemOutcome::Failed(_)))
            .count();
        let elapsed = cx.env.now.saturating_duration_since(exec.started);
        info!(job = %cx.name(), execution = %execution_id, instance = %exec.instance_id, items = ?exec.items,
              source = exec.source.as_str(), failed, elapsed_ms = elapsed.as_millis() as u64,
              "execution finished");
        let revoked = exec.outcomes.values().find_map(|o| match o {
            ItemOutcome::Revoked(reason) => Some(reason.clone()),
            _ => None,
        });
        if exec.delivered {
            cx.observe(Observation::Finished(Box::new(ExecutionRecord {
                job: cx.name().to_string(),
                execution_id: exec.id.clone(),
                instance_id: exec.instance_id.clone(),
                source: exec.source,
                started_at: exec.started_at,
                duration: elapsed,
                items: exec.outcomes.clone(),
                task_id: exec.task_id.clone(),
                fire_time: exec.fire_time.into(),
                fencing_tokens: exec.fencing_tokens.clone(),
                trace: exec.trace.clone(),
                events: exec.events.clone(),
                attempt: exec.attempt,
            })));
        }
        cx.out.push(Action::ForgetExecution {
            id: exec.id,
            finished: Finished {
                instance_id: exec.instance_id,
                revoked,
            },
        });
    }

    /// Forgets the executions of an instance that has left (its items went with its leave).
    pub(super) fn forget_instance(&mut self, cx: &mut Cx, id: &str) {
        let executions = self
            .slots
            .remove(id)
            .map(|s| s.executions)
            .unwrap_or_default();
        for execution_id in executions {
            let Some(exec) = self.executions.get_mut(&execution_id) else {
                continue;
            };
            let reason = exec
                .void
                .get_or_insert_with(|| Void {
                    reason: "the worker left".into(),
                    release: super::writes::Release::None,
                    waiting_ack: false,
                    restart: false,
                })
                .reason
                .clone();
            for i in exec.items.clone() {
                exec.outcomes
                    .entry(i)
                    .or_insert_with(|| ItemOutcome::Revoked(reason.clone()));
            }
            self.finish(cx, &execution_id);
        }
    }

    // ----- time -------------------------------------------------------------------------------

    /// The instants the pending retries of items local instances own come due.
    pub(super) fn retries_due(
        &self,
        env: &Env,
        view: &JobView,
        instances: &Instances,
        ip: &str,
    ) -> Vec<Instant> {
        let wall = env.wall.timestamp_millis();
        let executing = self.executing();
        instances
            .iter()
            .filter(|(_, l)| l.live())
            .flat_map(|(id, _)| view.items_of(id, ip))
            // A retry that runs keeps its node until it ends: nothing is due for it meanwhile.
            .filter(|i| !executing.contains(i))
            .filter_map(|i| view.items.get(&i).filter(|it| it.running.is_none()))
            .filter_map(|it| it.retry.as_ref())
            .map(|r| {
                env.now
                    + std::time::Duration::from_millis(r.due_ms.saturating_sub(wall).max(0) as u64)
            })
            .collect()
    }

    /// The instants the runs are due (a run claimed ahead, timeouts, self-fencing), and whether
    /// one waits for the session to be healthy (a catch-up owed, no proof of life yet).
    pub(super) fn due(&self, env: &Env, settings: &Settings) -> (Vec<Instant>, bool) {
        let mut due = Vec::new();
        let mut waits_on_health = self.slots.values().any(|s| s.missed);
        // A run claimed ahead goes out at its instant, when the timer's fire comes. Should that
        // fire never come (the schedule changed meanwhile, its queue was full), the run goes out
        // `HELD_FALLBACK` later. Not at the instant itself: a thousand jobs firing together
        // would each be stepped twice at the busiest moment.
        for exec in self
            .slots
            .values()
            .filter_map(|s| s.held.as_ref().and_then(|id| self.executions.get(id)))
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
                Some(proof) => due.push(proof + settings.session_timeout * 2 / 3),
                None => waits_on_health = true,
            }
        }
        (due, waits_on_health)
    }

    /// Frees what emptied (see [`super::io::Io::give_back_emptied`]).
    pub(super) fn give_back_emptied(&mut self) {
        self.slots.retain(|_, s| !s.is_empty());
        if self.executions.is_empty() {
            self.executions = SmallMap::new();
        }
        if self.slots.is_empty() {
            self.slots = SmallMap::new();
        }
    }

    #[cfg(test)]
    pub(super) fn missed(&self, id: &str) -> bool {
        self.slots.get(id).is_some_and(|s| s.missed)
    }
}
