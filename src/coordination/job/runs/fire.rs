//! The life of a cron fire on this sidecar, from the timer's fire to the worker's `Trigger`:
//! what it runs on each local instance ([`plan_fire`]: ElasticJob's execution set, a busy
//! instance flags `misfire` instead), the write that starts the run (its `running` nodes,
//! fenced on each item's epoch, [`writes::start_ops`]), and once that write is answered the
//! `Trigger`, with a fresh lease first when the current one is a third used up.
//!
//! Like an ElasticJob instance, which has one Quartz thread per job, a shardcar instance runs
//! one cron or manual execution of its job at a time (`docs/elasticjob-compat.md` §6).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use tracing::{debug, info, warn};

use super::execution::{tokens_of, Execution};
use super::Runs;
use crate::coordination::events::{Source, Trigger, WorkerEvent};
use crate::coordination::job::instances::Instances;
use crate::coordination::job::io::{Cx, Pending};
use crate::coordination::job::mirror::JobView;
use crate::coordination::job::writes::{self, Release};
use crate::coordination::job::{Action, Observation};
use crate::coordination::trace::TraceContext;
use crate::elasticjob::instance::task_id;
use crate::registry::{CreateMode, Error as RegError, Op, OpResult, Stat};

/// What starts a run: its source and fire instant, which retry of its items it is, and the job
/// parameter its trigger carries instead of the job's own (a trigger-once request's).
#[derive(Debug, Clone)]
pub(super) struct Start {
    pub source: Source,
    pub fire_time: DateTime<Utc>,
    pub attempt: u32,
    pub job_parameter: Option<String>,
}

impl Start {
    /// A first run of `source` for the instant `fire_time`.
    pub(super) fn of(source: Source, fire_time: DateTime<Utc>) -> Start {
        Start {
            source,
            fire_time,
            attempt: 0,
            job_parameter: None,
        }
    }
}

impl Runs {
    /// A cron fire of the job. With `maxTimeDiffSeconds` set, it waits for ZooKeeper's clock
    /// first ([`Runs::clock_read`]).
    pub(in crate::coordination::job) fn on_fire(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
        fire_time: DateTime<Utc>,
    ) {
        if !instances.ready() || instances.is_empty() || cx.view().resident() {
            return; // a resident job's items are held, not fired
        }
        let max_diff = cx
            .view()
            .config
            .as_ref()
            .map_or(-1, |c| c.max_time_diff_seconds);
        if max_diff >= 0 && cx.connected() {
            let op = cx.io.start_op(Pending::Clock { fire_time });
            cx.out.push(Action::TouchClock { op });
            return;
        }
        self.fire(cx, instances, fire_time, Source::Cron);
    }

    /// ElasticJob's `maxTimeDiffSeconds` check: the fire runs only if this host's clock agrees
    /// with ZooKeeper's within the limit.
    pub(in crate::coordination::job) fn clock_read(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
        fire_time: DateTime<Utc>,
        result: Result<Stat, RegError>,
    ) {
        let max = cx
            .view()
            .config
            .as_ref()
            .map_or(-1, |c| c.max_time_diff_seconds);
        match result {
            Ok(stat) => {
                let diff = (cx.env.wall.timestamp_millis() - stat.mtime).abs();
                if max >= 0 && diff > i64::from(max) * 1000 {
                    warn!(job = %cx.name(), diff_ms = diff, max_seconds = max,
                          "fire skipped: this host's clock differs from ZooKeeper's by more than maxTimeDiffSeconds allows; synchronise the clock (NTP) or raise maxTimeDiffSeconds");
                    return;
                }
                self.fire(cx, instances, fire_time, Source::Cron);
            }
            Err(e) => {
                warn!(job = %cx.name(), error = %e, "fire skipped: cannot read ZooKeeper's clock");
            }
        }
    }

