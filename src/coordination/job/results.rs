//! The results of actions in flight: the mirror takes what the registry answered first, then
//! each result goes to the part that asked for it.

use tracing::{debug, warn};

use super::io::{Handed, Pending};
use super::leadership;
use super::state::{cx, JobState};
use super::{Action, Env, IoResult, OpId};
use crate::coordination::CoordError;
use crate::registry::{Error as RegError, Op, OpResult, SessionState};

impl JobState {
    pub(super) fn done(&mut self, op: OpId, result: IoResult, env: &Env, out: &mut Vec<Action>) {
        let Some(pending) = self.io.take_pending(op) else {
            return;
        };
        match (pending, result) {
            (Pending::SetUp, IoResult::SetUp(result)) => self.set_up(result, env, out),
            (Pending::Read, IoResult::Read { path, node }) => match node {
                Ok(node) => self.mirror.put(&path, node),
                Err(e) => cx!(self, env, out).write_failed("reading a node", &e),
            },
            (Pending::Read, IoResult::ReadMany { paths, nodes }) => match nodes {
                Ok(nodes) => self.mirror.apply_read(&paths, nodes),
                Err(e) => cx!(self, env, out).write_failed("reading nodes", &e),
            },
            (Pending::ReadOwners, IoResult::ReadMany { paths, nodes }) => match nodes {
                Ok(nodes) => self.mirror.apply_read(&paths, nodes),
                Err(e) => {
                    self.io.want_owners();
                    cx!(self, env, out).write_failed("reading the sharding", &e);
                }
            },
            (Pending::Reload, IoResult::Loaded(result)) => match result {
                Ok(nodes) => {
                    debug!(job = %self.job.name, nodes = nodes.len(), "job read");
                    self.mirror.replace_all(nodes);
                    let latch = self
                        .mirror
                        .cache()
                        .contains(&self.job.paths.failover_latch());
                    self.failover.latch_seen(latch);
                    self.io.reloaded(env.now);
                    self.runs.resolve_held(cx!(self, env, out), &self.instances);
                }
                Err(e) => cx!(self, env, out).write_failed("reading the job", &e),
            },
            (Pending::Watch, IoResult::Watching(result)) => match result {
                Ok(()) => self.io.want_reload(),
                Err(e) => {
                    self.io.want_watch();
                    cx!(self, env, out).write_failed("watching the job", &e);
                }
            },
            (Pending::Persist, IoResult::Persisted(result)) => {
                if let Err(e) = result {
                    cx!(self, env, out).write_failed("writing a node", &e);
                }
            }
            (Pending::Clock { fire_time }, IoResult::Clock(result)) => {
                self.runs
                    .clock_read(cx!(self, env, out), &mut self.instances, fire_time, result)
            }
            (pending, IoResult::Committed(result)) => {
                let ops = self.io.take_commit_ops(op);
                if let Ok(results) = &result {
                    let session_id = match env.session {
                        SessionState::Connected { session_id, .. } => session_id,
                        _ => 0,
                    };
                    self.mirror.apply_commit(&ops, results, session_id);
                }
                self.committed(pending, &ops, result, env, out)
            }
            (Pending::ElectLatch { instance_id }, IoResult::Latched(Ok(latch))) => self
                .leadership
                .elect_latched(cx!(self, env, out), &self.instances, instance_id, latch),
            (Pending::ClaimLatch, IoResult::Latched(Ok(latch))) => self.failover.claim_now(
                cx!(self, env, out),
                &mut self.runs,
                &self.instances,
                Some(latch),
            ),
            (_, IoResult::Latched(Err(e))) => {
                cx!(self, env, out).write_failed("taking a latch", &e)
            }
            (pending, IoResult::Latched(Ok(latch))) => {
                debug!(job = %self.job.name, ?pending, "latch for nothing; released");
                out.push(Action::ReleaseLatch { latch });
            }
            (pending, result) => {
                warn!(job = %self.job.name, ?pending, ?result, "unexpected result; ignored");
            }
        }
    }

    /// The first setup of the job is done: mirror the subtree, then register the waiting joins.
    fn set_up(
        &mut self,
        result: Result<std::collections::BTreeMap<String, crate::registry::Node>, CoordError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let result = result.map(|nodes| {
            self.mirror.replace_all(nodes);
            self.io.reloaded(env.now);
            self.io
                .set_generation(env.connected_generation().unwrap_or(0));
        });
        self.instances.set_up(cx!(self, env, out), result);
    }

    /// A commit's result (already mirrored if it succeeded): the part that wrote goes on.
    fn committed(
        &mut self,
        pending: Pending,
        ops: &[Op],
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        match pending {
            Pending::Register { instance_id } => {
                self.instances
                    .registered(cx!(self, env, out), &instance_id, result.map(|_| ()))
            }
            Pending::Reregister { instance_id } => {
                let end = self
                    .instances
                    .reregistered(cx!(self, env, out), &instance_id, &result);
                if end {
                    self.end_local(
                        &instance_id,
                        crate::coordination::StreamEnd::BySidecar,
                        env,
                        out,
                    );
                }
            }
            Pending::Start { execution_id } => self.runs.started(
                cx!(self, env, out),
                &mut self.instances,
                &execution_id,
                ops,
                result,
            ),
            Pending::Finish {
                execution_id,
                items,
            } => self.runs.finished(
                cx!(self, env, out),
                &self.instances,
                &execution_id,
                items,
                result,
            ),
            Pending::Release {
                execution_id,
                items,
            } => self
                .runs
                .released(cx!(self, env, out), &execution_id, items, result),
            Pending::Leave {
                instance_id,
                handed,
            } => self.left(&instance_id, handed, ops, result, env, out),
            Pending::MisfireFlags | Pending::SidecarNode | Pending::Abdicate | Pending::Orphans => {
                if let Err(e) = result {
                    cx!(self, env, out).write_failed("a registry write", &e);
                }
            }
            Pending::Reshard => self.leadership.resharded(cx!(self, env, out), result),
            Pending::ReshardFlag => self.leadership.flag_set(cx!(self, env, out), result),
            Pending::Cleanup { items, handed } => self.leadership.cleaned_up(
                cx!(self, env, out),
                &mut self.runs,
                &mut self.instances,
                &mut self.failover,
                &items,
                handed,
                ops,
                result,
            ),
            Pending::ReleaseStale { items } => {
                leadership::released_stale(cx!(self, env, out), &items, result)
            }
            Pending::Elect { latch } => self.leadership.elected(cx!(self, env, out), latch, result),
            Pending::Claim { latch, executions } => self.failover.claimed(
                cx!(self, env, out),
                &mut self.runs,
                &mut self.instances,
                latch,
                executions,
                ops,
                result,
            ),
            Pending::TakeTrigger {
                instance_id,
                parameter,
            } => {
                if result.is_ok() {
                    self.mirror.forget(&self.job.paths.trigger(&instance_id));
                }
                self.runs.trigger_taken(
                    cx!(self, env, out),
                    &mut self.instances,
                    &instance_id,
                    parameter,
                    result,
                )
            }
            other => {
                warn!(job = %self.job.name, pending = ?other, "unexpected commit result; ignored")
            }
        }
    }
}

/// The execution a hand-over's write listed locally, if any (forgotten when the write fails).
pub(super) fn handed_execution(handed: Option<Handed>) -> Option<String> {
    handed.and_then(Handed::execution)
}
