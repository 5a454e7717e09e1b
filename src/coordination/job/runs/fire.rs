//! When runs start: a cron fire on every idle local instance (a busy one flags `misfire`), a
//! run claimed ahead of its instant and sent at it, a fire held while a resharding is pending,
//! a trigger-once request, and the one misfire catch-up for the fires an instance missed.
//!
//! Work order for local instances with room, once flagged failover items are claimed (the
//! reconcile does that first: a crashed peer's work must not wait behind catch-ups): trigger-once
//! requests (idle instances only), held fires, then one misfire catch-up. An instance has room
//! while it runs fewer executions than its worker's `max_concurrent_executions` (1 unless the
//! worker asks for more, which is ElasticJob's one execution at a time): only FAILOVER and
//! MISFIRE runs go to a busy instance with room.

use std::collections::BTreeSet;
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use tracing::{debug, info, warn};

use super::{plan, DeferredFire, Runs};
use crate::coordination::events::Source;
use crate::coordination::job::failover::ops::Release;
use crate::coordination::job::instances::Instances;
use crate::coordination::job::io::{Cx, Pending};
use crate::coordination::job::{Action, Observation};
use crate::registry::{CreateMode, Error as RegError, Op, OpResult, Stat};

impl Runs {
    /// A cron fire of the job. With `maxTimeDiffSeconds` set, it waits for ZooKeeper's clock
    /// first ([`Runs::clock_read`]).
    pub(in crate::coordination::job) fn on_fire(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
        fire_time: DateTime<Utc>,
    ) {
        if !instances.ready() || instances.is_empty() {
            return;
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
                misfire.extend(plan::plan_fire(cx.view(), &id, &cx.settings().ip, true).misfire);
                continue;
            }
            if !healthy {
                self.slot(&id).missed = true;
                warn!(job = %cx.name(), instance = %id, "fire missed: the registry session is not proven healthy; a catch-up follows once it is");
                continue;
            }
            if self.defer_if_resharding(cx, &id, source, fire_time) {
                continue;
            }
            let run = self.runnable_now(cx, &id);
            if !run.is_empty() {
                self.start(cx, instances, &id, run, source, fire_time, Vec::new());
            }
        }
        self.flag_misfire(cx, misfire);
    }

    /// Flags `misfire` on `items`: a fire found their instance busy (ElasticJob's rule), and a
    /// catch-up runs them once it is idle.
    fn flag_misfire(&mut self, cx: &mut Cx, items: BTreeSet<i32>) {
        if items.is_empty()
            || !cx.connected()
            || cx.io.in_flight(|p| matches!(p, Pending::MisfireFlags))
        {
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
    pub(in crate::coordination::job) fn on_fire_ahead(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
        fire_time: DateTime<Utc>,
    ) {
        if !instances.ready() || instances.is_empty() || fire_time <= cx.env.wall {
            return; // late: the fire itself comes at once
        }
        let Some(config) = cx.view().config.as_ref() else {
            return;
        };
        if config.max_time_diff_seconds >= 0 || !config.monitor_execution {
            // The clock check belongs to the instant; without `running` nodes there is nothing
            // to claim.
            return;
        }
        let failover = config.failover;
        if cx.resharding_pending() || cx.io.reloading() {
            // A claim decided on a view about to be replaced would likely be refused.
            return;
        }
        for id in self.idle_locals(cx, instances) {
            let slot = self.slots.get(&id);
            let busy = slot.is_some_and(|s| {
                s.missed || s.deferred.is_some() || s.claimed_fire == Some(fire_time)
            });
            if busy || (failover && !cx.view().failover_items_of(&id).is_empty()) {
                continue;
            }
            let run = self.runnable_now(cx, &id);
            if run.is_empty() {
                continue;
            }
            debug!(job = %cx.name(), instance = %id, items = ?run, %fire_time, "claiming the fire's run ahead of its instant");
            let started = self.start(cx, instances, &id, run, Source::Cron, fire_time, Vec::new());
            let Some(execution_id) = started else {
                continue;
            };
            if let Some(exec) = self.executions.get_mut(&execution_id) {
                exec.note(
                    SystemTime::from(cx.env.wall),
                    "claimed ahead",
                    vec![("fire_time", fire_time.to_rfc3339())],
                );
            }
            let slot = self.slot(&id);
            slot.held = Some(execution_id);
            slot.claimed_fire = Some(fire_time);
        }
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
        let misfire_on = cx.view().config.as_ref().is_some_and(|c| c.misfire);
        let mut misfire = BTreeSet::new();
        for (id, execution_id) in due {
            if !instances.contains(&id) {
                continue;
            }
            let busy = self.of_instance(&id).iter().any(|e| *e != execution_id);
            if busy {
                misfire.extend(plan::plan_fire(cx.view(), &id, &cx.settings().ip, true).misfire);
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

    /// Gives up runs claimed ahead of an instant to come: new work, which a drain takes none of.
    pub(in crate::coordination::job) fn give_up_held(
        &mut self,
        cx: &mut Cx,
        instances: &Instances,
        reason: &str,
    ) {
        let held: Vec<String> = self.slots.values().filter_map(|s| s.held.clone()).collect();
        for execution_id in held {
            self.void(cx, instances, &execution_id, reason, Release::Unrun, false);
        }
    }

    // ----- fires held for a reshard -----------------------------------------------------------

    /// Holds a fire for idle instance `id` while a resharding is pending, unless `id` has
    /// failover items to run (ElasticJob runs those without waiting for the sharding). An
    /// ElasticJob non-leader blocks the same way before it runs: the fire then runs the items
    /// the new sharding gives it, so an item moved by that sharding is neither run by its old
    /// owner nor skipped by its new one. One fire is held per instance; later ones while it
    /// waits are the same run (ElasticJob's blocked thread skips them too). Returns whether
    /// the fire is held (or merged into the one held).
    fn defer_if_resharding(
        &mut self,
        cx: &Cx,
        id: &str,
        source: Source,
        fire_time: DateTime<Utc>,
    ) -> bool {
        let failover = cx.view().config.as_ref().is_some_and(|c| c.failover);
        if !cx.resharding_pending() || (failover && !cx.view().failover_items_of(id).is_empty()) {
            return false;
        }
        let since = cx.env.now;
        let slot = self.slot(id);
        if slot.deferred.is_none() {
            info!(job = %cx.name(), instance = %id, source = ?source,
                  "fire held until the pending resharding is written");
            slot.deferred = Some(DeferredFire {
                source,
                fire_time,
                since,
            });
        } else {
            debug!(job = %cx.name(), instance = %id, source = ?source,
                   "fire merged into the one held for the pending resharding");
        }
        true
    }

    /// Once the pending resharding is written and read, each held fire runs on its instance's
    /// new items. An instance busy by then (a failover claim took it) keeps its fire until it
    /// is idle; one that may not be given work now notes a miss (a catch-up follows, as for a
    /// fire at such a moment); one gone, shutting down or on a disabled server drops it.
    fn reconcile_deferred_fires(&mut self, cx: &mut Cx, instances: &mut Instances) {
        if cx.resharding_pending() {
            return;
        }
        let held: Vec<String> = self
            .slots
            .iter()
            .filter(|(_, s)| s.deferred.is_some())
            .map(|(id, _)| id.clone())
            .collect();
        if held.is_empty() {
            return;
        }
        let ready = self.idle_locals(cx, instances);
        let enabled = cx.view().server_enabled(&cx.settings().ip);
        for id in held {
            let wanted = instances
                .get(&id)
                .is_some_and(|l| l.live() && !l.shutting_down())
                && enabled;
            if wanted && !self.idle(&id) {
                continue;
            }
            let Some(fire) = self.slot(&id).deferred.take() else {
                continue;
            };
            let waited_ms = cx.env.now.saturating_duration_since(fire.since).as_millis() as u64;
            if !wanted {
                info!(job = %cx.name(), instance = %id, waited_ms,
                      "held fire dropped: the instance may no longer run (gone, shutting down or its server disabled)");
                continue;
            }
            if !ready.contains(&id) {
                self.slot(&id).missed = true;
                warn!(job = %cx.name(), instance = %id, waited_ms,
                      "held fire missed: no lease may be granted now; a catch-up follows once it can");
                continue;
            }
            let run = self.runnable_now(cx, &id);
            info!(job = %cx.name(), instance = %id, source = ?fire.source, items = ?run, waited_ms,
                  "held fire runs on the resharded items");
            if !run.is_empty() {
                self.start(
                    cx,
                    instances,
                    &id,
                    run,
                    fire.source,
                    fire.fire_time,
                    Vec::new(),
                );
            }
        }
    }

    /// What a fire would run on `id` now: ElasticJob's execution set, minus items an action
    /// in flight touches and items of this sidecar's executions.
    fn runnable_now(&self, cx: &Cx, id: &str) -> Vec<i32> {
        let executing = self.executing();
        plan::plan_fire(cx.view(), id, &cx.settings().ip, false)
            .run
            .into_iter()
            .filter(|i| !cx.io.is_locked(*i) && !executing.contains(i))
            .collect()
    }

    // ----- what local instances with room do next ---------------------------------------------

    /// Trigger-once requests, held fires, then one misfire catch-up, for local instances with
    /// room (flagged failover items are claimed before this, in the reconcile).
    pub(in crate::coordination::job) fn reconcile_work(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
    ) {
        if cx
            .io
            .in_flight(|p| matches!(p, Pending::ClaimLatch | Pending::Claim { .. }))
        {
            // Idle instances are about to take flagged items: nothing else until then.
            return;
        }
        take_trigger_requests(cx, instances);
        self.reconcile_deferred_fires(cx, instances);
        let Some(misfire_on) = cx.view().config.as_ref().map(|c| c.misfire) else {
            return;
        };
        for id in self.spare_locals(cx, instances) {
            if !misfire_on {
                self.slot(&id).missed = false;
                continue;
            }
            let flagged = cx
                .view()
                .items_of(&id, &cx.settings().ip)
                .iter()
                .any(|i| cx.view().items.get(i).is_some_and(|it| it.misfire));
            let missed = self.slots.get(&id).is_some_and(|s| s.missed);
            if (!flagged && !missed) || cx.view().necessary {
                continue;
            }
            let run = self.runnable_now(cx, &id);
            if run.is_empty() {
                continue;
            }
            // One catch-up for every fire missed so far: clear the flags of the items it runs
            // (ElasticJob clears those of its whole execution), in the same write that starts it.
            let clear: Vec<Op> = run
                .iter()
                .filter(|i| cx.view().items.get(i).is_some_and(|it| it.misfire))
                .map(|i| Op::delete(cx.paths().item_misfire(*i)))
                .collect();
            self.slot(&id).missed = false;
            info!(job = %cx.name(), instance = %id, items = ?run, "misfire catch-up");
            let now = cx.env.wall;
            self.start(cx, instances, &id, run, Source::Misfire, now, clear);
        }
    }

    /// ElasticJob's trigger-once: the `trigger/{id}` node of local instance `id` was taken
    /// (deleted, and mirrored so): it runs now (a busy instance drops the request, as in Java).
    pub(in crate::coordination::job) fn trigger_taken(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
        id: &str,
        result: Result<Vec<OpResult>, RegError>,
    ) {
        if let Err(e) = result {
            return cx.write_failed("taking a trigger request", &e);
        }
        if !self.idle_locals(cx, instances).iter().any(|l| l == id) {
            if self.promote_held(cx, instances, id) {
                return;
            }
            info!(job = %cx.name(), instance = %id, "trigger request dropped: the instance is busy or cannot be given work now");
            return;
        }
        let now = cx.env.wall;
        if self.defer_if_resharding(cx, id, Source::Manual, now) {
            return;
        }
        let run = self.runnable_now(cx, id);
        if !run.is_empty() {
            self.start(cx, instances, id, run, Source::Manual, now, Vec::new());
        }
    }

    /// A trigger-once request for an instance whose only run is one claimed ahead of a cron
    /// instant to come: that run goes out now as the MANUAL run the request asks for (its items
    /// are the ones a MANUAL run would take, and they are claimed already), and the cron fire
    /// then finds the instance busy, as it would have had nothing been claimed ahead. Returns
    /// whether the request was taken so.
    fn promote_held(&mut self, cx: &mut Cx, instances: &mut Instances, id: &str) -> bool {
        let ready = self.ready(cx, instances, |runs, id, _| {
            runs.of_instance(id).len() == 1 && runs.slots.get(id).is_some_and(|s| s.held.is_some())
        });
        if !ready.iter().any(|l| l == id) {
            return false;
        }
        let slot = self.slot(id);
        slot.claimed_fire = None;
        let Some(execution_id) = slot.held.take() else {
            return false;
        };
        let trace = self.trace_for(cx, id, Source::Manual, &execution_id);
        let Some(exec) = self.executions.get_mut(&execution_id) else {
            return false;
        };
        info!(job = %cx.name(), instance = %id, execution = %execution_id, items = ?exec.items,
              "trigger request runs the run claimed ahead of the next fire, now");
        exec.source = Source::Manual;
        exec.fire_time = cx.env.wall;
        exec.started = cx.env.now;
        exec.started_at = SystemTime::from(cx.env.wall);
        exec.trace = trace;
        if !Runs::starting(cx, &execution_id) {
            self.deliver(cx, instances, &execution_id);
        }
        true
    }
}

/// Takes every trigger-once request (`trigger/{id}`) of a live local instance: the node is
/// deleted first, and the run follows ([`Runs::trigger_taken`]).
fn take_trigger_requests(cx: &mut Cx, instances: &Instances) {
    let requests: Vec<String> = cx
        .view()
        .triggers
        .iter()
        .filter(|id| instances.get(id).is_some_and(|l| l.live()))
        .filter(|id| {
            !cx.io.in_flight(
                |p| matches!(p, Pending::TakeTrigger { instance_id } if instance_id == *id),
            )
        })
        .cloned()
        .collect();
    for id in requests {
        let ops = vec![Op::delete(cx.paths().trigger(&id))];
        cx.commit(Pending::TakeTrigger { instance_id: id }, ops, &[]);
    }
}
