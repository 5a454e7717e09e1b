//! Taking items back: void, revoke, and the release of items once their worker has certainly
//! stopped (it declined or answered them, or its lease ran out); execution timeouts, lease
//! lapses and self-fencing.

use std::time::{Duration, SystemTime};

use tracing::warn;

use super::execution::{Execution, Void};
use super::Runs;
use crate::coordination::events::{ItemOutcome, WorkerEvent};
use crate::coordination::job::instances::Instances;
use crate::coordination::job::io::{Cx, Pending};
use crate::coordination::job::writes::{self, Release};
use crate::coordination::job::Observation;
use crate::registry::{Error as RegError, OpResult};

impl Runs {
    /// Takes the items of an execution back: answers are refused from now on, and the items are
    /// released as `release` says once its worker has certainly stopped (see
    /// [`Runs::reconcile_executions`]). `notify` sends the worker a `Revoke`.
    pub(in crate::coordination::job) fn void(
        &mut self,
        cx: &mut Cx,
        instances: &Instances,
        execution_id: &str,
        reason: &str,
        release: Release,
        notify: bool,
    ) {
        let held = self.is_held(execution_id);
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        if exec.void.is_some() {
            return; // the first reason stands
        }
        // A run claimed ahead and given up before its instant never ran: its items are freed as
        // if never claimed (nothing for failover), and the fire decides for the instance again.
        let release = if held && release != Release::None {
            Release::Unrun
        } else {
            release
        };
        exec.void = Some(Void {
            reason: reason.to_string(),
            release,
            waiting_ack: false,
            restart: false,
        });
        let items = exec.unreleased();
        let instance = exec.instance_id.clone();
        let delivered = exec.delivered;
        warn!(job = %cx.name(), execution = %execution_id, instance = %instance, items = ?items, reason,
              "execution taken back");
        exec.note(
            SystemTime::from(cx.env.wall),
            "revoke",
            vec![
                ("items", format!("{items:?}")),
                ("reason", reason.to_string()),
            ],
        );
        if held {
            let slot = self.slot(&instance);
            slot.held = None;
            slot.claimed_fire = None;
        }
        if notify && delivered && !items.is_empty() {
            if let Some(local) = instances.get(&instance).filter(|l| l.gone().is_none()) {
                let event = WorkerEvent::Revoke {
                    items: items.clone(),
                    reason: reason.to_string(),
                };
                cx.send(local.stream(), event);
            }
        }
        if delivered {
            cx.observe(Observation::Revoked {
                items,
                reason: reason.to_string(),
            });
        }
        if release == Release::None {
            self.release_done(cx, execution_id);
        }
    }

    /// [`Runs::void`] with a `Revoke` that the worker must acknowledge: its lease is not
    /// renewed until it declines the items (or answers), so it stops in any case.
    pub(in crate::coordination::job) fn revoke(
        &mut self,
        cx: &mut Cx,
        instances: &Instances,
        execution_id: &str,
        reason: &str,
        release: Release,
    ) {
        let Some(exec) = self.executions.get(execution_id) else {
            return;
        };
        if exec.void.is_some() {
            return;
        }
        let (instance, delivered) = (exec.instance_id.clone(), exec.delivered);
        self.void(cx, instances, execution_id, reason, release, true);
        let unreleased = self
            .executions
            .get(execution_id)
            .is_some_and(|e| !e.unreleased().is_empty());
        if delivered && release != Release::None && unreleased {
            if let Some(void) = self
                .executions
                .get_mut(execution_id)
                .and_then(|e| e.void.as_mut())
            {
                void.waiting_ack = true;
            }
            self.slot(&instance).withheld = true;
        }
    }

    /// Revokes every execution of local instance `id` (a remote shutdown).
    pub(in crate::coordination::job) fn revoke_all_of(
        &mut self,
        cx: &mut Cx,
        instances: &Instances,
        id: &str,
        reason: &str,
    ) {
        for execution_id in self.of_instance(id).to_vec() {
            self.revoke(cx, instances, &execution_id, reason, Release::Abandoned);
        }
    }

    /// Voids every execution of local instance `id`, whose stream ended: nothing is sent to it
    /// any more, and its items go with its leave.
    pub(in crate::coordination::job) fn void_all_of(
        &mut self,
        cx: &mut Cx,
        instances: &Instances,
        id: &str,
    ) {
        for execution_id in self.of_instance(id).to_vec() {
            let reason = "the worker's stream ended";
            self.void(
                cx,
                instances,
                &execution_id,
                reason,
                Release::Abandoned,
                false,
            );
        }
    }

