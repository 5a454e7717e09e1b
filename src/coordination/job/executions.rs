//! Executions: what a fire runs, how a run starts (its `running` nodes, then its `Trigger`),
//! how it ends (answers, declines), and how the sidecar takes items back (revoke, timeout,
//! lease lapse, self-fencing) without ever letting two workers run one item at once.
//!
//! An item is started only by a conditional write that proves nobody runs it; it is given
//! back only once its worker has certainly stopped: it answered or declined it, or its lease
//! ran out. A worker that was told `Revoke` gets no lease renewal until it acknowledges, so
//! that moment always comes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use tracing::{debug, info, warn};

use super::state::{DeferredFire, JobState, Pending};
use super::{Action, Env, Observation};
use crate::coordination::events::{Source, Trigger, WorkerEvent};
use crate::coordination::execution::{self, Execution};
use crate::coordination::failover::{self, Release};
use crate::coordination::trace::TraceContext;
use crate::elasticjob::instance::task_id;
use crate::registry::{CreateMode, Error as RegError, Op, OpResult, Stat};

impl JobState {
    // ----- fires ------------------------------------------------------------------------------

    pub(super) fn on_fire(
        &mut self,
        fire_time: DateTime<Utc>,
        source: Source,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        if self.phase != super::state::Phase::Ready || self.locals.is_empty() {
            return;
        }
        self.refresh_view();
        let max_diff = self
            .view
            .config
            .as_ref()
            .map_or(-1, |c| c.max_time_diff_seconds);
        if max_diff >= 0 && self.connected(env) {
            let op = self.start_op(Pending::Clock { fire_time });
            out.push(Action::TouchClock { op });
            return;
        }
        self.fire(fire_time, source, env, out);
    }

    /// ElasticJob's `maxTimeDiffSeconds` check: the fire runs only if this host's clock agrees
    /// with ZooKeeper's within the limit.
    pub(super) fn on_clock(
        &mut self,
        fire_time: DateTime<Utc>,
        result: Result<Stat, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let max = self
            .view
            .config
            .as_ref()
            .map_or(-1, |c| c.max_time_diff_seconds);
        match result {
            Ok(stat) => {
                let diff = (env.wall.timestamp_millis() - stat.mtime).abs();
                if max >= 0 && diff > i64::from(max) * 1000 {
                    warn!(job = %self.name, diff_ms = diff, max_seconds = max,
                          "fire skipped: this host's clock differs from ZooKeeper's by more than maxTimeDiffSeconds allows; synchronise the clock (NTP) or raise maxTimeDiffSeconds");
                    return;
                }
                self.fire(fire_time, Source::Cron, env, out);
            }
            Err(e) => {
                warn!(job = %self.name, error = %e, "fire skipped: cannot read ZooKeeper's clock");
            }
        }
    }

    /// A fire for every local instance: run its runnable items if it is idle; flag `misfire`
    /// if it is busy; note the miss if it cannot be given work now (no lease may be granted).
    pub(super) fn fire(
        &mut self,
        fire_time: DateTime<Utc>,
        source: Source,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        // An instance whose run for this instant was claimed ahead is left to that run
        // (`reconcile_held` sends it).
        let ids: Vec<String> = self
            .locals
            .iter()
            .filter(|(_, l)| l.live() && !l.shutting_down && l.claimed_fire != Some(fire_time))
            .map(|(id, _)| id.clone())
            .collect();
        let healthy = self.may_grant(env);
        let mut misfire = BTreeSet::new();
        for id in ids {
            // A cron fire runs only on an instance that runs nothing, whatever it may run at
            // once: ElasticJob's rule (a busy instance flags misfire).
            let busy = self.locals.get(&id).is_some_and(|l| !l.idle());
            if busy {
                let plan = execution::plan_fire(&self.view, &id, &self.settings.ip, true);
                misfire.extend(plan.misfire);
                continue;
            }
            if !healthy {
                if let Some(local) = self.locals.get_mut(&id) {
                    local.missed = true;
                }
                warn!(job = %self.name, instance = %id, "fire missed: the registry session is not proven healthy; a catch-up follows once it is");
                continue;
            }
            if self.defer_if_resharding(&id, source, fire_time, env) {
                continue;
            }
            let run = self.runnable_now(&id);
            if !run.is_empty() {
                self.start_execution(&id, run, source, fire_time, Vec::new(), env, out);
            }
        }
        self.flag_misfire(misfire, env, out);
    }

