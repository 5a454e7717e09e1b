//! Answers and declines: how a run ends. An answer is recorded only by a write fenced on the
//! epoch its execution left, so an answer for an item that was handed over meanwhile is
//! refused, never recorded; a decline gives items back without an outcome.

use tracing::{debug, info, warn};

use super::state::{JobState, Pending};
use super::{Action, Env, Reply, ReplyId};
use crate::coordination::execution::{Execution, HeldWrite, ItemOutcome};
use crate::coordination::failover::{self, Release};
use crate::coordination::CoordError;
use crate::registry::{Error as RegError, OpResult};

impl JobState {
    // ----- answers ----------------------------------------------------------------------------

    /// Whether the state holds `execution_id` (the driver answers for others from memory).
    pub(crate) fn has_execution(&self, execution_id: &str) -> bool {
        self.executions.contains_key(execution_id)
    }

    /// The checks every answer and decline passes first.
    pub(super) fn answerable(
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

    /// An answer: checked against the execution and the view, then held and written. The
    /// call is replied to once its items are recorded (or one is refused); the sidecar writes
    /// a held answer again itself when a write goes unconfirmed, so no answer waits for the
    /// worker to send it twice.
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
        if let Some((item, _)) = outcomes
            .iter()
            .find(|(i, _)| matches!(exec.outcomes.get(i), Some(ItemOutcome::Revoked(_))))
        {
            let refused = CoordError::FailedPrecondition(format!(
                "item {item} of execution {execution_id} was taken back; its answer is refused"
            ));
            return self.reply(reply, Reply::Answered(Err(refused)), out);
        }
        // Items answered before (recorded or held) keep their first answer: this call waits
        // with them, so a repeated answer is harmless.
        let fresh: Vec<(i32, ItemOutcome)> = outcomes
            .into_iter()
            .filter(|(i, _)| !exec.outcomes.contains_key(i) && !exec.held.contains(*i))
            .collect();
        if let Some(item) = items_taken_away(exec, &self.view, &fresh) {
            // Its `running` node is gone or another's: the item was handed over meanwhile.
            let reason = format!("item {item} was handed over while it ran");
            self.void(execution_id, &reason, Release::None, true, env, out);
            let refused = CoordError::FailedPrecondition(format!(
                "execution {execution_id} no longer holds item {item} (it was handed over while it ran); the answer is refused"
            ));
            return self.reply(reply, Reply::Answered(Err(refused)), out);
        }
        let exec = self.executions.get_mut(execution_id).expect("checked");
        for (i, outcome) in fresh {
            exec.held.hold(i, outcome);
        }
        exec.held.wait(reply, items.into_iter().collect());
        self.settle_answers(execution_id, out);
        if self.connected(env) {
            self.write_held(execution_id, env, out);
        }
        // Not connected: written by the reconcile once the session is back.
    }

    /// Writes the held answers of an execution that are due, fenced on the epochs it left.
    fn write_held(&mut self, execution_id: &str, env: &Env, out: &mut Vec<Action>) {
        let Some(exec) = self.executions.get(execution_id) else {
            return;
        };
        let items: Vec<i32> = exec
            .held
            .at(HeldWrite::Due)
            .into_iter()
            .filter(|i| !self.locked.contains(i))
            .collect();
        if items.is_empty() || exec.generation != self.generation {
            return;
        }
        let ops = failover::finish_ops(
            &self.view,
            &self.paths,
            &exec.instance_id,
            &items,
            &exec.versions,
            exec.monitored,
        );
        if ops.is_empty() {
            // Nothing to write (monitorExecution off): recorded at once.
            debug!(job = %self.name, execution = %execution_id, items = ?items, "answer accepted");
            self.record_held(execution_id, &items, env, out);
            return;
        }
        let exec = self.executions.get_mut(execution_id).expect("checked");
        exec.held.set(&items, HeldWrite::InFlight);
        self.commit(
            Pending::Finish {
                execution_id: execution_id.to_string(),
                items: items.clone(),
            },
            ops,
            &items,
            out,
        );
    }