    /// What was delivered to `id` under a lease epoch before `epoch` is void: its worker
    /// stopped when that lease ran out, which is the acknowledgement.
    pub(in crate::coordination::job) fn lease_lapsed(
        &mut self,
        cx: &mut Cx,
        instances: &Instances,
        id: &str,
        epoch: u64,
    ) {
        let lapsed: Vec<String> = self
            .executions
            .values()
            .filter(|e| e.instance_id == id && e.delivered && e.lease_epoch < epoch)
            .map(|e| e.id.clone())
            .collect();
        for execution_id in lapsed {
            let reason = "the worker's lease ran out before the execution was answered";
            self.void(
                cx,
                instances,
                &execution_id,
                reason,
                Release::Abandoned,
                true,
            );
            if let Some(void) = self
                .executions
                .get_mut(&execution_id)
                .and_then(|e| e.void.as_mut())
            {
                void.waiting_ack = false; // the lapse is the acknowledgement
            }
        }
    }

    /// A new session: everything decided in the old one is void. The workers' leases ran out
    /// before the old session could expire, so their items may be given back at once; answers
    /// held but not recorded cannot be any more (the session they were to be written in is
    /// gone, and with it the execution).
    pub(in crate::coordination::job) fn new_session(&mut self, cx: &mut Cx, instances: &Instances) {
        let ids: Vec<String> = self.executions.keys().cloned().collect();
        for execution_id in ids {
            if let Some(e) = self.executions.get_mut(&execution_id) {
                e.held.release_all();
            }
            let reason = "the registry session expired";
            self.void(cx, instances, &execution_id, reason, Release::None, true);
        }
        for slot in self.slots.values_mut() {
            slot.withheld = false;
        }
    }

    /// Items whose release can be written now: those of void executions whose worker
    /// acknowledged, or whose lease ran out, or that never got the trigger; and those a worker
    /// declined whose release has not landed yet (the session was down, or the write got no
    /// reply). A gone instance's items go with its leave.
    fn release_due(&mut self, cx: &mut Cx, instances: &Instances) {
        let due: Vec<(String, Vec<i32>, Release, String)> = self
            .executions
            .iter()
            .filter_map(|(id, e)| {
                let gone = instances
                    .get(&e.instance_id)
                    .is_some_and(|l| l.gone().is_some());
                if gone {
                    return None;
                }
                let Some(void) = e.void.as_ref() else {
                    let items: Vec<i32> = e
                        .unreleased()
                        .into_iter()
                        .filter(|i| e.declined.contains(i))
                        .collect();
                    let reason = "declined by the worker".to_string();
                    return (!items.is_empty())
                        .then(|| (id.clone(), items, Release::Abandoned, reason));
                };
                if void.waiting_ack {
                    return None;
                }
                let items = e.unreleased();
                (!items.is_empty()).then(|| (id.clone(), items, void.release, void.reason.clone()))
            })
            .collect();
        for (id, items, release, reason) in due {
            if items.iter().any(|i| cx.io.is_locked(*i)) || !cx.connected() {
                continue;
            }
            self.release_items(cx, &id, &items, release, &reason);
        }
    }

    /// Writes the release of `items` of an execution.
    pub(super) fn release_items(
        &mut self,
        cx: &mut Cx,
        execution_id: &str,
        items: &[i32],
        release: Release,
        reason: &str,
    ) {
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        let mut ops = writes::release_ops(
            cx.view(),
            cx.paths(),
            &exec.instance_id,
            items,
            &exec.versions,
            exec.monitored,
            release,
        );
        if release == Release::Failed && !ops.is_empty() {
            // Timed out: a failure, retried as the job's policy says.
            for i in items {
                let next =
                    super::answers::next_retry(cx, exec.attempt, exec.job_parameter.as_ref(), *i);
                ops.extend(writes::retry_ops(cx.view(), cx.paths(), *i, next));
            }
        }
        if exec.void.as_ref().is_some_and(|v| v.restart) && !ops.is_empty() {
            // A hold given back unasked: its restart waits for the backoff.
            let next = Runs::next_hold(cx, exec.attempt, exec.started);
            for i in items {
                ops.extend(writes::retry_ops(
                    cx.view(),
                    cx.paths(),
                    *i,
                    Some(next.clone()),
                ));
            }
        }
        exec.releasing.extend(items.iter().copied());
        if ops.is_empty() {
            let outcome = ItemOutcome::Revoked(reason.to_string());
            for i in items {
                exec.releasing.remove(i);
                exec.outcomes.insert(*i, outcome.clone());
            }
            if exec.is_done() {
                self.finish(cx, execution_id);
            }
            return;
        }
        let pending = Pending::Release {
            execution_id: execution_id.to_string(),
            items: items.to_vec(),
        };
        cx.commit(pending, ops, items);
    }