    /// Flags `misfire` on `items`: a fire found their instance busy (ElasticJob's rule), and a
    /// catch-up runs them once it is idle.
    fn flag_misfire(&mut self, items: BTreeSet<i32>, env: &Env, out: &mut Vec<Action>) {
        if items.is_empty()
            || !self.connected(env)
            || self.in_flight(|p| matches!(p, Pending::MisfireFlags))
        {
            return;
        }
        let items: Vec<i32> = items.into_iter().collect();
        debug!(job = %self.name, items = ?items, "still running: misfire");
        out.push(Action::Observe(Observation::Misfired(items.clone())));
        let ops = items
            .iter()
            .map(|i| {
                Op::create(
                    self.paths.item_misfire(*i),
                    Vec::new(),
                    CreateMode::Persistent,
                )
            })
            .collect();
        self.commit(Pending::MisfireFlags, ops, &[], out);
    }

    // ----- claiming ahead ---------------------------------------------------------------------

    /// The timer's notice, `claim_ahead` before cron instant `fire_time`: each local instance
    /// the fire would start a run on claims the run's items now (its `running` nodes written),
    /// and its `Trigger` goes out at the instant itself (`reconcile_held`), instead of a
    /// ZooKeeper write after it.
    ///
    /// Only the plain case is claimed ahead: an idle instance that may be given work, whose
    /// fire would run its own items, with nothing else due. A fire that waits for ZooKeeper's
    /// clock (maxTimeDiffSeconds), a resharding pending, failover items to run first, a
    /// catch-up or a held fire to run, an unhealthy session: the fire decides at its instant, as
    /// it always has. The claim is the run's decision, taken the lead earlier; a change that
    /// lands between the claim and the instant finds the run under way, as one landing just
    /// after the instant would. Until the instant the run can still be given up (its worker
    /// gone or shutting down, no lease to send it under, its instance taken by a failover
    /// claim), and its items are then freed as if never claimed: a run never starts before its
    /// fire time.
    pub(super) fn on_fire_ahead(
        &mut self,
        fire_time: DateTime<Utc>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        if self.phase != super::state::Phase::Ready || self.locals.is_empty() {
            return;
        }
        if fire_time <= env.wall {
            return; // late: the fire itself comes at once
        }
        self.refresh_view();
        let Some(config) = self.view.config.as_ref() else {
            return;
        };
        if config.max_time_diff_seconds >= 0 || !config.monitor_execution {
            // The clock check belongs to the instant; without `running` nodes there is nothing
            // to claim.
            return;
        }
        let failover = config.failover;
        if self.resharding_pending()
            || self.reload_wanted
            || self.in_flight(|p| matches!(p, Pending::Reload))
        {
            // A claim decided on a view about to be replaced would likely be refused.
            return;
        }
        for id in self.idle_locals(env) {
            let local = &self.locals[&id];
            if local.missed || local.deferred.is_some() || local.claimed_fire == Some(fire_time) {
                continue;
            }
            if failover && !self.view.failover_items_of(&id).is_empty() {
                continue;
            }
            let run = self.runnable_now(&id);
            if run.is_empty() {
                continue;
            }
            debug!(job = %self.name, instance = %id, items = ?run, %fire_time, "claiming the fire's run ahead of its instant");
            let Some(execution_id) =
                self.start_execution(&id, run, Source::Cron, fire_time, Vec::new(), env, out)
            else {
                continue;
            };
            if let Some(exec) = self.executions.get_mut(&execution_id) {
                exec.note(
                    SystemTime::from(env.wall),
                    "claimed ahead",
                    vec![("fire_time", fire_time.to_rfc3339())],
                );
            }
            if let Some(local) = self.locals.get_mut(&id) {
                local.held = Some(execution_id);
                local.claimed_fire = Some(fire_time);
            }
        }
    }

