//! Runs claimed ahead of their instant: at the timer's notice, the claim lead before a cron
//! instant, a run's start is written, and its `Trigger` goes out at the instant itself. Until
//! then it can still be given up, and its items are freed as if never claimed: a run never
//! starts before its fire time (`docs/architecture.md`, "Claiming ahead").

use std::time::SystemTime;

use chrono::{DateTime, Utc};
use tracing::{debug, info};

use super::fire::Start;
use super::Runs;
use crate::coordination::events::Source;
use crate::coordination::job::instances::Instances;
use crate::coordination::job::io::Cx;
use crate::coordination::job::writes::Release;

impl Runs {
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
        if cx.view().resident() {
            return; // held, not fired
        }
        let Some(config) = cx.view().config.as_ref() else {
            return;
        };
        if config.max_time_diff_seconds >= 0 || !config.monitor_execution {
            // The clock check belongs to the instant; without `running` nodes there is nothing
            // to claim.
            return;
        }
        let failover = cx.view().failover_on();
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
            let what = Start::of(Source::Cron, fire_time);
            let started = self.start(cx, instances, &id, run, what, Vec::new());
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

    /// A trigger-once request for an instance whose only run is one claimed ahead of a cron
    /// instant to come: that run goes out now as the MANUAL run the request asks for (its items
    /// are the ones a MANUAL run would take, and they are claimed already), and the cron fire
    /// then finds the instance busy, as it would have had nothing been claimed ahead. Returns
    /// whether the request was taken so.
    pub(super) fn promote_held(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
        id: &str,
        parameter: Option<String>,
    ) -> bool {
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
        exec.job_parameter = parameter;
        if !Runs::starting(cx, &execution_id) {
            self.deliver(cx, instances, &execution_id);
        }
        true
    }
}