    /// A fire for every local instance: run its runnable items if it is idle; flag `misfire`
    /// if it is busy; note the miss if it cannot be given work now (no lease may be granted).
    fn fire(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
        fire_time: DateTime<Utc>,
        source: Source,
    ) {
        // An instance whose run for this instant was claimed ahead is left to that run
        // (`reconcile_held` sends it).
        let ids: Vec<String> = instances
            .iter()
            .filter(|(id, l)| {
                l.live()
                    && !l.shutting_down()
                    && self.slots.get(*id).and_then(|s| s.claimed_fire) != Some(fire_time)
            })
            .map(|(id, _)| id.clone())
            .collect();
        let healthy = cx.may_grant();
        let mut misfire = BTreeSet::new();
        for id in ids {
            // A cron fire runs only on an instance that runs nothing, whatever it may run at
            // once: ElasticJob's rule (a busy instance flags misfire).
            if !self.idle(&id) {
                let flag = plan_fire(cx.view(), &id, &cx.settings().ip, true).misfire;
                if flag.is_empty() {
                    let misfire_on = cx.view().misfire_on();
                    debug!(job = %cx.name(), instance = %id, fire = %fire_time, misfire_on,
                           "still running, no item to flag: with misfire on, this fire folds into the flagged items' catch-up; with it off, it is skipped");
                }
                misfire.extend(flag);
                continue;
            }
            if !healthy {
                self.slot(&id).missed = true;
                warn!(job = %cx.name(), instance = %id, "fire missed: the registry session is not proven healthy; a catch-up follows once it is");
                continue;
            }
            if self.defer_if_resharding(cx, &id, source, fire_time, None) {
                continue;
            }
            let run = self.runnable_now(cx, &id);
            if !run.is_empty() {
                self.start(
                    cx,
                    instances,
                    &id,
                    run,
                    Start::of(source, fire_time),
                    Vec::new(),
                );
            }
        }
        self.flag_misfire(cx, misfire);
    }

    /// Runs claimed ahead whose instant has come go out, started now. The fire finds the
    /// instance as it would have found it: one that took other work meanwhile (a failover
    /// claim) is busy, so the claimed run is given up, its items freed, and the fire is a
    /// misfire; items the instance came to own since the claim wait for a catch-up, as on any
    /// instance whose run is under way.
    pub(in crate::coordination::job) fn reconcile_held(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
    ) {
        let due: Vec<(String, String)> = self
            .slots
            .iter()
            .filter_map(|(id, s)| {
                let execution_id = s.held.as_ref()?;
                let exec = self.executions.get(execution_id)?;
                (exec.fire_time <= cx.env.wall
                    && exec.void.is_none()
                    && !Runs::starting(cx, execution_id))
                .then(|| (id.clone(), execution_id.clone()))
            })
            .collect();
        if due.is_empty() {
            return;
        }
        let misfire_on = cx.view().misfire_on();
        let mut misfire = BTreeSet::new();
        for (id, execution_id) in due {
            if !instances.contains(&id) {
                continue;
            }
            let busy = self.of_instance(&id).iter().any(|e| *e != execution_id);
            if busy {
                misfire.extend(plan_fire(cx.view(), &id, &cx.settings().ip, true).misfire);
                // Freed as never run; the fire of its instant is this misfire.
                let reason = "its instance took other work before the fire instant";
                self.void(cx, instances, &execution_id, reason, Release::Unrun, false);
                let fire_time = self.executions.get(&execution_id).map(|e| e.fire_time);
                self.slot(&id).claimed_fire = fire_time;
                continue;
            }
            if misfire_on {
                misfire.extend(self.runnable_now(cx, &id));
            }
            self.slot(&id).held = None;
            let exec = self.executions.get_mut(&execution_id).expect("a held run");
            exec.started = cx.env.now;
            exec.started_at = SystemTime::from(cx.env.wall);
            self.deliver(cx, instances, &execution_id);
        }
        self.flag_misfire(cx, misfire);
    }

