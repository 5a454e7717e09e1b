//! The drain (SIGTERM): every local worker is told `Shutdown` (of kind DRAIN: it may come back
//! once the sidecar does) and takes no new work; an instance with nothing running leaves at
//! once, one with work when it is answered or its lease has run out; at the deadline the drain
//! is over whatever is left.

use std::time::Instant;

use tracing::warn;

use super::{Drain, Instances, DRAINING};
use crate::coordination::events::{ShutdownKind, WorkerEvent};
use crate::coordination::job::io::Cx;
use crate::coordination::job::{Action, Input, Reply, ReplyId};
use crate::coordination::CoordError;

impl Instances {
    /// SIGTERM: every local worker is told `Shutdown` and takes no new work; joins waiting for
    /// the setup are refused.
    pub(in crate::coordination::job) fn start_drain(
        &mut self,
        cx: &mut Cx,
        reply: ReplyId,
        deadline: Instant,
    ) {
        self.drain = Some(Drain { reply, deadline });
        for join in std::mem::take(&mut self.joins_waiting) {
            if let Input::Join { reply, stream, .. } = join {
                let e = CoordError::Unavailable("the sidecar is shutting down".into());
                cx.reply(reply, Reply::Joined(Err(e)));
                cx.out.push(Action::EndStream { stream });
            }
        }
        for local in self.locals.values_mut() {
            if local.gone.is_none() && !local.shutting_down {
                local.shutting_down = true;
                cx.out.push(Action::Send {
                    stream: local.stream,
                    event: WorkerEvent::Shutdown {
                        reason: DRAINING.into(),
                        kind: ShutdownKind::Drain,
                    },
                });
            }
        }
    }

    /// During a drain, the instances that leave now: live, registered, running nothing
    /// (`idle`).
    pub(in crate::coordination::job) fn drained_idle(
        &self,
        idle: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        if self.drain.is_none() {
            return Vec::new();
        }
        self.locals
            .iter()
            .filter(|(id, l)| l.gone.is_none() && l.join_reply.is_none() && idle(id))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The drain is over once every instance has left, or at its deadline whatever is left.
    pub(in crate::coordination::job) fn finish_drain(&mut self, cx: &mut Cx) {
        let Some(drain) = self.drain else {
            return;
        };
        if self.locals.is_empty() || cx.env.now >= drain.deadline {
            if !self.locals.is_empty() {
                warn!(job = %cx.name(), left = self.locals.len(), "drain deadline reached with instances left");
            }
            self.drain = None;
            let released = self.locals.is_empty();
            cx.reply(drain.reply, Reply::Drained { released });
        }
    }
}
