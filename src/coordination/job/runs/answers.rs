//! Answers and declines: how a run ends. An answer is recorded only by a write fenced on the
//! epoch its execution left, so an answer for an item that was handed over meanwhile is
//! refused, never recorded; a decline gives items back without an outcome.
//!
//! Once the sidecar holds an answer it records it itself ([`super::execution::HeldAnswers`]):
//! a write whose outcome is unknown is resolved by a fresh read and written again if it did
//! not land. The call is replied to once its items are recorded, or one is refused.

use std::time::SystemTime;

use tracing::{debug, info};

use super::execution::{Execution, HeldWrite};
use super::Runs;
use crate::coordination::events::{ItemOutcome, Source};
use crate::coordination::job::instances::Instances;
use crate::coordination::job::io::{Cx, Pending};
use crate::coordination::job::mirror::JobView;
use crate::coordination::job::writes::{self, Release};
use crate::coordination::job::{Action, Reply, ReplyId};
use crate::coordination::CoordError;
use crate::elasticjob::extras::PendingRetry;
use crate::registry::{Error as RegError, OpResult};

impl Runs {
    /// The checks every answer and decline passes first (an execution this job does not hold
    /// is answered from the sidecar's memory of finished ones, [`Action::Remembered`]).
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

    /// An answer (`Complete`, `ReportFailure`): checked against the execution and the view,
    /// then held and written.
    pub(in crate::coordination::job) fn answer(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
        reply: ReplyId,
        instance_id: &str,
        execution_id: &str,
        outcomes: Vec<(i32, ItemOutcome)>,
    ) {
        if !self.contains(execution_id) {
            return remembered(cx, reply, execution_id, instance_id, false);
        }
        let items: Vec<i32> = outcomes.iter().map(|(i, _)| *i).collect();
        let exec = match self.answerable(instance_id, execution_id, &items) {
            Ok(exec) => exec,
            Err(e) => return cx.reply(reply, Reply::Answered(Err(e))),
        };
        if let Some(void) = &exec.void {
            let refused = CoordError::FailedPrecondition(format!(
                "execution {execution_id} was taken back ({}); its answers are refused",
                void.reason
            ));
            // The worker answered, so it has stopped: that acknowledges a revoke.
            self.acknowledged(cx, instances, execution_id);
            return cx.reply(reply, Reply::Answered(Err(refused)));
        }
        if let Some((item, _)) = outcomes
            .iter()
            .find(|(i, _)| matches!(exec.outcomes.get(i), Some(ItemOutcome::Revoked(_))))
        {
            let refused = CoordError::FailedPrecondition(format!(
                "item {item} of execution {execution_id} was taken back; its answer is refused"
            ));
            return cx.reply(reply, Reply::Answered(Err(refused)));
        }
        // Items answered before (recorded or held) keep their first answer: this call waits
        // with them, so a repeated answer is harmless.
        let fresh: Vec<(i32, ItemOutcome)> = outcomes
            .into_iter()
            .filter(|(i, _)| !exec.outcomes.contains_key(i) && !exec.held.contains(*i))
            .collect();
        if let Some(item) = items_taken_away(exec, cx.view(), &fresh) {
            // Its `running` node is gone or another's: the item was handed over meanwhile.
            let reason = format!("item {item} was handed over while it ran");
            self.void(cx, instances, execution_id, &reason, Release::None, true);
            let refused = CoordError::FailedPrecondition(format!(
                "execution {execution_id} no longer holds item {item} (it was handed over while it ran); the answer is refused"
            ));
            return cx.reply(reply, Reply::Answered(Err(refused)));
        }
        let exec = self.executions.get_mut(execution_id).expect("checked");
        for (i, outcome) in fresh {
            exec.held.hold(i, outcome);
        }
        exec.held.wait(reply, items.into_iter().collect());
        self.settle_answers(cx, execution_id);
        if cx.connected() {
            self.write_held(cx, execution_id);
        }
        // Not connected: written by the reconcile once the session is back.
    }

    /// Writes the held answers of an execution that are due, fenced on the epochs it left.
    fn write_held(&mut self, cx: &mut Cx, execution_id: &str) {
        let Some(exec) = self.executions.get(execution_id) else {
            return;
        };
        let items: Vec<i32> = exec
            .held
            .at(HeldWrite::Due)
            .into_iter()
            .filter(|i| !cx.io.is_locked(*i))
            .collect();
        if items.is_empty() || exec.generation != cx.io.generation() {
            return;
        }
        // Each item's end, and with it what becomes of its pending retry: a failure schedules
        // the next attempt the job's policy allows, a completion drops the one there. A hold
        // its worker ended, either way, is restarted after the job's restart backoff.
        let mut ops = Vec::new();
        for i in &items {
            let item_ops = writes::finish_ops(
                cx.view(),
                cx.paths(),
                &exec.instance_id,
                &[*i],
                &exec.versions,
                exec.monitored,
            );
            let next = match exec.held.outcome(*i) {
                _ if exec.source == Source::Resident => {
                    Some(Runs::next_hold(cx, exec.attempt, exec.started))
                }
                Some(ItemOutcome::Failed(_)) => {
                    next_retry(cx, exec.attempt, exec.job_parameter.as_ref(), *i)
                }
                _ => None,
            };
            if !item_ops.is_empty() || !exec.monitored {
                ops.extend(item_ops);
                ops.extend(writes::retry_ops(cx.view(), cx.paths(), *i, next));
            }
        }
        if ops.is_empty() {
            // Nothing to write (monitorExecution off): recorded at once.
            debug!(job = %cx.name(), execution = %execution_id, items = ?items, "answer accepted");
            self.record_held(cx, execution_id, &items);
            return;
        }
        let exec = self.executions.get_mut(execution_id).expect("checked");
        exec.held.set(&items, HeldWrite::InFlight);
        let pending = Pending::Finish {
            execution_id: execution_id.to_string(),
            items: items.clone(),
        };
        cx.commit(pending, ops, &items);
    }

