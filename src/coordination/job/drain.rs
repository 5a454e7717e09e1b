//! Drain (SIGTERM): every local worker is told `Shutdown` and takes no new work; an instance
//! with nothing running leaves at once, one with work leaves when it is answered or when its
//! lease, no longer renewed one lease before the deadline, has run out. Nothing is handed to a
//! peer while a local worker may still be running it.

use std::time::Instant;

use tracing::warn;

use super::state::JobState;
use super::{Action, Env, Input, Reply, ReplyId};
use crate::coordination::events::{ShutdownKind, StreamEnd, WorkerEvent};
use crate::coordination::failover::Release;
use crate::coordination::CoordError;

impl JobState {
    pub(super) fn on_drain(
        &mut self,
        reply: ReplyId,
        deadline: Instant,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        self.drain = Some(super::state::Drain { reply, deadline });
        for join in std::mem::take(&mut self.joins_waiting) {
            if let Input::Join { reply, stream, .. } = join {
                self.reply(
                    reply,
                    Reply::Joined(Err(CoordError::Unavailable(
                        "the sidecar is shutting down".into(),
                    ))),
                    out,
                );
                out.push(Action::EndStream { stream });
            }
        }
        let reason = "the sidecar is shutting down";
        let mut held = Vec::new();
        for local in self.locals.values_mut() {
            if local.gone.is_none() && !local.shutting_down {
                local.shutting_down = true;
                out.push(Action::Send {
                    stream: local.stream,
                    event: WorkerEvent::Shutdown {
                        reason: reason.into(),
                        kind: ShutdownKind::Drain,
                    },
                });
            }
            held.extend(local.held.clone());
        }
        // Runs claimed ahead of an instant to come are new work: given up, their items freed.
        for execution_id in held {
            self.void(&execution_id, reason, Release::Unrun, false, env, out);
        }
    }

    /// During a drain: an instance with nothing running leaves at once; one with work leaves
    /// when it is answered, or when its lease (no longer renewed one lease before the
    /// deadline) has run out. At the deadline the drain is over whatever is left.
    pub(super) fn reconcile_drain(
        &mut self,
        reply: ReplyId,
        deadline: Instant,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let idle: Vec<String> = self
            .locals
            .iter()
            .filter(|(_, l)| l.gone.is_none() && l.idle() && l.join_reply.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            self.end_local(&id, StreamEnd::ByWorker, env, out);
        }
        if self.locals.is_empty() || env.now >= deadline {
            if !self.locals.is_empty() {
                warn!(job = %self.name, left = self.locals.len(), "drain deadline reached with instances left");
            }
            self.drain = None;
            let released = self.locals.is_empty();
            self.reply(reply, Reply::Drained { released }, out);
        }
    }
}