    /// Whether the start of `execution_id` is still being written.
    pub(super) fn starting(&self, execution_id: &str) -> bool {
        self.in_flight(|p| matches!(p, Pending::Start { execution_id: e } if e == execution_id))
    }

    /// Runs claimed ahead whose instant has come go out, started now. The fire finds the
    /// instance as it would have found it: one that took other work meanwhile (a failover
    /// claim) is busy, so the claimed run is given up, its items freed, and the fire is a
    /// misfire; items the instance came to own since the claim wait for a catch-up, as on any
    /// instance whose run is under way.
    pub(super) fn reconcile_held(&mut self, env: &Env, out: &mut Vec<Action>) {
        let due: Vec<(String, String)> = self
            .locals
            .iter()
            .filter_map(|(id, l)| {
                let execution_id = l.held.as_ref()?;
                let exec = self.executions.get(execution_id)?;
                (exec.fire_time <= env.wall && exec.void.is_none() && !self.starting(execution_id))
                    .then(|| (id.clone(), execution_id.clone()))
            })
            .collect();
        if due.is_empty() {
            return;
        }
        let misfire_on = self.view.config.as_ref().is_some_and(|c| c.misfire);
        let mut misfire = BTreeSet::new();
        for (id, execution_id) in due {
            let Some(local) = self.locals.get(&id) else {
                continue;
            };
            let busy = local.executions.iter().any(|e| *e != execution_id);
            if busy {
                misfire
                    .extend(execution::plan_fire(&self.view, &id, &self.settings.ip, true).misfire);
                // Freed as never run; the fire of its instant is this misfire.
                self.void(
                    &execution_id,
                    "its instance took other work before the fire instant",
                    Release::Unrun,
                    false,
                    env,
                    out,
                );
                if let Some(local) = self.locals.get_mut(&id) {
                    local.claimed_fire = self.executions.get(&execution_id).map(|e| e.fire_time);
                }
                continue;
            }
            if misfire_on {
                misfire.extend(self.runnable_now(&id));
            }
            if let Some(local) = self.locals.get_mut(&id) {
                local.held = None;
            }
            let exec = self.executions.get_mut(&execution_id).expect("a held run");
            exec.started = env.now;
            exec.started_at = SystemTime::from(env.wall);
            self.deliver(&execution_id, env, out);
        }
        self.flag_misfire(misfire, env, out);
    }

    /// Whether a resharding is pending or not yet seen whole: the `necessary` flag (set by
    /// ElasticJob members; its leader reshards at its next fire), a sharding being written under
    /// `processing`, or changed owners not read back yet.
    pub(super) fn resharding_pending(&self) -> bool {
        self.view.necessary
            || self.view.processing
            || self.owners_reread
            || self.in_flight(|p| matches!(p, Pending::ReadOwners))
    }

    /// Holds a fire for idle instance `id` while a resharding is pending, unless `id` has
    /// failover items to run (ElasticJob runs those without waiting for the sharding). An
    /// ElasticJob non-leader blocks the same way before it runs: the fire then runs the items
    /// the new sharding gives it, so an item moved by that sharding is neither run by its old
    /// owner nor skipped by its new one. One fire is held per instance; later ones while it
    /// waits are the same run (ElasticJob's blocked thread skips them too). Returns whether
    /// the fire is held (or merged into the one held).
    pub(super) fn defer_if_resharding(
        &mut self,
        id: &str,
        source: Source,
        fire_time: DateTime<Utc>,
        env: &Env,
    ) -> bool {
        let failover = self.view.config.as_ref().is_some_and(|c| c.failover);
        if !self.resharding_pending() || (failover && !self.view.failover_items_of(id).is_empty()) {
            return false;
        }
        let Some(local) = self.locals.get_mut(id) else {
            return false;
        };
        if local.deferred.is_none() {
            info!(job = %self.name, instance = %id, source = ?source,
                  "fire held until the pending resharding is written");
            local.deferred = Some(DeferredFire {
                source,
                fire_time,
                since: env.now,
            });
        } else {
            debug!(job = %self.name, instance = %id, source = ?source,
                   "fire merged into the one held for the pending resharding");
        }
        true
    }