    /// Held answers not written yet (the session was down when they came, or a read showed
    /// that a write did not land): written now.
    pub(in crate::coordination::job) fn reconcile_answers(&mut self, cx: &mut Cx) {
        let due: Vec<String> = self
            .executions
            .iter()
            .filter(|(_, e)| !e.held.at(HeldWrite::Due).is_empty())
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            self.write_held(cx, &id);
        }
    }

    /// The write of held answers was answered (or not).
    pub(in crate::coordination::job) fn finished(
        &mut self,
        cx: &mut Cx,
        instances: &Instances,
        execution_id: &str,
        items: Vec<i32>,
        result: Result<Vec<OpResult>, RegError>,
    ) {
        cx.io.unlock(&items);
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        match result {
            Ok(_) => {
                debug!(job = %cx.name(), execution = %execution_id, items = ?items, "answer accepted");
                self.record_held(cx, execution_id, &items);
            }
            Err(RegError::SessionExpired) => {
                // Decided in a session that is gone: it can no longer be recorded by this
                // execution, which the new session voids.
                exec.held.release(&items);
                if exec.void.is_some() {
                    self.release_done(cx, execution_id);
                }
                cx.write_failed("recording an answer", &RegError::SessionExpired);
            }
            Err(e) if e.is_connection_problem() || exec.held.once_unknown(&items) => {
                // It may have landed (or, refused now, an earlier write of it may have): the
                // fresh read that `write_failed` asks for tells (`resolve_held`).
                exec.held.set(&items, HeldWrite::Unknown);
                cx.write_failed("recording an answer", &e);
            }
            Err(e) => {
                // The fence refused it: the items were taken from this execution meanwhile.
                // The execution is void.
                exec.held.release(&items);
                cx.write_failed("recording an answer", &e);
                let reason = format!("its items were taken back while it ran ({e})");
                self.void(cx, instances, execution_id, &reason, Release::None, true);
            }
        }
    }

    /// Held answers whose write had no reply, after a fresh read: an item whose `running`
    /// node no longer carries this execution's token was recorded (nobody else removes it
    /// while this instance is registered); one whose node still does, at the epoch the
    /// execution left, was not, and is written again; one whose epoch moved under it was
    /// taken from the execution meanwhile.
    pub(in crate::coordination::job) fn resolve_held(
        &mut self,
        cx: &mut Cx,
        instances: &Instances,
    ) {
        let ids: Vec<String> = self
            .executions
            .iter()
            .filter(|(_, e)| !e.held.at(HeldWrite::Unknown).is_empty())
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let exec = &self.executions[&id];
            let mut recorded = Vec::new();
            let mut again = Vec::new();
            let mut taken = None;
            for i in exec.held.at(HeldWrite::Unknown) {
                let item = cx.view().items.get(&i);
                let ours = item
                    .and_then(|it| it.running.as_ref())
                    .is_some_and(|(_, stat)| exec.fencing_tokens.get(&i) == Some(&stat.czxid));
                if !ours || !exec.monitored {
                    recorded.push(i);
                } else if item.and_then(|it| it.version) == exec.versions.get(&i).copied() {
                    again.push(i);
                } else {
                    taken.get_or_insert(i);
                }
            }
            let exec = self.executions.get_mut(&id).expect("listed");
            exec.held.set(&again, HeldWrite::Due);
            if !again.is_empty() {
                info!(job = %cx.name(), execution = %id, items = ?again,
                      "an answer's write did not land: writing it again");
            }
            self.record_held(cx, &id, &recorded);
            if let Some(item) = taken {
                if let Some(exec) = self.executions.get_mut(&id) {
                    exec.held.release(&[item]);
                }
                let reason =
                    format!("item {item} was handed over while its answer was being recorded");
                self.void(cx, instances, &id, &reason, Release::None, true);
            }
        }
    }

    /// Held answers of `items` are recorded in the registry: they become the items' outcomes.
    fn record_held(&mut self, cx: &mut Cx, execution_id: &str, items: &[i32]) {
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        for (i, outcome) in exec.held.release(items) {
            self.record_outcomes(cx, execution_id, &[i], &outcome);
        }
    }

    /// Replies to the answer calls whose items all have an outcome now.
    pub(super) fn settle_answers(&mut self, cx: &mut Cx, execution_id: &str) {
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        let settled = exec.held.settled(&exec.outcomes);
        for (reply, result) in settled {
            let result = result.map_err(|(item, reason)| {
                CoordError::FailedPrecondition(format!(
                    "item {item} of execution {execution_id} was taken back ({reason}); the answer is refused"
                ))
            });
            cx.reply(reply, Reply::Answered(result));
        }
    }

    // ----- declines ---------------------------------------------------------------------------

    /// A `Decline`: items given back without an outcome (empty: all of them).
    #[allow(clippy::too_many_arguments)]
    pub(in crate::coordination::job) fn decline(
        &mut self,
        cx: &mut Cx,
        instances: &mut Instances,
        reply: ReplyId,
        instance_id: &str,
        execution_id: &str,
        items: Vec<i32>,
        reason: &str,
    ) {
        if !self.contains(execution_id) {
            return remembered(cx, reply, execution_id, instance_id, true);
        }
        let exec = match self.answerable(instance_id, execution_id, &items) {
            Ok(exec) => exec,
            Err(e) => return cx.reply(reply, Reply::Answered(Err(e))),
        };
        let items: Vec<i32> = if items.is_empty() {
            exec.items.iter().copied().collect()
        } else {
            items
        };
        // Items declined before and not released yet are given back already.
        let open: Vec<i32> = exec
            .unreleased()
            .into_iter()
            .filter(|i| items.contains(i) && !exec.declined.contains(i))
            .collect();
        let reason = if reason.is_empty() {
            "declined by the worker".to_string()
        } else {
            format!("declined by the worker: {reason}")
        };
        info!(job = %cx.name(), execution = %execution_id, instance = %instance_id, items = ?open, reason = %reason, "items declined");
        let voided = exec.void.is_some();
        let all_open =
            open.len() + exec.declined.len() == exec.unreleased().len() && exec.held.is_empty();
        if let Some(exec) = self.executions.get_mut(execution_id) {
            exec.note(
                SystemTime::from(cx.env.wall),
                "decline",
                vec![("items", format!("{open:?}")), ("reason", reason.clone())],
            );
        }
        if voided {
            self.acknowledged(cx, instances, execution_id);
        } else if all_open {
            let hold = self
                .executions
                .get(execution_id)
                .is_some_and(|e| e.source == Source::Resident);
            self.void(
                cx,
                instances,
                execution_id,
                &reason,
                Release::Abandoned,
                false,
            );
            if hold {
                // Given back unasked: restarted after the backoff, not at once.
                if let Some(void) = self
                    .executions
                    .get_mut(execution_id)
                    .and_then(|e| e.void.as_mut())
                {
                    void.restart = true;
                }
            }
        } else if !open.is_empty() {
            // Held: the sidecar writes their release itself, now or once the session is back,
            // and again after a write that did not land (`Runs::reconcile_executions`).
            let exec = self.executions.get_mut(execution_id).expect("checked");
            exec.declined.extend(open.iter().copied());
            if cx.connected() {
                self.release_items(cx, execution_id, &open, Release::Abandoned, &reason);
            }
        }
        cx.reply(reply, Reply::Answered(Ok(())));
    }

    /// The worker has stopped the items of a revoked execution: no need to wait for its lease.
    fn acknowledged(&mut self, cx: &Cx, instances: &mut Instances, execution_id: &str) {
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        if let Some(void) = exec.void.as_mut() {
            void.waiting_ack = false;
        }
        instances.stopped(&exec.instance_id, cx.env.now);
    }
}