    pub(in crate::coordination::job) fn released(
        &mut self,
        cx: &mut Cx,
        execution_id: &str,
        items: Vec<i32>,
        result: Result<Vec<OpResult>, RegError>,
    ) {
        cx.io.unlock(&items);
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
        let landed = result.is_ok();
        match result {
            Err(e) if e.is_connection_problem() && !matches!(e, RegError::SessionExpired) => {
                cx.write_failed("releasing items", &e);
                return;
            }
            // Refused: someone released them already (the leader, a new session).
            Err(e) => cx.write_failed("releasing items", &e),
            Ok(_) => {}
        }
        let exec = self.executions.get_mut(execution_id).expect("checked");
        let failed = landed
            && exec
                .void
                .as_ref()
                .is_some_and(|v| v.release == Release::Failed);
        for i in &items {
            if failed {
                super::note_failure(cx, exec, *i, &reason);
            }
            exec.outcomes
                .insert(*i, ItemOutcome::Revoked(reason.clone()));
        }
        if exec.is_done() {
            self.finish(cx, execution_id);
        }
    }

    /// A void execution with nothing to write: its open items are over.
    pub(super) fn release_done(&mut self, cx: &mut Cx, execution_id: &str) {
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
            self.finish(cx, execution_id);
        }
    }

    /// Timeouts, and releases that are due.
    pub(in crate::coordination::job) fn reconcile_executions(
        &mut self,
        cx: &mut Cx,
        instances: &Instances,
    ) {
        let now = cx.env.now;
        let expired: Vec<(String, Duration)> = self
            .executions
            .values()
            .filter(|e| e.void.is_none() && e.delivered)
            .filter_map(|e| {
                e.timeout
                    .filter(|t| now.saturating_duration_since(e.started) > *t)
                    .map(|t| (e.id.clone(), t))
            })
            .collect();
        for (id, timeout) in expired {
            let reason = format!(
                "execution timeout: not answered within {} s",
                timeout.as_secs()
            );
            self.revoke(cx, instances, &id, &reason, Release::Failed);
        }
        self.release_due(cx, instances);
    }

    /// Self-fencing: after 2/3 of the session timeout without a proof that the session lives,
    /// every execution is revoked (its release waits for the registry and the workers).
    pub(in crate::coordination::job) fn check_self_fencing(
        &mut self,
        cx: &mut Cx,
        instances: &Instances,
    ) {
        let Some(proof) = cx.env.proof else { return };
        let silent = cx.env.now.saturating_duration_since(proof);
        if silent <= cx.settings().session_timeout * 2 / 3 {
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
            self.revoke(cx, instances, &id, &reason, Release::Abandoned);
        }
    }

    /// What the leave of local instance `id` writes about its runs: each execution's open
    /// items are handed over to `taker` in the same write (when there is one and the run
    /// ran), or released. `None` while answers of its runs are being recorded: the leave
    /// comes after them.
    pub(in crate::coordination::job) fn leave_ops(
        &self,
        cx: &Cx,
        id: &str,
        taker: Option<&str>,
    ) -> Option<LeaveOps> {
        let execs: Vec<&Execution> = self
            .of_instance(id)
            .iter()
            .filter_map(|e| self.executions.get(e).map(|e| &**e))
            .collect();
        if execs.iter().any(|e| !e.held.is_empty()) {
            return None;
        }
        let mut leave = LeaveOps::default();
        for exec in execs {
            let unreleased = exec.unreleased();
            // Claimed ahead of an instant it never reached: nothing ran, nothing to hand on.
            let unrun = exec
                .void
                .as_ref()
                .is_some_and(|v| v.release == Release::Unrun);
            let handover = taker.filter(|_| !unrun).and_then(|taker| {
                writes::handover_ops(
                    cx.view(),
                    cx.paths(),
                    id,
                    taker,
                    &unreleased,
                    &exec.versions,
                    exec.monitored,
                )
            });
            match handover {
                Some(handover) => {
                    leave.ops.extend(handover);
                    leave.handed.extend(unreleased.iter().copied());
                }
                None => leave.ops.extend(writes::release_ops(
                    cx.view(),
                    cx.paths(),
                    id,
                    &unreleased,
                    &exec.versions,
                    exec.monitored,
                    if unrun {
                        Release::Unrun
                    } else {
                        Release::Abandoned
                    },
                )),
            }
            leave.items.extend(unreleased);
        }
        Some(leave)
    }

    /// The items of local instance `id`'s runs that are neither answered nor released.
    pub(in crate::coordination::job) fn open_items_of(&self, id: &str) -> Vec<i32> {
        self.of_instance(id)
            .iter()
            .filter_map(|e| self.executions.get(e))
            .flat_map(|e| e.unreleased())
            .collect()
    }

    /// Every item of the executions `ids`.
    pub(in crate::coordination::job) fn items_of(&self, ids: &[String]) -> Vec<i32> {
        ids.iter()
            .filter_map(|e| self.executions.get(e))
            .flat_map(|e| e.items.iter().copied())
            .collect()
    }
}

/// What a leave writes about the runs of the instance that leaves.
#[derive(Debug, Default)]
pub(in crate::coordination::job) struct LeaveOps {
    /// The releases and hand-overs.
    pub ops: Vec<crate::registry::Op>,
    /// Every item they write about (locked while the leave is in flight).
    pub items: Vec<i32>,
    /// The items handed over to the taker.
    pub handed: Vec<i32>,
}