    /// Once the pending resharding is written and read, each held fire runs on its instance's
    /// new items. An instance busy by then (a failover claim took it) keeps its fire until it
    /// is idle; one that may not be given work now notes a miss (a catch-up follows, as for a
    /// fire at such a moment); one gone, shutting down or on a disabled server drops it.
    pub(super) fn reconcile_deferred_fires(&mut self, env: &Env, out: &mut Vec<Action>) {
        if self.resharding_pending() {
            return;
        }
        let held: Vec<String> = self
            .locals
            .iter()
            .filter(|(_, l)| l.deferred.is_some())
            .map(|(id, _)| id.clone())
            .collect();
        if held.is_empty() {
            return;
        }
        let ready = self.idle_locals(env);
        let enabled = self.view.server_enabled(&self.settings.ip);
        for id in held {
            let Some(local) = self.locals.get_mut(&id) else {
                continue;
            };
            let wanted = local.live() && !local.shutting_down && enabled;
            if wanted && !local.idle() {
                continue;
            }
            let Some(fire) = local.deferred.take() else {
                continue;
            };
            let waited_ms = env.now.saturating_duration_since(fire.since).as_millis() as u64;
            if !wanted {
                info!(job = %self.name, instance = %id, waited_ms,
                      "held fire dropped: the instance may no longer run (gone, shutting down or its server disabled)");
                continue;
            }
            if !ready.contains(&id) {
                local.missed = true;
                warn!(job = %self.name, instance = %id, waited_ms,
                      "held fire missed: no lease may be granted now; a catch-up follows once it can");
                continue;
            }
            let run = self.runnable_now(&id);
            info!(job = %self.name, instance = %id, source = ?fire.source, items = ?run, waited_ms,
                  "held fire runs on the resharded items");
            if !run.is_empty() {
                self.start_execution(&id, run, fire.source, fire.fire_time, Vec::new(), env, out);
            }
        }
    }

    /// What a fire would run on `id` now: ElasticJob's execution set, minus items an action
    /// in flight touches.
    pub(super) fn runnable_now(&self, id: &str) -> Vec<i32> {
        let executing = self.executing();
        execution::plan_fire(&self.view, id, &self.settings.ip, false)
            .run
            .into_iter()
            .filter(|i| !self.locked.contains(i) && !executing.contains(i))
            .collect()
    }

    /// Items of this sidecar's executions in flight (taken back ones included, until their
    /// worker has stopped): never started again meanwhile, whatever the registry shows yet.
    pub(super) fn executing(&self) -> BTreeSet<i32> {
        self.executions
            .values()
            .flat_map(|e| e.items.iter().copied())
            .collect()
    }

    // ----- starting ---------------------------------------------------------------------------

    /// The trace of a new execution of `source` on local instance `id`: a MANUAL one continues
    /// the trace of the traced `TriggerJob` call that asked for it, if one is waiting for `id`.
    pub(super) fn trace_for(
        &mut self,
        id: &str,
        source: Source,
        execution_id: &str,
        env: &Env,
    ) -> TraceContext {
        let parent = match (source, self.manual_parent.as_mut()) {
            (Source::Manual, Some(m)) if env.now < m.until => {
                m.instances.remove(id).then(|| m.parent.clone())
            }
            _ => None,
        };
        if self
            .manual_parent
            .as_ref()
            .is_some_and(|m| m.instances.is_empty() || env.now >= m.until)
        {
            self.manual_parent = None;
        }
        TraceContext::for_execution(execution_id, parent.as_ref())
    }