    /// Flags `misfire` on `items`: a fire found their instance busy (ElasticJob's rule), and a
    /// catch-up runs them once it is idle.
    pub(super) fn flag_misfire(&mut self, cx: &mut Cx, items: BTreeSet<i32>) {
        if items.is_empty() || !cx.connected() {
            return;
        }
        if cx.io.in_flight(|p| matches!(p, Pending::MisfireFlags)) {
            debug!(job = %cx.name(), items = ?items,
                   "still running: misfire not flagged now, a write of misfire flags is in flight");
            return;
        }
        let items: Vec<i32> = items.into_iter().collect();
        debug!(job = %cx.name(), items = ?items, "still running: misfire");
        cx.observe(Observation::Misfired(items.clone()));
        let ops = items
            .iter()
            .map(|i| {
                Op::create(
                    cx.paths().item_misfire(*i),
                    Vec::new(),
                    CreateMode::Persistent,
                )
            })
            .collect();
        cx.commit(Pending::MisfireFlags, ops, &[]);
    }

    /// What a fire would run on `id` now: ElasticJob's execution set, minus items an action
    /// in flight touches and items of this sidecar's executions.
    pub(super) fn runnable_now(&self, cx: &Cx, id: &str) -> Vec<i32> {
        let executing = self.executing();
        plan_fire(cx.view(), id, &cx.settings().ip, false)
            .run
            .into_iter()
            .filter(|i| !cx.io.is_locked(*i) && !executing.contains(i))
            .collect()
    }

    /// A new execution of `items` on local instance `id`, not started yet. A FAILOVER run
    /// starts a trace of its own; others may continue a `TriggerJob` call's ([`Runs::trace_for`]).
    pub(super) fn new_execution(
        &mut self,
        cx: &Cx,
        id: &str,
        items: &[i32],
        source: Source,
        fire_time: DateTime<Utc>,
        monitored: bool,
    ) -> Execution {
        let execution_id = self.next_id(cx);
        let trace = match source {
            Source::Failover => TraceContext::for_execution(&execution_id, None),
            _ => self.trace_for(cx, id, source, &execution_id),
        };
        // A hold has no end of its own: no timeout, whatever the job's setting says.
        let timeout = match cx.view().extras.execution_timeout_seconds {
            _ if source == Source::Resident => None,
            0 => None,
            s => Some(Duration::from_secs(u64::from(s))),
        };
        Execution::new(
            execution_id,
            id.to_string(),
            source,
            items.iter().copied().collect(),
            fire_time,
            cx.env.now,
            SystemTime::from(cx.env.wall),
            timeout,
            monitored,
            cx.io.generation(),
            trace,
        )
    }

