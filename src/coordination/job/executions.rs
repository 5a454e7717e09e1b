//! Executions: what a fire runs, how a run starts (its `running` nodes, then its `Trigger`),
//! how it ends (answers, declines), and how the sidecar takes items back (revoke, timeout,
//! lease lapse, self-fencing) without ever letting two workers run one item at once.
//!
//! An item is started only by a conditional write that proves nobody runs it; it is given
//! back only once its worker has certainly stopped: it answered or declined it, or its lease
//! ran out. A worker that was told `Revoke` gets no lease renewal until it acknowledges, so
//! that moment always comes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use tracing::{debug, info, warn};

use super::state::{JobState, Pending};
use super::{Action, Env, LatchKey, Observation, Reply, ReplyId};
use crate::coordination::events::{Source, Trigger, WorkerEvent};
use crate::coordination::execution::{
    self, new_execution_id, Execution, Finished, ItemOutcome, Void,
};
use crate::coordination::failover::{self, Release};
use crate::coordination::observer::ExecutionRecord;
use crate::coordination::CoordError;
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
        let ids: Vec<String> = self
            .locals
            .iter()
            .filter(|(_, l)| l.live() && !l.shutting_down)
            .map(|(id, _)| id.clone())
            .collect();
        let healthy = self.may_grant(env);
        let mut misfire = BTreeSet::new();
        for id in ids {
            let busy = self.locals.get(&id).is_some_and(|l| l.execution.is_some());
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
            let run = self.runnable_now(&id);
            if !run.is_empty() {
                self.start_execution(&id, run, source, fire_time, Vec::new(), env, out);
            }
        }
        if !misfire.is_empty()
            && self.connected(env)
            && !self.in_flight(|p| matches!(p, Pending::MisfireFlags))
        {
            let items: Vec<i32> = misfire.into_iter().collect();
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
    }

    /// What a fire would run on `id` now: ElasticJob's execution set, minus items an action
    /// in flight touches.
    fn runnable_now(&self, id: &str) -> Vec<i32> {
        execution::plan_fire(&self.view, id, &self.settings.ip, false)
            .run
            .into_iter()
            .filter(|i| !self.locked.contains(i))
            .collect()
    }

    // ----- starting ---------------------------------------------------------------------------

    /// Starts `items` on local instance `id`: writes their `running` nodes (with `extra` ops in
    /// the same multi) when monitorExecution is on, then sends the `Trigger`.
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
    ) {
        let Some(config) = self.view.config.as_ref() else {
            return;
        };
        let monitored = config.monitor_execution;
        let timeout = match self.view.extras.execution_timeout_seconds {
            0 => None,
            s => Some(Duration::from_secs(u64::from(s))),
        };
        let execution_id = new_execution_id();
        let exec = Execution {
            id: execution_id.clone(),
            instance_id: id.to_string(),
            source,
            items: items.iter().copied().collect(),
            fire_time,
            started: env.now,
            started_at: SystemTime::now(),
            timeout,
            monitored,
            generation: self.generation,
            lease_epoch: 0,
            delivered: false,
            fencing_tokens: BTreeMap::new(),
            versions: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            committing: BTreeSet::new(),
            uncertain: BTreeMap::new(),
            releasing: BTreeSet::new(),
            void: None,
        };
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
                self.executions.insert(execution_id.clone(), exec);
                self.locals.get_mut(id).expect("a live local").execution =
                    Some(execution_id.clone());
                self.deliver(&execution_id, env, out);
                return;
            }
            self.executions.insert(execution_id.clone(), exec);
            self.locals.get_mut(id).expect("a live local").execution = Some(execution_id.clone());
            self.commit(Pending::Start { execution_id }, extra, &items, out);
            return;
        }
        let Some(mut ops) = failover::start_ops(&self.view, &self.paths, id, &items) else {
            warn!(job = %self.name, items = ?items, "an item has no sharding node yet; not started");
            return;
        };
        ops.extend(extra);
        self.executions.insert(execution_id.clone(), exec);
        self.locals.get_mut(id).expect("a live local").execution = Some(execution_id.clone());
        self.commit(Pending::Start { execution_id }, ops, &items, out);
    }

    /// The fencing tokens and item epochs a start (or claim) left, from its results.
    fn tokens_of(
        &self,
        items: &[i32],
        ops: &[Op],
        results: &[OpResult],
    ) -> (BTreeMap<i32, i64>, BTreeMap<i32, i32>) {
        let mut tokens = BTreeMap::new();
        let mut versions = BTreeMap::new();
        for (op, result) in ops.iter().zip(results) {
            let (Op::SetData { path, .. }, OpResult::DataSet { stat }) = (op, result) else {
                continue;
            };
            for i in items {
                if *path == self.paths.item_running(*i) {
                    tokens.insert(*i, stat.czxid);
                } else if *path == self.paths.item(*i) {
                    versions.insert(*i, stat.version);
                    tokens.entry(*i).or_insert(stat.mzxid);
                }
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
        self.unlock(&items);
        match result {
            Ok(results) => {
                let (tokens, versions) = self.tokens_of(&items, ops, &results);
                let exec = self.executions.get_mut(execution_id).expect("checked");
                if exec.monitored {
                    exec.fencing_tokens = tokens;
                }
                exec.versions = versions;
                self.deliver(execution_id, env, out);
            }
            Err(e) => {
                self.executions.remove(execution_id);
                if let Some(local) = self.locals.get_mut(&instance) {
                    local.execution = None;
                    // The view was stale (or the session in trouble): a catch-up decides again
                    // on a fresh read.
                    local.missed = true;
                }
                self.write_failed("starting an execution", &e, env);
            }
        }
    }

    /// Sends the `Trigger` of a started execution, with a fresh `Lease` first when the current
    /// one is a third used up, so the trigger never reaches a worker whose lease runs out on
    /// the way. If no lease may be granted, the execution is given back instead.
    fn deliver(&mut self, execution_id: &str, env: &Env, out: &mut Vec<Action>) {
        let valid_for = self.settings.lease;
        let Some(exec) = self.executions.get(execution_id) else {
            return;
        };
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
        let trigger = Trigger {
            execution_id: execution_id.to_string(),
            task_id: task_id(&self.name, &items, &instance),
            items: items
                .iter()
                .map(|i| (*i, params.get(i).cloned().unwrap_or_default()))
                .collect(),
            job_parameter,
            sharding_total_count: total,
            source: exec.source,
            fire_time: exec.fire_time,
            fencing_tokens: exec.fencing_tokens.clone(),
        };
        let latency = (env.wall - exec.fire_time).to_std().unwrap_or_default();
        info!(job = %self.name, execution = %execution_id, instance = %instance, items = ?items,
              source = exec.source.as_str(), "execution started");
        out.push(Action::TrackExecution {
            id: execution_id.to_string(),
        });
        out.push(Action::Send {
            stream,
            event: WorkerEvent::Trigger(trigger),
        });
        out.push(Action::Observe(Observation::TriggerSent {
            source: exec.source,
            items,
            latency,
        }));
    }

    // ----- answers ----------------------------------------------------------------------------

    /// Whether the state holds `execution_id` (the driver answers for others from memory).
    pub(crate) fn has_execution(&self, execution_id: &str) -> bool {
        self.executions.contains_key(execution_id)
    }

    /// The checks every answer and decline passes first.
    fn answerable(
        &self,
        instance_id: &str,
        execution_id: &str,
        items: &[i32],
    ) -> Result<&Execution, CoordError> {
        let exec = self
            .executions
            .get(execution_id)
            .ok_or_else(|| CoordError::unknown_execution(execution_id))?;
        if exec.instance_id != instance_id {
            return Err(CoordError::PermissionDenied(format!(
                "execution {execution_id} belongs to instance {}, not {instance_id}",
                exec.instance_id
            )));
        }
        if let Some(item) = items.iter().find(|i| !exec.items.contains(i)) {
            return Err(CoordError::InvalidArgument {
                field: "items".into(),
                message: format!(
                    "item {item} is not part of execution {execution_id} (its items are {:?})",
                    exec.items
                ),
            });
        }
        Ok(exec)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_answer(
        &mut self,
        reply: ReplyId,
        instance_id: &str,
        execution_id: &str,
        outcomes: Vec<(i32, ItemOutcome)>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let items: Vec<i32> = outcomes.iter().map(|(i, _)| *i).collect();
        let exec = match self.answerable(instance_id, execution_id, &items) {
            Ok(exec) => exec,
            Err(e) => return self.reply(reply, Reply::Answered(Err(e)), out),
        };
        if let Some(void) = &exec.void {
            let refused = CoordError::FailedPrecondition(format!(
                "execution {execution_id} was taken back ({}); its answers are refused",
                void.reason
            ));
            // The worker answered, so it has stopped: that acknowledges a revoke.
            self.acknowledged(execution_id, env);
            return self.reply(reply, Reply::Answered(Err(refused)), out);
        }
        if items
            .iter()
            .any(|i| exec.committing.contains(i) || exec.uncertain.contains_key(i))
        {
            let busy = CoordError::Unavailable(format!(
                "an earlier answer for execution {execution_id} is still being recorded; send this one again"
            ));
            return self.reply(reply, Reply::Answered(Err(busy)), out);
        }
        if let Some((item, _)) = outcomes
            .iter()
            .find(|(i, _)| matches!(exec.outcomes.get(i), Some(ItemOutcome::Revoked(_))))
        {
            let refused = CoordError::FailedPrecondition(format!(
                "item {item} of execution {execution_id} was taken back; its answer is refused"
            ));
            return self.reply(reply, Reply::Answered(Err(refused)), out);
        }
        let fresh: Vec<(i32, ItemOutcome)> = outcomes
            .into_iter()
            .filter(|(i, _)| !exec.outcomes.contains_key(i))
            .collect();
        if fresh.is_empty() {
            return self.reply(reply, Reply::Answered(Ok(())), out); // a repeated answer
        }
        if let Some(item) = items_taken_away(exec, &self.view, &fresh) {
            // Its `running` node is gone or another's: the item was handed over meanwhile.
            let reason = format!("item {item} was handed over while it ran");
            self.void(execution_id, &reason, Release::None, true, out);
            let refused = CoordError::FailedPrecondition(format!(
                "execution {execution_id} no longer holds item {item} (it was handed over while it ran); the answer is refused"
            ));
            return self.reply(reply, Reply::Answered(Err(refused)), out);
        }
        if !self.connected(env) {
            let unavailable = CoordError::Unavailable(
                "ZooKeeper is not connected, so the answer cannot be recorded now; send it again"
                    .into(),
            );
            return self.reply(reply, Reply::Answered(Err(unavailable)), out);
        }
        let items: Vec<i32> = fresh.iter().map(|(i, _)| *i).collect();
        let ops = failover::finish_ops(
            &self.view,
            &self.paths,
            instance_id,
            &items,
            &exec.versions,
            exec.monitored,
        );
        let outcome = fresh
            .iter()
            .find(|(_, o)| !matches!(o, ItemOutcome::Completed))
            .map_or(ItemOutcome::Completed, |(_, o)| o.clone());
        let exec = self.executions.get_mut(execution_id).expect("checked");
        exec.committing.extend(items.iter().copied());
        if ops.is_empty() {
            // Nothing to write (monitorExecution off): recorded at once.
            self.record_outcomes(execution_id, &items, &outcome, out);
            return self.reply(reply, Reply::Answered(Ok(())), out);
        }
        self.commit(
            Pending::Finish {
                execution_id: execution_id.to_string(),
                items: items.clone(),
                outcome,
                reply,
            },
            ops,
            &items,
            out,
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_finished(
        &mut self,
        execution_id: &str,
        items: Vec<i32>,
        outcome: ItemOutcome,
        reply: ReplyId,
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        self.unlock(&items);
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        for i in &items {
            exec.committing.remove(i);
        }
        let (instance, monitored, versions) = (
            exec.instance_id.clone(),
            exec.monitored,
            exec.versions.clone(),
        );
        let _ = (instance, monitored, versions);
        match result {
            Ok(_) => {
                self.record_outcomes(execution_id, &items, &outcome, out);
                self.reply(reply, Reply::Answered(Ok(())), out);
            }
            Err(e) if e.is_connection_problem() && !matches!(e, RegError::SessionExpired) => {
                let exec = self.executions.get_mut(execution_id).expect("checked");
                for i in &items {
                    exec.uncertain.insert(*i, outcome.clone());
                }
                self.write_failed("recording an answer", &e, env);
                let unknown = CoordError::Unavailable(format!(
                    "ZooKeeper did not confirm the answer for execution {execution_id} ({e}); send it again"
                ));
                self.reply(reply, Reply::Answered(Err(unknown)), out);
            }
            Err(e) => {
                // The fence refused it: the items were taken from this execution meanwhile
                // (or its session is gone). The execution is void.
                self.write_failed("recording an answer", &e, env);
                let reason = format!("its items were taken back while it ran ({e})");
                self.void(execution_id, &reason, Release::None, true, out);
                let refused = CoordError::FailedPrecondition(format!(
                    "execution {execution_id} no longer holds its items: {reason}; the answer is refused"
                ));
                self.reply(reply, Reply::Answered(Err(refused)), out);
            }
        }
    }

    /// Answers whose write had no reply: after a fresh read, an item whose `running` node is
    /// gone was recorded (nobody else removes it while this instance is registered); one whose
    /// node still carries this execution's token was not.
    pub(super) fn resolve_uncertain(&mut self, out: &mut Vec<Action>) {
        self.refresh_view();
        let ids: Vec<String> = self
            .executions
            .iter()
            .filter(|(_, e)| !e.uncertain.is_empty())
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let exec = &self.executions[&id];
            let mut recorded = Vec::new();
            let mut not = Vec::new();
            for (i, outcome) in &exec.uncertain {
                let ours = self
                    .view
                    .items
                    .get(i)
                    .and_then(|it| it.running.as_ref())
                    .is_some_and(|(_, stat)| exec.fencing_tokens.get(i) == Some(&stat.czxid));
                if ours {
                    not.push(*i);
                } else {
                    recorded.push((*i, outcome.clone()));
                }
            }
            let exec = self.executions.get_mut(&id).expect("listed");
            for i in not {
                exec.uncertain.remove(&i);
            }
            for (i, _) in &recorded {
                exec.uncertain.remove(i);
            }
            for (i, outcome) in recorded {
                self.record_outcomes(&id, &[i], &outcome, out);
            }
        }
    }

    fn record_outcomes(
        &mut self,
        execution_id: &str,
        items: &[i32],
        outcome: &ItemOutcome,
        out: &mut Vec<Action>,
    ) {
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        for i in items {
            exec.committing.remove(i);
            if let ItemOutcome::Failed(error) = outcome {
                warn!(job = %self.name, execution = %execution_id, item = *i, error = %error, "item failed");
            }
            exec.outcomes.insert(*i, outcome.clone());
        }
        if exec.is_done() {
            self.finish_execution(execution_id, out);
        }
    }

    // ----- declines ---------------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_decline(
        &mut self,
        reply: ReplyId,
        instance_id: &str,
        execution_id: &str,
        items: Vec<i32>,
        reason: &str,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let exec = match self.answerable(instance_id, execution_id, &items) {
            Ok(exec) => exec,
            Err(CoordError::NotFound(_)) => return self.reply(reply, Reply::Answered(Ok(())), out),
            Err(e) => return self.reply(reply, Reply::Answered(Err(e)), out),
        };
        let items: Vec<i32> = if items.is_empty() {
            exec.items.iter().copied().collect()
        } else {
            items
        };
        let open: Vec<i32> = exec
            .unreleased()
            .into_iter()
            .filter(|i| items.contains(i))
            .collect();
        let reason = if reason.is_empty() {
            "declined by the worker".to_string()
        } else {
            format!("declined by the worker: {reason}")
        };
        info!(job = %self.name, execution = %execution_id, instance = %instance_id, items = ?open, reason = %reason, "items declined");
        if exec.void.is_some() {
            self.acknowledged(execution_id, env);
        } else if open.len() == exec.unreleased().len() && exec.committing.is_empty() {
            self.void(execution_id, &reason, Release::Abandoned, false, out);
        } else if !open.is_empty() && self.connected(env) {
            self.release_items(execution_id, &open, Release::Abandoned, &reason, out);
        }
        self.reply(reply, Reply::Answered(Ok(())), out);
    }

    /// The worker has stopped the items of a revoked execution: no need to wait for its lease.
    fn acknowledged(&mut self, execution_id: &str, env: &Env) {
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        if let Some(void) = exec.void.as_mut() {
            void.waiting_ack = false;
        }
        let instance = exec.instance_id.clone();
        if let Some(local) = self.locals.get_mut(&instance) {
            if let Some(gone) = local.gone.as_mut() {
                gone.release_at = gone.release_at.min(env.now);
            }
        }
    }

    // ----- taking items back ------------------------------------------------------------------

    /// Takes the items of an execution back: answers are refused from now on, and the items are
    /// released as `release` says once its worker has certainly stopped (see
    /// [`JobState::reconcile_executions`]). `notify` sends the worker a `Revoke`.
    pub(super) fn void(
        &mut self,
        execution_id: &str,
        reason: &str,
        release: Release,
        notify: bool,
        out: &mut Vec<Action>,
    ) {
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        if exec.void.is_some() {
            return; // the first reason stands
        }
        exec.void = Some(Void {
            reason: reason.to_string(),
            release,
            waiting_ack: false,
        });
        let items = exec.unreleased();
        let instance = exec.instance_id.clone();
        let delivered = exec.delivered;
        warn!(job = %self.name, execution = %execution_id, instance = %instance, items = ?items, reason,
              "execution taken back");
        if notify && delivered {
            if let Some(local) = self.locals.get(&instance).filter(|l| l.gone.is_none()) {
                out.push(Action::Send {
                    stream: local.stream,
                    event: WorkerEvent::Revoke {
                        items: items.clone(),
                        reason: reason.to_string(),
                    },
                });
            }
        }
        if delivered {
            out.push(Action::Observe(Observation::Revoked {
                items,
                reason: reason.to_string(),
            }));
        }
        if release == Release::None {
            self.release_done(execution_id, out);
        }
    }

    /// [`JobState::void`] with a `Revoke` that the worker must acknowledge: its lease is not
    /// renewed until it declines the items (or answers), so it stops in any case.
    pub(super) fn revoke(
        &mut self,
        execution_id: &str,
        reason: &str,
        release: Release,
        out: &mut Vec<Action>,
    ) {
        let Some(exec) = self.executions.get(execution_id) else {
            return;
        };
        if exec.void.is_some() {
            return;
        }
        let (instance, delivered) = (exec.instance_id.clone(), exec.delivered);
        self.void(execution_id, reason, release, true, out);
        if delivered && release != Release::None {
            if let Some(void) = self
                .executions
                .get_mut(execution_id)
                .and_then(|e| e.void.as_mut())
            {
                void.waiting_ack = true;
            }
            if let Some(local) = self.locals.get_mut(&instance) {
                local.withheld = true;
            }
        }
    }

    /// Void executions whose items can be released now: their worker acknowledged, or its
    /// lease ran out, or it never got the trigger. A gone instance's items go with its leave.
    fn release_due(&mut self, env: &Env, out: &mut Vec<Action>) {
        let due: Vec<(String, Vec<i32>, Release, String)> = self
            .executions
            .iter()
            .filter_map(|(id, e)| {
                let void = e.void.as_ref()?;
                let local = self.locals.get(&e.instance_id);
                if local.is_some_and(|l| l.gone.is_some()) || void.waiting_ack {
                    return None;
                }
                let items = e.unreleased();
                (!items.is_empty()).then(|| (id.clone(), items, void.release, void.reason.clone()))
            })
            .collect();
        for (id, items, release, reason) in due {
            if items.iter().any(|i| self.locked.contains(i)) || !self.connected(env) {
                continue;
            }
            self.release_items(&id, &items, release, &reason, out);
        }
    }

    /// Writes the release of `items` of an execution.
    fn release_items(
        &mut self,
        execution_id: &str,
        items: &[i32],
        release: Release,
        reason: &str,
        out: &mut Vec<Action>,
    ) {
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        let ops = failover::release_ops(
            &self.view,
            &self.paths,
            &exec.instance_id,
            items,
            &exec.versions,
            exec.monitored,
            release,
        );
        exec.releasing.extend(items.iter().copied());
        if ops.is_empty() {
            let outcome = ItemOutcome::Revoked(reason.to_string());
            for i in items {
                exec.releasing.remove(i);
                exec.outcomes.insert(*i, outcome.clone());
            }
            if exec.is_done() {
                self.finish_execution(execution_id, out);
            }
            return;
        }
        self.commit(
            Pending::Release {
                execution_id: execution_id.to_string(),
                items: items.to_vec(),
            },
            ops,
            items,
            out,
        );
    }

    pub(super) fn on_released(
        &mut self,
        execution_id: &str,
        items: Vec<i32>,
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        self.unlock(&items);
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        for i in &items {
            exec.releasing.remove(i);
        }
        let reason = exec.void.as_ref().map_or_else(
            || "declined by the worker".to_string(),
            |v| v.reason.clone(),
        );
        match result {
            Ok(_) => {
                let exec = self.executions.get_mut(execution_id).expect("checked");
                for i in &items {
                    exec.outcomes
                        .insert(*i, ItemOutcome::Revoked(reason.clone()));
                }
                if exec.is_done() {
                    self.finish_execution(execution_id, out);
                }
            }
            Err(e) if e.is_connection_problem() && !matches!(e, RegError::SessionExpired) => {
                self.write_failed("releasing items", &e, env);
            }
            Err(e) => {
                // Refused: someone released them already (the leader, a new session).
                self.write_failed("releasing items", &e, env);
                let exec = self.executions.get_mut(execution_id).expect("checked");
                for i in &items {
                    exec.outcomes
                        .insert(*i, ItemOutcome::Revoked(reason.clone()));
                }
                if exec.is_done() {
                    self.finish_execution(execution_id, out);
                }
            }
        }
    }

    /// A void execution with nothing to write: its open items are over.
    fn release_done(&mut self, execution_id: &str, out: &mut Vec<Action>) {
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        let reason = exec
            .void
            .as_ref()
            .map(|v| v.reason.clone())
            .unwrap_or_default();
        for i in exec.unreleased() {
            exec.outcomes
                .insert(i, ItemOutcome::Revoked(reason.clone()));
        }
        if exec.is_done() {
            self.finish_execution(execution_id, out);
        }
    }

    /// Every item has an outcome: free the instance and tell the observer.
    fn finish_execution(&mut self, execution_id: &str, out: &mut Vec<Action>) {
        let Some(exec) = self.executions.remove(execution_id) else {
            return;
        };
        if let Some(local) = self.locals.get_mut(&exec.instance_id) {
            if local.execution.as_deref() == Some(execution_id) {
                local.execution = None;
            }
            if !self
                .executions
                .values()
                .any(|e| e.instance_id == exec.instance_id)
            {
                local.withheld = false;
            }
        }
        let failed = exec
            .outcomes
            .values()
            .filter(|o| matches!(o, ItemOutcome::Failed(_)))
            .count();
        info!(job = %self.name, execution = %execution_id, instance = %exec.instance_id, items = ?exec.items,
              source = exec.source.as_str(), failed, elapsed_ms = exec.started.elapsed().as_millis() as u64,
              "execution finished");
        let revoked = exec.outcomes.values().find_map(|o| match o {
            ItemOutcome::Revoked(reason) => Some(reason.clone()),
            _ => None,
        });
        if exec.delivered {
            out.push(Action::Observe(Observation::Finished(Box::new(
                ExecutionRecord {
                    job: self.name.clone(),
                    execution_id: exec.id.clone(),
                    instance_id: exec.instance_id.clone(),
                    source: exec.source,
                    started_at: exec.started_at,
                    duration: exec.started.elapsed(),
                    items: exec.outcomes.clone(),
                },
            ))));
        }
        out.push(Action::ForgetExecution {
            id: exec.id,
            finished: Finished {
                instance_id: exec.instance_id,
                revoked,
            },
        });
    }

    /// Forgets an execution of an instance that has left (its items went with the leave).
    pub(super) fn drop_execution(&mut self, execution_id: &str, out: &mut Vec<Action>) {
        if let Some(exec) = self.executions.get_mut(execution_id) {
            if exec.void.is_none() {
                exec.void = Some(Void {
                    reason: "the worker left".into(),
                    release: Release::None,
                    waiting_ack: false,
                });
            }
            let reason = exec
                .void
                .as_ref()
                .map(|v| v.reason.clone())
                .unwrap_or_default();
            for i in exec.items.clone() {
                exec.outcomes
                    .entry(i)
                    .or_insert_with(|| ItemOutcome::Revoked(reason.clone()));
            }
            self.finish_execution(execution_id, out);
        }
    }

    /// Timeouts, releases, and what the session's health demands of executions.
    pub(super) fn reconcile_executions(&mut self, env: &Env, out: &mut Vec<Action>) {
        let expired: Vec<(String, Duration)> = self
            .executions
            .values()
            .filter(|e| e.void.is_none() && e.delivered)
            .filter_map(|e| {
                e.timeout
                    .filter(|t| env.now.saturating_duration_since(e.started) > *t)
                    .map(|t| (e.id.clone(), t))
            })
            .collect();
        for (id, timeout) in expired {
            let reason = format!(
                "execution timeout: not answered within {} s",
                timeout.as_secs()
            );
            self.revoke(&id, &reason, Release::Failed, out);
        }
        self.release_due(env, out);
    }

    /// Self-fencing: after 2/3 of the session timeout without a proof that the session lives,
    /// every execution is revoked (its release waits for the registry and the workers).
    pub(super) fn check_self_fencing(&mut self, env: &Env, out: &mut Vec<Action>) {
        let Some(proof) = env.proof else { return };
        let silent = env.now.saturating_duration_since(proof);
        if silent <= self.settings.session_timeout * 2 / 3 {
            return;
        }
        let live: Vec<String> = self
            .executions
            .iter()
            .filter(|(_, e)| e.void.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        if live.is_empty() {
            return;
        }
        let reason = format!(
            "self-fencing: no answer from ZooKeeper for {} ms (2/3 of the session timeout)",
            silent.as_millis()
        );
        for id in live {
            self.revoke(&id, &reason, Release::Abandoned, out);
        }
    }

    // ----- what idle instances do next --------------------------------------------------------

    /// For idle local instances: take flagged failover items first (a crashed peer's work must
    /// not wait behind catch-ups), then trigger-once requests, then one misfire catch-up.
    pub(super) fn reconcile_work(&mut self, env: &Env, out: &mut Vec<Action>) {
        self.reconcile_claims(env, out);
        if self.in_flight(|p| matches!(p, Pending::ClaimLatch | Pending::Claim { .. })) {
            // Idle instances are about to take flagged items: nothing else until then.
            return;
        }
        self.reconcile_trigger_requests(env, out);
        let Some(config) = self.view.config.clone() else {
            return;
        };
        let idle: Vec<String> = self.idle_locals(env);
        for id in idle {
            let local_items = self.view.items_of(&id, &self.settings.ip);
            let flagged: Vec<i32> = local_items
                .iter()
                .copied()
                .filter(|i| self.view.items.get(i).is_some_and(|it| it.misfire))
                .collect();
            let missed = self.locals.get(&id).is_some_and(|l| l.missed);
            if !config.misfire {
                if let Some(local) = self.locals.get_mut(&id) {
                    local.missed = false;
                }
                continue;
            }
            if (flagged.is_empty() && !missed) || self.view.necessary {
                continue;
            }
            let run = self.runnable_now(&id);
            if run.is_empty() {
                continue;
            }
            // One catch-up for every fire missed so far: clear the flags of the items it runs
            // (ElasticJob clears those of its whole execution), in the same write that starts it.
            let clear: Vec<Op> = run
                .iter()
                .filter(|i| self.view.items.get(i).is_some_and(|it| it.misfire))
                .map(|i| Op::delete(self.paths.item_misfire(*i)))
                .collect();
            if let Some(local) = self.locals.get_mut(&id) {
                local.missed = false;
            }
            info!(job = %self.name, instance = %id, items = ?run, "misfire catch-up");
            self.start_execution(&id, run, Source::Misfire, env.wall, clear, env, out);
        }
    }

    /// Local instances that may be given work now: live, idle, not shutting down, holding a
    /// valid lease (renewals come before this in every reconcile).
    pub(super) fn idle_locals(&self, env: &Env) -> Vec<String> {
        let ip = &self.settings.ip;
        if !self.view.server_enabled(ip) || !self.may_grant(env) {
            return Vec::new();
        }
        self.locals
            .iter()
            .filter(|(id, l)| {
                l.live()
                    && !l.shutting_down
                    && !l.withheld
                    && l.execution.is_none()
                    && self.view.instances.contains_key(*id)
                    && l.lease.valid(env.now, self.settings.lease)
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// ElasticJob's trigger-once: a `trigger/{id}` node for a local instance runs it now (the
    /// node is deleted first; a busy instance drops the request, as in Java).
    fn reconcile_trigger_requests(&mut self, env: &Env, out: &mut Vec<Action>) {
        let requests: Vec<String> = self
            .view
            .triggers
            .iter()
            .filter(|id| self.locals.get(*id).is_some_and(|l| l.live()))
            .filter(|id| {
                !self.in_flight(
                    |p| matches!(p, Pending::TakeTrigger { instance_id } if instance_id == *id),
                )
            })
            .cloned()
            .collect();
        let _ = env;
        for id in requests {
            let ops = vec![Op::delete(self.paths.trigger(&id))];
            self.commit(Pending::TakeTrigger { instance_id: id }, ops, &[], out);
        }
    }

    pub(super) fn on_trigger_taken(
        &mut self,
        id: &str,
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        match result {
            Ok(_) => {
                self.cache.remove_subtree(&self.paths.trigger(id));
                self.view_stale = true;
                self.refresh_view();
                if !self.idle_locals(env).iter().any(|l| l == id) {
                    info!(job = %self.name, instance = %id, "trigger request dropped: the instance is busy or cannot be given work now");
                    return;
                }
                let run = self.runnable_now(id);
                if !run.is_empty() {
                    self.start_execution(id, run, Source::Manual, env.wall, Vec::new(), env, out);
                }
            }
            Err(e) => self.write_failed("taking a trigger request", &e, env),
        }
    }

    // ----- failover claims --------------------------------------------------------------------

    /// ElasticJob's `failoverIfNecessary`, for every idle local instance at once: under the
    /// failover latch, flagged items are shared among them and started in one write.
    fn reconcile_claims(&mut self, env: &Env, out: &mut Vec<Action>) {
        let failover = self.view.config.as_ref().is_some_and(|c| c.failover);
        if !failover
            || self.view.failover_items.is_empty()
            || self.in_flight(|p| matches!(p, Pending::ClaimLatch | Pending::Claim { .. }))
        {
            return;
        }
        let locked = &self.locked;
        if failover::flagged(&self.view, |i| locked.contains(&i)).is_empty()
            || self.idle_locals(env).is_empty()
        {
            return;
        }
        let op = self.start_op(Pending::ClaimLatch);
        out.push(Action::AcquireLatch {
            op,
            dir: self.paths.failover_latch(),
        });
    }

    /// The failover latch is held: decide the claim on the freshest view, write it, release.
    pub(super) fn claim_now(&mut self, latch: LatchKey, env: &Env, out: &mut Vec<Action>) {
        self.refresh_view();
        let locked = self.locked.clone();
        let flagged = failover::flagged(&self.view, |i| locked.contains(&i));
        let idle = self.idle_locals(env);
        if flagged.is_empty() || idle.is_empty() || !self.connected(env) {
            out.push(Action::ReleaseLatch { latch });
            return;
        }
        let monitored = self
            .view
            .config
            .as_ref()
            .is_some_and(|c| c.monitor_execution);
        let mut shares: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (k, item) in flagged.iter().enumerate() {
            shares
                .entry(idle[k % idle.len()].clone())
                .or_default()
                .push(*item);
        }
        let mut ops = Vec::new();
        let mut starts = Vec::new();
        for (id, items) in &shares {
            match failover::claim_ops(&self.view, &self.paths, id, items, monitored) {
                Some(claim) => {
                    ops.extend(claim);
                    starts.push((id.clone(), items.clone()));
                }
                None => debug!(job = %self.name, items = ?items, "flagged items not claimable yet"),
            }
        }
        if starts.is_empty() {
            out.push(Action::ReleaseLatch { latch });
            return;
        }
        let mut executions = Vec::new();
        for (id, items) in &starts {
            info!(job = %self.name, instance = %id, items = ?items, "taking over failed items");
            let execution_id = new_execution_id();
            let timeout = match self.view.extras.execution_timeout_seconds {
                0 => None,
                s => Some(Duration::from_secs(u64::from(s))),
            };
            self.executions.insert(
                execution_id.clone(),
                Execution {
                    id: execution_id.clone(),
                    instance_id: id.clone(),
                    source: Source::Failover,
                    items: items.iter().copied().collect(),
                    fire_time: env.wall,
                    started: env.now,
                    started_at: SystemTime::now(),
                    timeout,
                    monitored,
                    generation: self.generation,
                    lease_epoch: 0,
                    delivered: false,
                    fencing_tokens: BTreeMap::new(),
                    versions: BTreeMap::new(),
                    outcomes: BTreeMap::new(),
                    committing: BTreeSet::new(),
                    uncertain: BTreeMap::new(),
                    releasing: BTreeSet::new(),
                    void: None,
                },
            );
            if let Some(local) = self.locals.get_mut(id) {
                local.execution = Some(execution_id.clone());
            }
            executions.push(execution_id);
        }
        let items: Vec<i32> = starts.iter().flat_map(|(_, i)| i.iter().copied()).collect();
        self.commit(Pending::Claim { latch, executions }, ops, &items, out);
    }

    pub(super) fn on_claimed(
        &mut self,
        latch: LatchKey,
        executions: Vec<String>,
        ops: &[Op],
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        out.push(Action::ReleaseLatch { latch });
        let items: Vec<i32> = executions
            .iter()
            .filter_map(|e| self.executions.get(e))
            .flat_map(|e| e.items.iter().copied())
            .collect();
        self.unlock(&items);
        match result {
            Ok(results) => {
                out.push(Action::Observe(Observation::FailoverTaken(items)));
                for execution_id in executions {
                    let Some(exec) = self.executions.get(&execution_id) else {
                        continue;
                    };
                    let exec_items: Vec<i32> = exec.items.iter().copied().collect();
                    let (tokens, versions) = self.tokens_of(&exec_items, ops, &results);
                    let exec = self.executions.get_mut(&execution_id).expect("listed");
                    exec.fencing_tokens = tokens;
                    exec.versions = versions;
                    self.deliver(&execution_id, env, out);
                }
            }
            Err(e) => {
                for execution_id in executions {
                    if let Some(exec) = self.executions.remove(&execution_id) {
                        if let Some(local) = self.locals.get_mut(&exec.instance_id) {
                            local.execution = None;
                        }
                    }
                }
                self.write_failed("taking over failed items", &e, env);
            }
        }
    }
}

/// The first answered item whose `running` node no longer carries this execution's token.
fn items_taken_away(
    exec: &Execution,
    view: &crate::coordination::view::JobView,
    answered: &[(i32, ItemOutcome)],
) -> Option<i32> {
    if !exec.monitored {
        return None;
    }
    answered.iter().map(|(i, _)| *i).find(|i| {
        let held = view
            .items
            .get(i)
            .and_then(|it| it.running.as_ref())
            .is_some_and(|(id, stat)| {
                *id == exec.instance_id && exec.fencing_tokens.get(i) == Some(&stat.czxid)
            });
        !held
    })
}
