//! Comings and goings of local instances that take more than one part: a stream that ends (its
//! runs are taken back), a remote shutdown, the leave that removes an instance and releases or
//! hands over what it ran in one write, a new session, and the drain.

use std::time::Instant;

use super::instances::{DRAINING, REMOTE_SHUTDOWN};
use super::io::{Handed, Pending};
use super::results::handed_execution;
use super::state::{cx, JobState};
use super::{Action, Env, ReplyId, StreamKey};
use crate::coordination::events::StreamEnd;
use crate::registry::{Error as RegError, Op, OpResult, SessionState};

impl JobState {
    pub(super) fn stream_ended(
        &mut self,
        stream: StreamKey,
        end: StreamEnd,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        if let Some(id) = self
            .instances
            .stream_ended(cx!(self, env, out), stream, end)
        {
            self.end_local(&id, end, env, out);
        }
    }

    /// A local instance's stream is over (or being ended by us): no more events, its runs are
    /// void, and it leaves once its worker can no longer be running anything.
    pub(super) fn end_local(&mut self, id: &str, end: StreamEnd, env: &Env, out: &mut Vec<Action>) {
        let busy = !self.runs.idle(id);
        if self.instances.end(cx!(self, env, out), id, end, busy) {
            self.runs
                .void_all_of(cx!(self, env, out), &self.instances, id);
        }
    }

    /// SIGTERM: every worker is told `Shutdown` and takes no new work; runs claimed ahead of an
    /// instant to come are new work, given up (their items freed).
    pub(super) fn drain(
        &mut self,
        reply: ReplyId,
        deadline: Instant,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        self.instances
            .start_drain(cx!(self, env, out), reply, deadline);
        self.runs
            .give_up_held(cx!(self, env, out), &self.instances, DRAINING);
    }

    pub(super) fn session(&mut self, state: SessionState, env: &Env, out: &mut Vec<Action>) {
        match state {
            SessionState::Connected { generation, .. }
                if self.instances.ready() && generation != self.io.generation() =>
            {
                self.new_session(generation, env, out)
            }
            SessionState::Connected { .. } => self.io.want_reload(),
            _ => {}
        }
    }

    /// The session expired and a new one is open: everything decided in the old one is void.
    /// The workers' leases ran out before the old session could expire (they are never longer
    /// than a quarter of a session past its last proof of life), so their items may be given
    /// back at once; the instances are registered again (expiry is not shutdown). Pending
    /// writes of the old session fail on their own (they carry its generation).
    fn new_session(&mut self, generation: u64, env: &Env, out: &mut Vec<Action>) {
        tracing::info!(job = %self.job.name, generation, "new registry session: everything from the old one is void; registering local instances again");
        self.io.set_generation(generation);
        self.io.want_reload();
        self.runs.new_session(cx!(self, env, out), &self.instances);
        for id in self.instances.new_session() {
            self.forget_local(&id, env, out);
        }
    }

    /// Membership work: the drain, remote shutdowns, instances due to leave, re-registration in
    /// a new session, the liveness node, and nodes of this host no instance stands for.
    pub(super) fn reconcile_membership(&mut self, env: &Env, out: &mut Vec<Action>) {
        let runs = &self.runs;
        for id in self.instances.drained_idle(|id| runs.idle(id)) {
            self.end_local(&id, StreamEnd::ByWorker, env, out);
        }
        self.instances.finish_drain(cx!(self, env, out));
        for id in self.instances.detect_remote_shutdown(cx!(self, env, out)) {
            self.runs
                .revoke_all_of(cx!(self, env, out), &self.instances, &id, REMOTE_SHUTDOWN);
        }
        // The stream ends once what was revoked is over: declined, or its lease ran out.
        let runs = &self.runs;
        for id in self.instances.shut_down_and_idle(|id| runs.idle(id)) {
            self.end_local(&id, StreamEnd::BySidecar, env, out);
            self.instances.removed_remotely(&id);
        }
        for id in self.instances.due_to_leave(env.now) {
            self.leave(&id, env, out);
        }
        self.instances.reregister(cx!(self, env, out));
        self.instances.reconcile_sidecar_node(cx!(self, env, out));
        self.instances.remove_orphans(cx!(self, env, out));
    }

