//! The results of actions in flight: each answer goes to the concern that asked for it.

use std::sync::Arc;

use tracing::{debug, warn};

use super::state::{JobState, Pending};
use super::{Action, Env, IoResult, OpId};
use crate::registry::{Error as RegError, Op, OpResult};

impl JobState {
    pub(super) fn on_done(&mut self, op: OpId, result: IoResult, env: &Env, out: &mut Vec<Action>) {
        let Some(pending) = self.take_pending(op) else {
            return;
        };
        match (pending, result) {
            (Pending::SetUp, IoResult::SetUp(result)) => self.on_set_up(result, env, out),
            (Pending::Read, IoResult::Read { path, node }) => match node {
                Ok(node) => {
                    self.inexact.remove(&path);
                    self.cache.put(&path, node);
                    self.view_stale = true;
                }
                Err(e) => self.write_failed("reading a node", &e, env),
            },
            (Pending::Read, IoResult::ReadMany { paths, nodes }) => match nodes {
                Ok(nodes) => self.apply_read(&paths, nodes),
                Err(e) => self.write_failed("reading nodes", &e, env),
            },
            (Pending::ReadOwners, IoResult::ReadMany { paths, nodes }) => match nodes {
                Ok(nodes) => self.apply_read(&paths, nodes),
                Err(e) => {
                    self.owners_reread = true;
                    self.write_failed("reading the sharding", &e, env);
                }
            },
            (Pending::Reload, IoResult::Loaded(result)) => match result {
                Ok(nodes) => {
                    debug!(job = %self.name, nodes = nodes.len(), "job read");
                    self.cache.replace_all(nodes);
                    self.claims.latch_dir = self.cache.contains(&self.paths.failover_latch());
                    self.inexact.clear();
                    self.view_stale = true;
                    self.last_reload = Some(env.now);
                    self.resolve_held(env, out);
                }
                Err(e) => self.write_failed("reading the job", &e, env),
            },
            (Pending::Watch, IoResult::Watching(result)) => match result {
                Ok(()) => self.reload_wanted = true,
                Err(e) => {
                    self.watch_wanted = true;
                    self.write_failed("watching the job", &e, env);
                }
            },
            (Pending::Persist, IoResult::Persisted(result)) => {
                if let Err(e) = result {
                    self.write_failed("writing a node", &e, env);
                }
            }
            (Pending::Clock { fire_time }, IoResult::Clock(result)) => {
                self.on_clock(fire_time, result, env, out)
            }
            (pending, IoResult::Committed(result)) => {
                let ops = self.commit_ops.remove(&op).unwrap_or_else(|| Arc::from([]));
                if let Ok(results) = &result {
                    self.apply_commit(&ops, results, env);
                    self.refresh_view();
                }
                self.on_committed(pending, &ops, result, env, out)
            }
            (pending, IoResult::Latched(result)) => self.on_latched(pending, result, env, out),
            (pending, result) => {
                warn!(job = %self.name, ?pending, ?result, "unexpected result; ignored");
            }
        }
    }

    /// A commit's result (already mirrored into the cache if it succeeded): let its owner go on.
    fn on_committed(
        &mut self,
        pending: Pending,
        ops: &[Op],
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        match pending {
            Pending::Register { instance_id } => self.on_registered(&instance_id, result, env, out),
            Pending::Reregister { instance_id } => {
                self.on_reregistered(&instance_id, result, env, out)
            }
            Pending::Start { execution_id } => {
                self.on_started(&execution_id, ops, result, env, out)
            }
            Pending::Finish {
                execution_id,
                items,
            } => self.on_finished(&execution_id, items, result, env, out),
            Pending::Release {
                execution_id,
                items,
            } => self.on_released(&execution_id, items, result, env, out),
            Pending::Leave {
                instance_id,
                handed,
            } => self.on_left(&instance_id, handed, ops, result, env, out),
            Pending::MisfireFlags | Pending::SidecarNode | Pending::Abdicate | Pending::Orphans => {
                if let Err(e) = result {
                    self.write_failed("a registry write", &e, env);
                }
            }
            Pending::Reshard => self.on_resharded(result, env),
            Pending::ReshardFlag => self.on_flag_set(result, env),
            Pending::Cleanup { items, handed } => {
                self.on_cleaned_up(&items, handed, ops, result, env, out)
            }
            Pending::ReleaseStale { items } => {
                self.unlock(&items);
                if let Err(e) = result {
                    self.write_failed("releasing items no one runs any more", &e, env);
                }
            }
            Pending::Elect { latch } => self.on_elected(latch, result, env, out),
            Pending::Claim { latch, executions } => {
                self.on_claimed(latch, executions, ops, result, env, out)
            }
            Pending::TakeTrigger { instance_id } => {
                self.on_trigger_taken(&instance_id, result, env, out)
            }
            other => warn!(job = %self.name, pending = ?other, "unexpected commit result; ignored"),
        }
    }
}