/// After a run of item `i` (attempt `attempt`) failed: the retry due next under the job's
/// policy, or `None` when there is no policy or its attempts ran out. The attempt the item is
/// at is its pending retry's, when it has one (a run other than a retry or a FAILOVER run of
/// one removed it as it started), else the run's. The retry carries the job parameter the
/// failed run had of its own (`parameter`, a trigger's), so every attempt runs with it.
pub(super) fn next_retry(
    cx: &Cx,
    attempt: u32,
    parameter: Option<&String>,
    i: i32,
) -> Option<PendingRetry> {
    let policy = cx.view().extras.retry?;
    let pending = cx.view().items.get(&i).and_then(|it| it.retry.as_ref());
    let current = pending.map_or(attempt, |r| r.attempt);
    let next = policy.next_attempt(current)?;
    let wait = policy.backoff(next);
    Some(PendingRetry {
        attempt: next,
        due_ms: cx.env.wall.timestamp_millis() + wait.as_millis() as i64,
        parameter: parameter.cloned(),
    })
}

/// An answer or decline for an execution this job does not hold (any more): the sidecar's
/// memory of finished executions answers it ([`Action::Remembered`]).
fn remembered(cx: &mut Cx, reply: ReplyId, execution_id: &str, instance_id: &str, decline: bool) {
    cx.out.push(Action::Remembered {
        reply,
        execution_id: execution_id.to_string(),
        instance_id: instance_id.to_string(),
        decline,
    });
}

/// The first answered item whose `running` node no longer carries this execution's token.
fn items_taken_away(
    exec: &Execution,
    view: &JobView,
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