    /// Removes a local instance whose stream is over: its node, the leader node if it leads,
    /// and the items it may have left running, in one conditional multi-op. What it leaves
    /// running goes straight to another local instance with room, if there is one, in this
    /// same write: no flag, no claim, no round trip more. Failing that, to an idle worker of a
    /// peer sidecar, which runs it once it reads this write.
    fn leave(&mut self, id: &str, env: &Env, out: &mut Vec<Action>) {
        let leaving = self.io.in_flight(|p| {
            matches!(p, Pending::Leave { instance_id, .. } | Pending::Register { instance_id } if instance_id == id)
        });
        if leaving {
            return;
        }
        let Some(local) = self.instances.get(id) else {
            return;
        };
        let generation = self.io.generation();
        let current = local.current(generation);
        let removed_remotely = local.gone().is_some_and(|g| g.removed_remotely);
        let mut scratch = Vec::new();
        let taker = if current {
            let cx = cx!(self, env, &mut scratch);
            self.failover.taker(cx, &self.runs, &self.instances, id)
        } else {
            None
        };
        let Some(runs) = self.runs.leave_ops(
            cx!(ref self, env, &mut scratch),
            id,
            taker.as_ref().map(|t| t.id()),
        ) else {
            return; // answers being recorded: leave after them
        };
        let view = self.mirror.view();
        let paths = &self.job.paths;
        let mut ops = Vec::new();
        if current && !removed_remotely && view.instances.contains_key(id) {
            ops.push(Op::delete(paths.instance(id)));
        }
        ops.extend(runs.ops);
        let (items, mut handed) = (runs.items, runs.handed);
        if let Some((leader, version)) = &view.leader {
            if leader == id && current {
                ops.push(Op::Delete {
                    path: paths.leader_election_instance(),
                    version: Some(*version),
                });
            }
        }
        if ops.is_empty() || !current {
            self.forget_local(id, env, out);
            return;
        }
        let handed = self.failover.prepare_hand_over(
            cx!(ref self, env, out),
            &mut self.runs,
            &mut ops,
            &mut handed,
            taker,
        );
        let pending = Pending::Leave {
            instance_id: id.to_string(),
            handed,
        };
        cx!(self, env, out).commit(pending, ops, &items);
    }

    /// The leave's write was answered (or not).
    pub(super) fn left(
        &mut self,
        id: &str,
        handed: Option<Handed>,
        ops: &[Op],
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let items = self.runs.open_items_of(id);
        self.io.unlock(&items);
        match result {
            Ok(results) => {
                self.forget_local(id, env, out);
                self.failover.handed_over(
                    cx!(self, env, out),
                    &mut self.runs,
                    &mut self.instances,
                    handed,
                    ops,
                    &results,
                );
            }
            Err(RegError::SessionExpired) => {
                self.runs.forget_unclaimed(handed_execution(handed));
                self.forget_local(id, env, out);
            }
            Err(e) => {
                self.runs.forget_unclaimed(handed_execution(handed));
                // Refused only by the latch's state: the leave is decided again at once.
                if !self
                    .failover
                    .latch_refused(cx!(ref self, env, out), &e, ops)
                {
                    cx!(self, env, out).write_failed("removing an instance", &e);
                }
            }
        }
    }

    /// Drops a local instance that has left, and its runs.
    pub(super) fn forget_local(&mut self, id: &str, env: &Env, out: &mut Vec<Action>) {
        if !self.instances.contains(id) {
            return;
        }
        self.instances.forget(cx!(self, env, out), id);
        self.runs.forget_instance(cx!(self, env, out), id);
    }
}