    /// Held answers not written yet (the session was down when they came, or a read showed
    /// that a write did not land): written now.
    pub(super) fn reconcile_answers(&mut self, env: &Env, out: &mut Vec<Action>) {
        let due: Vec<String> = self
            .executions
            .iter()
            .filter(|(_, e)| !e.held.at(HeldWrite::Due).is_empty())
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            self.write_held(&id, env, out);
        }
    }

    pub(super) fn on_finished(
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
        match result {
            Ok(_) => {
                debug!(job = %self.name, execution = %execution_id, items = ?items, "answer accepted");
                self.record_held(execution_id, &items, env, out);
            }
            Err(RegError::SessionExpired) => {
                // Decided in a session that is gone: it can no longer be recorded by this
                // execution, which the new session voids.
                exec.held.release(&items);
                if exec.void.is_some() {
                    self.release_done(execution_id, env, out);
                }
                self.write_failed("recording an answer", &RegError::SessionExpired, env);
            }
            Err(e) if e.is_connection_problem() || exec.held.once_unknown(&items) => {
                // It may have landed (or, refused now, an earlier write of it may have): the
                // fresh read that `write_failed` asks for tells (`resolve_held`).
                exec.held.set(&items, HeldWrite::Unknown);
                self.write_failed("recording an answer", &e, env);
            }
            Err(e) => {
                // The fence refused it: the items were taken from this execution meanwhile.
                // The execution is void.
                exec.held.release(&items);
                self.write_failed("recording an answer", &e, env);
                let reason = format!("its items were taken back while it ran ({e})");
                self.void(execution_id, &reason, Release::None, true, env, out);
            }
        }
    }

    /// Held answers whose write had no reply, after a fresh read: an item whose `running`
    /// node no longer carries this execution's token was recorded (nobody else removes it
    /// while this instance is registered); one whose node still does, at the epoch the
    /// execution left, was not, and is written again; one whose epoch moved under it was
    /// taken from the execution meanwhile.
    pub(super) fn resolve_held(&mut self, env: &Env, out: &mut Vec<Action>) {
        self.refresh_view();
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
                let item = self.view.items.get(&i);
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
                info!(job = %self.name, execution = %id, items = ?again,
                      "an answer's write did not land: writing it again");
            }
            self.record_held(&id, &recorded, env, out);
            if let Some(item) = taken {
                let exec = self.executions.get_mut(&id).expect("listed");
                exec.held.release(&[item]);
                let reason =
                    format!("item {item} was handed over while its answer was being recorded");
                self.void(&id, &reason, Release::None, true, env, out);
            }
        }
    }

    /// Held answers of `items` are recorded in the registry: they become the items' outcomes.
    fn record_held(&mut self, execution_id: &str, items: &[i32], env: &Env, out: &mut Vec<Action>) {
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        for (i, outcome) in exec.held.release(items) {
            self.record_outcomes(execution_id, &[i], &outcome, env, out);
        }
    }

    /// Replies to the answer calls whose items all have an outcome now.
    pub(super) fn settle_answers(&mut self, execution_id: &str, out: &mut Vec<Action>) {
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
            self.reply(reply, Reply::Answered(result), out);
        }
    }

    pub(super) fn record_outcomes(
        &mut self,
        execution_id: &str,
        items: &[i32],
        outcome: &ItemOutcome,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        let now = std::time::SystemTime::from(env.wall);
        for i in items {
            if let ItemOutcome::Failed(error) = outcome {
                warn!(job = %self.name, execution = %execution_id, item = *i, error = %error, "item failed");
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
        self.settle_answers(execution_id, out);
        let exec = &self.executions[execution_id];
        if exec.is_done() {
            self.finish_execution(execution_id, env, out);
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
        let voided = exec.void.is_some();
        let all_open = open.len() == exec.unreleased().len() && exec.held.is_empty();
        if let Some(exec) = self.executions.get_mut(execution_id) {
            exec.note(
                std::time::SystemTime::from(env.wall),
                "decline",
                vec![("items", format!("{open:?}")), ("reason", reason.clone())],
            );
        }
        if voided {
            self.acknowledged(execution_id, env);
        } else if all_open {
            self.void(execution_id, &reason, Release::Abandoned, false, env, out);
        } else if !open.is_empty() && self.connected(env) {
            self.release_items(execution_id, &open, Release::Abandoned, &reason, env, out);
        }
        self.reply(reply, Reply::Answered(Ok(())), out);
    }

    /// The worker has stopped the items of a revoked execution: no need to wait for its lease.
    pub(super) fn acknowledged(&mut self, execution_id: &str, env: &Env) {
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
