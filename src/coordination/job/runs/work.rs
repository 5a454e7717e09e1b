//! What local instances with room do besides cron fires: a fire held while a resharding is
//! pending, runs once it is written; trigger-once requests; the one misfire catch-up for the
//! fires an instance missed; and FAILOVER runs of items claimed, handed over or adopted.
//!
//! Work order, once flagged failover items are claimed (the reconcile does that first: a
//! crashed peer's work must not wait behind catch-ups): trigger-once requests (idle instances
//! only), held fires, then one misfire catch-up. An instance has room while it runs fewer
//! executions than its worker's `max_concurrent_executions` (1 unless the worker asks for more,
//! which is ElasticJob's one execution at a time): only FAILOVER and MISFIRE runs go to a busy
//! instance with room.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use tracing::{debug, info, warn};

use super::execution::tokens_of;
use super::fire::Start;
use super::{DeferredFire, Runs};
use crate::coordination::events::Source;
use crate::coordination::job::instances::Instances;
use crate::coordination::job::io::{Cx, Pending};
use crate::coordination::job::Observation;
use crate::registry::{Error as RegError, Op, OpResult};

impl Runs {
    /// Holds a fire for idle instance `id` while a resharding is pending, unless `id` has
    /// failover items to run (ElasticJob runs those without waiting for the sharding). An
    /// ElasticJob non-leader blocks the same way before it runs: the fire then runs the items
    /// the new sharding gives it, so an item moved by that sharding is neither run by its old
    /// owner nor skipped by its new one. One fire is held per instance; later ones while it
    /// waits are the same run (ElasticJob's blocked thread skips them too). Returns whether
    /// the fire is held (or merged into the one held).
    pub(super) fn defer_if_resharding(
        &mut self,
        cx: &Cx,
        id: &str,
        source: Source,
        fire_time: DateTime<Utc>,
        parameter: Option<String>,
    ) -> bool {
        let failover = cx.view().failover_on();
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
                parameter,
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
                let what = Start {
                    job_parameter: fire.parameter,
                    ..Start::of(fire.source, fire.fire_time)
                };
                self.start(cx, instances, &id, run, what, Vec::new());
            }
        }
    }

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
        if cx.view().resident() {
            // Held, not fired: no held fires, retries or catch-ups.
            for slot in self.slots.values_mut() {
                slot.missed = false;
            }
            return self.reconcile_resident(cx, instances);
        }
        self.reconcile_deferred_fires(cx, instances);
        self.reconcile_retries(cx, instances);
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
            self.start(
                cx,
                instances,
                &id,
                run,
                Start::of(Source::Misfire, now),
                clear,
            );
        }
    }

    /// Pending retries that are due (`shardcar/retries/{i}`) run on their item's owner, if it is
    /// a local instance with room: one RETRY execution per attempt (and per job parameter a
    /// trigger gave the failed run), its start fenced like any
    /// other (never beside another run of the item), its pending retry kept until the run ends
    /// (a failure moves it to the next attempt, a completion removes it; a FAILOVER run of it
    /// counts from it).
    fn reconcile_retries(&mut self, cx: &mut Cx, instances: &mut Instances) {
        let now_ms = cx.env.wall.timestamp_millis();
        let due = |cx: &Cx, i: &i32| {
            cx.view()
                .items
                .get(i)
                .and_then(|it| it.retry.as_ref())
                .is_some_and(|r| r.due_ms <= now_ms)
        };
        for id in self.spare_locals(cx, instances) {
            let owned = cx.view().items_of(&id, &cx.settings().ip);
            if !owned.iter().any(|i| due(cx, i)) {
                continue;
            }
            let mut by_attempt: BTreeMap<(u32, Option<String>), Vec<i32>> = BTreeMap::new();
            for i in self.runnable_now(cx, &id) {
                if owned.contains(&i) && due(cx, &i) {
                    let pending = cx.view().items[&i].retry.as_ref();
                    let key = (
                        pending.map_or(1, |r| r.attempt),
                        pending.and_then(|r| r.parameter.clone()),
                    );
                    by_attempt.entry(key).or_default().push(i);
                }
            }
            for ((attempt, job_parameter), items) in by_attempt {
                info!(job = %cx.name(), instance = %id, items = ?items, attempt, "retrying failed items");
                let what = Start {
                    attempt,
                    job_parameter,
                    ..Start::of(Source::Retry, cx.env.wall)
                };
                self.start(cx, instances, &id, items, what, Vec::new());
            }
        }
    }

    /// ElasticJob's trigger-once: the `trigger/{id}` node of local instance `id` was taken
    /// (deleted, and mirrored so): it runs now (a busy instance drops the request, as in Java).
    pub(in crate::coordination::job) fn trigger_taken(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
        id: &str,
        parameter: Option<String>,
        result: Result<Vec<OpResult>, RegError>,
    ) {
        if let Err(e) = result {
            return cx.write_failed("taking a trigger request", &e);
        }
        if cx.view().resident() {
            info!(job = %cx.name(), instance = %id, "trigger request dropped: a resident job's items are held, not triggered");
            return;
        }
        if !self.idle_locals(cx, instances).iter().any(|l| l == id) {
            if self.promote_held(cx, instances, id, parameter) {
                return;
            }
            info!(job = %cx.name(), instance = %id, "trigger request dropped: the instance is busy or cannot be given work now");
            return;
        }
        let now = cx.env.wall;
        if self.defer_if_resharding(cx, id, Source::Manual, now, parameter.clone()) {
            return;
        }
        let run = self.runnable_now(cx, id);
        if !run.is_empty() {
            let what = Start {
                job_parameter: parameter,
                ..Start::of(Source::Manual, now)
            };
            self.start(cx, instances, id, run, what, Vec::new());
        }
    }

    /// A FAILOVER execution of `items` for local instance `id`, about to be claimed or handed
    /// over: listed, not yet sent (the write that takes the items gives its fencing tokens).
    /// Returns its id.
    pub(in crate::coordination::job) fn list_failover(
        &mut self,
        cx: &Cx,
        id: &str,
        items: &[i32],
        monitored: bool,
    ) -> String {
        info!(job = %cx.name(), instance = %id, items = ?items, "taking over failed items");
        let mut exec = self.new_execution(cx, id, items, Source::Failover, cx.env.wall, monitored);
        // A retry taken over goes on counting: the worker is told the attempt it continues.
        let retried = || {
            items
                .iter()
                .filter_map(|i| cx.view().items.get(i).and_then(|it| it.retry.as_ref()))
        };
        exec.attempt = retried().map(|r| r.attempt).max().unwrap_or(0);
        exec.job_parameter = retried().find_map(|r| r.parameter.clone());
        let execution_id = exec.id.clone();
        self.insert(exec);
        execution_id
    }

    /// Starts FAILOVER execution `execution_id`, whose claim (`ops`) landed with `results`:
    /// its fencing tokens and epochs from the results, then the trigger.
    pub(in crate::coordination::job) fn deliver_claimed(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
        execution_id: &str,
        ops: &[Op],
        results: &[OpResult],
    ) {
        let Some(exec) = self.executions.get(execution_id) else {
            return;
        };
        let exec_items: Vec<i32> = exec.items.iter().copied().collect();
        let (tokens, versions) = tokens_of(cx.paths(), &exec_items, ops, results);
        let exec = self.executions.get_mut(execution_id).expect("listed");
        exec.fencing_tokens = tokens;
        exec.versions = versions;
        self.deliver(cx, instances, execution_id);
    }

    /// Starts, as FAILOVER, items a peer's sidecar handed to local instance `id` in a write
    /// already read: the tokens and epochs are the ones read.
    pub(in crate::coordination::job) fn adopt(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
        id: &str,
        items: &[i32],
        tokens: BTreeMap<i32, i64>,
        versions: BTreeMap<i32, i32>,
    ) {
        let execution_id = self.list_failover(cx, id, items, true);
        let exec = self.executions.get_mut(&execution_id).expect("just listed");
        exec.fencing_tokens = tokens;
        exec.versions = versions;
        cx.observe(Observation::FailoverTaken(items.to_vec()));
        self.deliver(cx, instances, &execution_id);
    }

    /// Forgets FAILOVER executions whose claim failed: they were never sent.
    pub(in crate::coordination::job) fn forget_unclaimed(
        &mut self,
        executions: impl IntoIterator<Item = String>,
    ) {
        for execution_id in executions {
            if let Some(exec) = self.executions.remove(&execution_id) {
                if let Some(slot) = self.slots.get_mut(&exec.instance_id) {
                    slot.executions.retain(|e| *e != execution_id);
                    if slot.held.as_deref() == Some(execution_id.as_str()) {
                        slot.held = None;
                    }
                }
            }
        }
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
                |p| matches!(p, Pending::TakeTrigger { instance_id, .. } if instance_id == *id),
            )
        })
        .cloned()
        .collect();
    for id in requests {
        let path = cx.paths().trigger(&id);
        // The node's data, if any, is the job parameter of this run (`TriggerJob`'s).
        let parameter = cx
            .mirror
            .cache()
            .data(&path)
            .filter(|d| !d.is_empty())
            .map(|d| String::from_utf8_lossy(d).into_owned());
        let ops = vec![Op::delete(path)];
        let pending = Pending::TakeTrigger {
            instance_id: id,
            parameter,
        };
        cx.commit(pending, ops, &[]);
    }
}