    /// Starts `items` on local instance `id`: writes their `running` nodes (with `extra` ops in
    /// the same multi) when monitorExecution is on, then sends the `Trigger`. Returns the new
    /// execution's id.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_execution(
        &mut self,
        id: &str,
        items: Vec<i32>,
        source: Source,
        fire_time: DateTime<Utc>,
        extra: Vec<Op>,
        env: &Env,
        out: &mut Vec<Action>,
    ) -> Option<String> {
        let config = self.view.config.as_ref()?;
        let monitored = config.monitor_execution;
        let timeout = match self.view.extras.execution_timeout_seconds {
            0 => None,
            s => Some(Duration::from_secs(u64::from(s))),
        };
        let execution_id = self.next_execution_id(env);
        let trace = self.trace_for(id, source, &execution_id, env);
        let exec = Execution::new(
            execution_id.clone(),
            id.to_string(),
            source,
            items.iter().copied().collect(),
            fire_time,
            env.now,
            SystemTime::from(env.wall),
            timeout,
            monitored,
            self.generation,
            trace,
        );
        if !monitored {
            // No `running` nodes (ElasticJob's monitorExecution off): the token is the owner
            // node's mzxid, which grows with every change of hands.
            let mut exec = exec;
            for i in &items {
                if let Some((_, stat)) = self.view.items.get(i).and_then(|it| it.owner.as_ref()) {
                    exec.fencing_tokens.insert(*i, stat.mzxid);
                }
            }
            if extra.is_empty() {
                self.executions.insert(execution_id.clone(), Box::new(exec));
                self.locals
                    .get_mut(id)
                    .expect("a live local")
                    .executions
                    .push(execution_id.clone());
                self.deliver(&execution_id, env, out);
                return Some(execution_id);
            }
            self.executions.insert(execution_id.clone(), Box::new(exec));
            self.locals
                .get_mut(id)
                .expect("a live local")
                .executions
                .push(execution_id.clone());
            self.commit(
                Pending::Start {
                    execution_id: execution_id.clone(),
                },
                extra,
                &items,
                out,
            );
            return Some(execution_id);
        }
        let Some(mut ops) = failover::start_ops(&self.view, &self.paths, id, &items) else {
            warn!(job = %self.name, items = ?items, "an item has no sharding node yet; not started");
            return None;
        };
        ops.extend(extra);
        self.executions.insert(execution_id.clone(), Box::new(exec));
        self.locals
            .get_mut(id)
            .expect("a live local")
            .executions
            .push(execution_id.clone());
        self.commit(
            Pending::Start {
                execution_id: execution_id.clone(),
            },
            ops,
            &items,
            out,
        );
        Some(execution_id)
    }

    /// The fencing tokens and item epochs a start (or claim) left, from its results.
    pub(super) fn tokens_of(
        &self,
        items: &[i32],
        ops: &[Op],
        results: &[OpResult],
    ) -> (BTreeMap<i32, i64>, BTreeMap<i32, i32>) {
        let mut tokens = BTreeMap::new();
        let mut versions = BTreeMap::new();
        // Each item's two paths, formatted once (not once per write of the multi-op).
        let mut running = HashMap::with_capacity(items.len());
        let mut fence = HashMap::with_capacity(items.len());
        for i in items {
            running.entry(self.paths.item_running(*i)).or_insert(*i);
            fence.entry(self.paths.item(*i)).or_insert(*i);
        }
        for (op, result) in ops.iter().zip(results) {
            let (Op::SetData { path, .. }, OpResult::DataSet { stat }) = (op, result) else {
                continue;
            };
            if let Some(i) = running.get(path) {
                tokens.insert(*i, stat.czxid);
            } else if let Some(i) = fence.get(path) {
                versions.insert(*i, stat.version);
                tokens.entry(*i).or_insert(stat.mzxid);
            }
        }
        (tokens, versions)
    }

    pub(super) fn on_started(
        &mut self,
        execution_id: &str,
        ops: &[Op],
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let Some(exec) = self.executions.get(execution_id) else {
            return;
        };
        let items: Vec<i32> = exec.items.iter().copied().collect();
        let instance = exec.instance_id.clone();
        let held = self.is_held(execution_id);
        self.unlock(&items);
        match result {
            Ok(results) => {
                let (tokens, versions) = self.tokens_of(&items, ops, &results);
                let exec = self.executions.get_mut(execution_id).expect("checked");
                if exec.monitored {
                    exec.fencing_tokens = tokens;
                    exec.note(
                        SystemTime::from(env.wall),
                        "running nodes written",
                        vec![("items", format!("{items:?}"))],
                    );
                }
                exec.versions = versions;
                if held {
                    return; // sent at its instant (`reconcile_held`)
                }
                self.deliver(execution_id, env, out);
            }
            Err(e) => {
                self.executions.remove(execution_id);
                if let Some(local) = self.locals.get_mut(&instance) {
                    local.drop_execution(execution_id);
                    if held {
                        // A claim ahead refused: the fire decides at its instant, on a fresh
                        // read, as it would have without the claim.
                        local.claimed_fire = None;
                    } else {
                        // The view was stale (or the session in trouble): a catch-up decides
                        // again on a fresh read.
                        local.missed = true;
                    }
                }
                self.write_failed("starting an execution", &e, env);
            }
        }
    }

    /// Sends the `Trigger` of a started execution, with a fresh `Lease` first when the current
    /// one is a third used up, so the trigger never reaches a worker whose lease runs out on
    /// the way. If no lease may be granted, the execution is given back instead.
    pub(super) fn deliver(&mut self, execution_id: &str, env: &Env, out: &mut Vec<Action>) {
        let valid_for = self.settings.lease;
        let Some(exec) = self.executions.get(execution_id) else {
            return;
        };
        if exec.void.is_some() {
            // Taken back while its start was in flight (self-fencing on waking from a pause, a
            // lapse, an expiry): it is never sent. Its worker never had it, so its release goes
            // on at once, with the epochs the start left; the items may be someone else's by now.
            debug!(job = %self.name, execution = %execution_id,
                   "started after it was taken back: trigger not sent");
            return;
        }
        let instance = exec.instance_id.clone();
        let live = self
            .locals
            .get(&instance)
            .is_some_and(|l| l.live() && !l.withheld);
        if !live {
            self.void(
                execution_id,
                "the worker went away before its trigger was sent",
                Release::Abandoned,
                false,
                env,
                out,
            );
            return;
        }
        let fresh = self.locals[&instance].lease.remaining(env.now, valid_for) > valid_for * 2 / 3;
        if !fresh {
            if !self.may_grant(env) {
                if let Some(local) = self.locals.get_mut(&instance) {
                    local.missed = true;
                }
                self.void(
                    execution_id,
                    "no lease could be granted to send the trigger under",
                    Release::Abandoned,
                    false,
                    env,
                    out,
                );
                return;
            }
            self.grant(&instance, env, out);
        }
        let params = self.parameters();
        let (job_parameter, total) = self.view.config.as_ref().map_or((String::new(), 0), |c| {
            (c.job_parameter.clone(), c.sharding_total_count)
        });
        let local = &self.locals[&instance];
        let (stream, epoch) = (local.stream, local.lease.epoch());
        let exec = self
            .executions
            .get_mut(execution_id)
            .expect("checked above");
        exec.lease_epoch = epoch;
        exec.delivered = true;
        let items: Vec<i32> = exec.items.iter().copied().collect();
        exec.task_id = task_id(&self.name, &items, &instance);
        exec.note(
            SystemTime::from(env.wall),
            "trigger sent",
            vec![("instance", instance.clone())],
        );
        let trigger = Trigger {
            execution_id: execution_id.to_string(),
            task_id: exec.task_id.clone(),
            items: items
                .iter()
                .map(|i| (*i, params.get(i).cloned().unwrap_or_default()))
                .collect(),
            job_parameter,
            sharding_total_count: total,
            source: exec.source,
            fire_time: exec.fire_time,
            fencing_tokens: exec.fencing_tokens.clone(),
            traceparent: exec.trace.traceparent(),
            tracestate: exec.trace.tracestate.clone(),
        };
        let latency = (env.wall - exec.fire_time).to_std().unwrap_or_default();
        info!(job = %self.name, execution = %execution_id, instance = %instance, items = ?items,
              source = exec.source.as_str(), "execution started");
        out.push(Action::TrackExecution {
            id: execution_id.to_string(),
        });
        out.push(Action::Send {
            stream,
            event: WorkerEvent::Trigger(Box::new(trigger)),
        });
        out.push(Action::Observe(Observation::TriggerSent {
            source: exec.source,
            items,
            latency,
        }));
    }
}
