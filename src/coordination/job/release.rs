//! Taking items back: void, revoke, and the release of items once their worker has certainly
//! stopped (it declined or answered them, or its lease ran out); execution timeouts and
//! self-fencing; the end of an execution.

use std::time::Duration;

use tracing::{info, warn};

use super::state::{JobState, Pending};
use super::{Action, Env, Observation};
use crate::coordination::events::WorkerEvent;
use crate::coordination::execution::{Finished, ItemOutcome, Void};
use crate::coordination::failover::{self, Release};
use crate::coordination::observer::ExecutionRecord;
use crate::registry::{Error as RegError, OpResult};

impl JobState {
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
        env: &Env,
        out: &mut Vec<Action>,
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
        if held {
            if let Some(local) = self.locals.get_mut(&exec.instance_id) {
                local.held = None;
                local.claimed_fire = None;
            }
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
        exec.note(
            std::time::SystemTime::from(env.wall),
            "revoke",
            vec![
                ("items", format!("{items:?}")),
                ("reason", reason.to_string()),
            ],
        );
        if notify && delivered && !items.is_empty() {
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
            self.release_done(execution_id, env, out);
        }
    }

    /// [`JobState::void`] with a `Revoke` that the worker must acknowledge: its lease is not
    /// renewed until it declines the items (or answers), so it stops in any case.
    pub(super) fn revoke(
        &mut self,
        execution_id: &str,
        reason: &str,
        release: Release,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let Some(exec) = self.executions.get(execution_id) else {
            return;
        };
        if exec.void.is_some() {
            return;
        }
        let (instance, delivered) = (exec.instance_id.clone(), exec.delivered);
        self.void(execution_id, reason, release, true, env, out);
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
            if let Some(local) = self.locals.get_mut(&instance) {
                local.withheld = true;
            }
        }
    }

    /// Void executions whose items can be released now: their worker acknowledged, or its
    /// lease ran out, or it never got the trigger. A gone instance's items go with its leave.
    pub(super) fn release_due(&mut self, env: &Env, out: &mut Vec<Action>) {
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
            self.release_items(&id, &items, release, &reason, env, out);
        }
    }

    /// Writes the release of `items` of an execution.
    pub(super) fn release_items(
        &mut self,
        execution_id: &str,
        items: &[i32],
        release: Release,
        reason: &str,
        env: &Env,
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
                self.finish_execution(execution_id, env, out);
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
                    self.finish_execution(execution_id, env, out);
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
                    self.finish_execution(execution_id, env, out);
                }
            }
        }
    }

    /// A void execution with nothing to write: its open items are over.
    pub(super) fn release_done(&mut self, execution_id: &str, env: &Env, out: &mut Vec<Action>) {
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
            self.finish_execution(execution_id, env, out);
        }
    }

    /// Every item has an outcome: free the instance and tell the observer.
    pub(super) fn finish_execution(
        &mut self,
        execution_id: &str,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        self.settle_answers(execution_id, out);
        let Some(exec) = self.executions.remove(execution_id) else {
            return;
        };
        if let Some(local) = self.locals.get_mut(&exec.instance_id) {
            local.drop_execution(execution_id);
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
              source = exec.source.as_str(), failed, elapsed_ms = env.now.saturating_duration_since(exec.started).as_millis() as u64,
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
                    duration: env.now.saturating_duration_since(exec.started),
                    items: exec.outcomes.clone(),
                    task_id: exec.task_id.clone(),
                    fire_time: exec.fire_time.into(),
                    fencing_tokens: exec.fencing_tokens.clone(),
                    trace: exec.trace.clone(),
                    events: exec.events.clone(),
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
    pub(super) fn drop_execution(&mut self, execution_id: &str, env: &Env, out: &mut Vec<Action>) {
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
            self.finish_execution(execution_id, env, out);
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
            self.revoke(&id, &reason, Release::Failed, env, out);
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
            self.revoke(&id, &reason, Release::Abandoned, env, out);
        }
    }
}