    /// Starts `items` on local instance `id`: writes their `running` nodes (with `extra` ops in
    /// the same multi) when monitorExecution is on, then sends the `Trigger`. Returns the new
    /// execution's id.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
        id: &str,
        items: Vec<i32>,
        what: Start,
        mut extra: Vec<Op>,
    ) -> Option<String> {
        cx.view().config.as_ref()?;
        let monitored = cx.view().monitored();
        if what.source != Source::Retry {
            // A fire that runs an item first drops its pending retry: that run is the next.
            for i in &items {
                extra.extend(writes::retry_ops(cx.view(), cx.paths(), *i, None));
            }
        }
        let mut exec = self.new_execution(cx, id, &items, what.source, what.fire_time, monitored);
        exec.attempt = what.attempt;
        exec.job_parameter = what.job_parameter;
        let execution_id = exec.id.clone();
        if !monitored {
            // No `running` nodes (ElasticJob's monitorExecution off): the token is the owner
            // node's mzxid, which grows with every change of hands.
            for i in &items {
                if let Some((_, stat)) = cx.view().items.get(i).and_then(|it| it.owner.as_ref()) {
                    exec.fencing_tokens.insert(*i, stat.mzxid);
                }
            }
            self.insert(exec);
            if extra.is_empty() {
                self.deliver(cx, instances, &execution_id);
            } else {
                let pending = Pending::Start {
                    execution_id: execution_id.clone(),
                };
                cx.commit(pending, extra, &items);
            }
            return Some(execution_id);
        }
        let Some(mut ops) = writes::start_ops(cx.view(), cx.paths(), id, &items) else {
            warn!(job = %cx.name(), items = ?items, "an item has no sharding node yet; not started");
            return None;
        };
        ops.extend(extra);
        self.insert(exec);
        let pending = Pending::Start {
            execution_id: execution_id.clone(),
        };
        cx.commit(pending, ops, &items);
        Some(execution_id)
    }

    /// Whether the start of `execution_id` is still being written.
    pub(super) fn starting(cx: &Cx, execution_id: &str) -> bool {
        cx.io
            .in_flight(|p| matches!(p, Pending::Start { execution_id: e } if e == execution_id))
    }

    /// The start's write was answered (or not).
    pub(in crate::coordination::job) fn started(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
        execution_id: &str,
        ops: &[Op],
        result: Result<Vec<OpResult>, RegError>,
    ) {
        let Some(exec) = self.executions.get(execution_id) else {
            return;
        };
        let items: Vec<i32> = exec.items.iter().copied().collect();
        let instance = exec.instance_id.clone();
        let fire_time = exec.fire_time;
        let held = self.is_held(execution_id);
        if held {
            cx.observe(Observation::ClaimAnswered {
                fire_time: exec.fire_time,
            });
        }
        cx.io.unlock(&items);
        match result {
            Ok(results) => {
                let (tokens, versions) = tokens_of(cx.paths(), &items, ops, &results);
                let exec = self.executions.get_mut(execution_id).expect("checked");
                if exec.monitored {
                    exec.fencing_tokens = tokens;
                    exec.note(
                        SystemTime::from(cx.env.wall),
                        "running nodes written",
                        vec![("items", format!("{items:?}"))],
                    );
                }
                exec.versions = versions;
                if held {
                    return; // sent at its instant (`reconcile_held`)
                }
                self.deliver(cx, instances, execution_id);
            }
            Err(e) => {
                self.executions.remove(execution_id);
                let slot = self.slot(&instance);
                slot.executions.retain(|x| x != execution_id);
                if held && fire_time > cx.env.wall {
                    // A claim ahead refused before its instant: the fire decides at its
                    // instant, on a fresh read, as it would have without the claim.
                    slot.held = None;
                    slot.claimed_fire = None;
                } else if held {
                    // Refused at or after its instant (a reshard written first, on a slow
                    // ensemble): the instant went by with no run of these items here, and no
                    // fire of it comes again. The instance catches up on what it owns after
                    // the re-read, and the items are flagged misfire in ZooKeeper, so that an
                    // owner that read their move only after the instant catches up on them too
                    // (a flagged item's catch-up clears its flag: run once, wherever it is).
                    slot.held = None;
                    slot.claimed_fire = None;
                    slot.missed = true;
                    let misfire_on = cx.view().misfire_on();
                    if misfire_on {
                        let flag: BTreeSet<i32> = items
                            .iter()
                            .copied()
                            .filter(|i| cx.view().items.get(i).is_some_and(|it| !it.misfire))
                            .collect();
                        self.flag_misfire(cx, flag);
                    }
                } else {
                    // The view was stale (or the session in trouble): a catch-up decides
                    // again on a fresh read.
                    slot.missed = true;
                }
                cx.write_failed("starting an execution", &e);
            }
        }
    }

    /// Sends the `Trigger` of a started execution, with a fresh `Lease` first when the current
    /// one is a third used up, so the trigger never reaches a worker whose lease runs out on
    /// the way. If no lease may be granted, the execution is given back instead.
    pub(super) fn deliver(&mut self, cx: &mut Cx, instances: &mut Instances, execution_id: &str) {
        let valid_for = cx.settings().lease;
        let Some(exec) = self.executions.get(execution_id) else {
            return;
        };
        if exec.void.is_some() {
            // Taken back while its start was in flight (self-fencing on waking from a pause, a
            // lapse, an expiry): it is never sent. Its worker never had it, so its release goes
            // on at once, with the epochs the start left; the items may be someone else's by now.
            debug!(job = %cx.name(), execution = %execution_id,
                   "started after it was taken back: trigger not sent");
            return;
        }
        let instance = exec.instance_id.clone();
        let live = instances.get(&instance).is_some_and(|l| l.live()) && !self.withholds(&instance);
        if !live {
            let reason = "the worker went away before its trigger was sent";
            self.void(
                cx,
                instances,
                execution_id,
                reason,
                Release::Abandoned,
                false,
            );
            return;
        }
        let remaining = instances.get(&instance).map_or(Duration::ZERO, |l| {
            l.lease().remaining(cx.env.now, valid_for)
        });
        if remaining <= valid_for * 2 / 3 {
            if !cx.may_grant() {
                self.slot(&instance).missed = true;
                let reason = "no lease could be granted to send the trigger under";
                self.void(
                    cx,
                    instances,
                    execution_id,
                    reason,
                    Release::Abandoned,
                    false,
                );
                return;
            }
            instances.grant(cx, &instance);
        }
        let Some(local) = instances.get(&instance) else {
            return;
        };
        let (stream, epoch) = (local.stream(), local.lease().epoch());
        let params = cx.view().item_parameters();
        let (job_parameter, total) = cx.view().config.as_ref().map_or((String::new(), 0), |c| {
            (c.job_parameter.clone(), c.sharding_total_count)
        });
        let exec = self
            .executions
            .get_mut(execution_id)
            .expect("checked above");
        exec.lease_epoch = epoch;
        exec.delivered = true;
        let items: Vec<i32> = exec.items.iter().copied().collect();
        exec.task_id = task_id(cx.name(), &items, &instance);
        exec.note(
            SystemTime::from(cx.env.wall),
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
            job_parameter: exec.job_parameter.clone().unwrap_or(job_parameter),
            sharding_total_count: total,
            source: exec.source,
            fire_time: exec.fire_time,
            fencing_tokens: exec.fencing_tokens.clone(),
            traceparent: exec.trace.traceparent(),
            tracestate: exec.trace.tracestate.clone(),
            attempt: exec.attempt,
        };
        let latency = (cx.env.wall - exec.fire_time).to_std().unwrap_or_default();
        let source = exec.source;
        info!(job = %cx.name(), execution = %execution_id, instance = %instance, items = ?items,
              source = source.as_str(), "execution started");
        cx.out.push(Action::TrackExecution {
            id: execution_id.to_string(),
        });
        cx.send(stream, WorkerEvent::Trigger(Box::new(trigger)));
        cx.observe(Observation::TriggerSent {
            source,
            items,
            latency,
        });
    }
}

/// What one fire does for one local instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::coordination::job) struct FirePlan {
    /// Items to run now.
    pub run: Vec<i32>,
    /// Items to flag `misfire` (the instance is still busy with an earlier execution).
    pub misfire: Vec<i32>,
}

/// Decides what a fire does for `instance_id` (whose server is `server_ip`).
///
/// `busy` tells whether the instance still has an execution in flight.
pub(in crate::coordination::job) fn plan_fire(
    view: &JobView,
    instance_id: &str,
    server_ip: &str,
    busy: bool,
) -> FirePlan {
    let Some(config) = view.config.as_ref() else {
        return FirePlan::default();
    };
    let local = view.items_of(instance_id, server_ip);
    if busy {
        let misfire = if config.misfire {
            local
                .into_iter()
                .filter(|i| !view.items.get(i).is_some_and(|it| it.misfire))
                .collect()
        } else {
            Vec::new()
        };
        return FirePlan {
            run: Vec::new(),
            misfire,
        };
    }
    if view.failover_on() {
        let taken = view.failover_items_of(instance_id);
        if !taken.is_empty() {
            return FirePlan {
                run: runnable(view, taken, false, view.monitored()),
                misfire: Vec::new(),
            };
        }
    }
    FirePlan {
        run: runnable(view, local, view.failover_on(), view.monitored()),
        misfire: Vec::new(),
    }
}

/// Removes disabled items, items taken over by failover (when `failover`) and items still
/// running anywhere (when `monitor`): an item is never started while its `running` node exists.
fn runnable(view: &JobView, items: Vec<i32>, failover: bool, monitor: bool) -> Vec<i32> {
    items
        .into_iter()
        .filter(|i| {
            let Some(item) = view.items.get(i) else {
                return true;
            };
            let taken = failover && item.failover.is_some();
            let running = monitor && item.running.is_some();
            !(item.disabled || taken || running)
        })
        .collect()
}
