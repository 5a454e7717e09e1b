//! Local instances: joining, leaving, remote shutdown, drain; and what each worker is told
//! about its items. (A new session is in `sessions.rs`.)
//!
//! A worker's stream that ends takes its instance out at once when the worker itself ended it
//! (it knows it must stop), but only once its lease has run out when this sidecar ended it
//! (keepalive, a full stream, a remote shutdown): until then the worker may be running its items,
//! so its instance stays, and its `running` nodes with it. This sidecar's liveness node
//! (`shardcar/sidecars/{ip}`) tells the leader that items of its instances are looked after
//! here, so the leader never hands them over early.

use tracing::{debug, info};

use super::state::{create_empty, Gone, Handed, JobState, Local, Pending, Phase};
use super::{Action, Env, Input, Observation, Reply, StreamKey};
use crate::coordination::events::{ShutdownKind, StreamEnd, WorkerEvent};
use crate::coordination::failover;
use crate::coordination::CoordError;
use crate::elasticjob::instance::{instance_yaml, ip_of};
use crate::registry::{CreateMode, Error as RegError, Op, OpResult, SessionState};

impl JobState {
    pub(super) fn on_join(&mut self, input: Input, env: &Env, out: &mut Vec<Action>) {
        let Input::Join {
            reply,
            stream,
            ref instance_id,
            ref config,
            overwrite,
            max_concurrent,
        } = input
        else {
            return;
        };
        let refuse = |state: &Self, e: CoordError, out: &mut Vec<Action>| {
            state.reply(reply, Reply::Joined(Err(e)), out);
            out.push(Action::EndStream { stream });
        };
        if self.drain.is_some() {
            return refuse(
                self,
                CoordError::Unavailable(
                    "the sidecar is shutting down; subscribe to another".into(),
                ),
                out,
            );
        }
        if self.locals.contains_key(instance_id) {
            return refuse(
                self,
                CoordError::AlreadyExists(format!(
                    "instance {instance_id} already has a live stream for job {}; pass another pid or instance_id",
                    self.name
                )),
                out,
            );
        }
        match self.phase {
            Phase::New => {
                self.phase = Phase::SettingUp;
                let op = self.start_op(Pending::SetUp);
                out.push(Action::SetUp {
                    op,
                    config: config.clone(),
                    overwrite,
                });
                self.joins_waiting.push(Input::Join {
                    reply,
                    stream,
                    instance_id: instance_id.clone(),
                    config: None,
                    overwrite: false,
                    max_concurrent,
                });
            }
            Phase::SettingUp => self.joins_waiting.push(input),
            Phase::Ready => {
                if !self.connected(env) {
                    return refuse(
                        self,
                        CoordError::Unavailable(
                            "ZooKeeper is not connected; subscribe again shortly".into(),
                        ),
                        out,
                    );
                }
                if let (Some(c), true) = (config, overwrite) {
                    let (config, extras) = c.as_ref();
                    for (path, data) in [
                        (self.paths.config(), config.to_yaml()),
                        (self.paths.shardcar(), extras.to_yaml()),
                    ] {
                        let op = self.start_op(Pending::Persist);
                        out.push(Action::Persist {
                            op,
                            path,
                            data: data.into_bytes(),
                        });
                    }
                }
                if let Err(e) = self.effective_config() {
                    return refuse(self, e, out);
                }
                let id = instance_id.clone();
                self.locals.insert(
                    id.clone(),
                    Box::new(Local::new(stream, reply, max_concurrent)),
                );
                self.streams.insert(stream, id.clone());
                let ops = vec![Op::create(
                    self.paths.instance(&id),
                    instance_yaml(&id, &self.settings.ip),
                    CreateMode::Ephemeral,
                )];
                self.commit(Pending::Register { instance_id: id }, ops, &[], out);
            }
        }
    }

    pub(super) fn on_registered(
        &mut self,
        id: &str,
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let Some(local) = self.locals.get(id) else {
            return;
        };
        let (stream, reply) = (local.stream, local.join_reply);
        match result {
            Ok(_) => {
                // ZooKeeper answers a create inside a multi without the node's stat: read the
                // instance node once, so that its creation's zxid is known exactly. Items
                // handed to this registration are told from those handed to an earlier one by
                // it (`reconcile_adoptions`).
                let path = self.paths.instance(id);
                if self.inexact.contains(&path) {
                    let op = self.start_op(Pending::Read);
                    out.push(Action::Read { op, path });
                }
                let generation = self.generation;
                let local = self.locals.get_mut(id).expect("checked above");
                local.registered = true;
                local.generation = generation;
                local.seen = true;
                local.join_reply = None;
                if local.gone.is_some() {
                    // The stream ended while registering: leave as usual (reconcile).
                    if let Some(reply) = reply {
                        self.reply(
                            reply,
                            Reply::Joined(Err(CoordError::Unavailable(
                                "the stream ended while subscribing".into(),
                            ))),
                            out,
                        );
                    }
                    return;
                }
                let (config, extras) = match self.effective_config() {
                    Ok(c) => c,
                    Err(e) => {
                        if let Some(reply) = reply {
                            self.reply(reply, Reply::Joined(Err(e)), out);
                        }
                        self.end_local(id, StreamEnd::ByWorker, env, out);
                        return;
                    }
                };
                out.push(Action::Send {
                    stream,
                    event: WorkerEvent::Registered {
                        instance_id: id.to_string(),
                        config: Box::new((config.clone(), extras)),
                    },
                });
                self.push_assignment(id, out);
                if self.may_grant(env) {
                    self.grant(id, env, out);
                }
                if let Some(reply) = reply {
                    self.reply(reply, Reply::Joined(Ok(Box::new(config))), out);
                }
                info!(job = %self.name, instance = %id, "worker subscribed");
                out.push(Action::Observe(Observation::Worker { joined: true }));
            }
            Err(e) => {
                let error = match &e {
                    RegError::MultiFailed { source, .. }
                        if matches!(**source, RegError::NodeExists(_)) =>
                    {
                        CoordError::AlreadyExists(format!(
                            "instance {id} of job {} is already registered by another process; pass another pid or instance_id",
                            self.name
                        ))
                    }
                    _ => {
                        self.write_failed("registering an instance", &e, env);
                        CoordError::Registry(e)
                    }
                };
                if let Some(reply) = reply {
                    self.reply(reply, Reply::Joined(Err(error)), out);
                }
                self.locals.remove(id);
                self.streams.remove(&stream);
                out.push(Action::EndStream { stream });
            }
        }
    }

    pub(super) fn on_stream_ended(
        &mut self,
        stream: StreamKey,
        end: StreamEnd,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let Some(id) = self.streams.get(&stream).cloned() else {
            // A join still waiting for the job's setup has no local instance yet: drop it, or
            // its instance would be created later for a stream that is already gone.
            let ended: Vec<Input> = self
                .joins_waiting
                .extract_if(
                    ..,
                    |j| matches!(j, Input::Join { stream: s, .. } if *s == stream),
                )
                .collect();
            for join in ended {
                if let Input::Join { reply, .. } = join {
                    info!(job = %self.name, stream, ?end, "a subscribe ended before its instance existed");
                    let error =
                        CoordError::Unavailable("the stream ended while subscribing".into());
                    self.reply(reply, Reply::Joined(Err(error)), out);
                    out.push(Action::EndStream { stream });
                }
            }
            return;
        };
        if self.locals.get(&id).is_some_and(|l| l.gone.is_none()) {
            self.end_local(&id, end, env, out);
        }
    }

    /// A local instance's stream is over (or being ended by us): no more events, its
    /// execution is void, and it leaves once its worker can no longer be running anything.
    pub(super) fn end_local(&mut self, id: &str, end: StreamEnd, env: &Env, out: &mut Vec<Action>) {
        let valid_for = self.settings.lease;
        let Some(local) = self.locals.get_mut(id) else {
            return;
        };
        // A worker that may not know its stream is over can go on until its lease ends — but
        // only with work it was given; one with nothing running holds nothing.
        let release_at = match end {
            StreamEnd::BySidecar if !local.idle() => local
                .lease
                .expires(valid_for)
                .filter(|e| *e > env.now)
                .unwrap_or(env.now),
            _ => env.now,
        };
        local.gone = Some(Gone {
            release_at,
            removed_remotely: false,
        });
        let (stream, registered) = (local.stream, local.registered);
        let executions = local.executions.clone();
        out.push(Action::EndStream { stream });
        info!(job = %self.name, instance = %id, ?end,
              wait_ms = release_at.saturating_duration_since(env.now).as_millis() as u64,
              "worker stream ended");
        if registered {
            out.push(Action::Observe(Observation::Worker { joined: false }));
        }
        for exec in executions {
            self.void(
                &exec,
                "the worker's stream ended",
                failover::Release::Abandoned,
                false,
                env,
                out,
            );
        }
    }

    /// Membership work: remote shutdowns, instances due to leave, the liveness node, and
    /// re-registration in a new session.
    pub(super) fn reconcile_membership(&mut self, env: &Env, out: &mut Vec<Action>) {
        if let Some(drain) = self.drain {
            self.reconcile_drain(drain.reply, drain.deadline, env, out);
        }
        self.detect_remote_shutdown(env, out);
        let due: Vec<String> = self
            .locals
            .iter()
            .filter(|(_, l)| l.gone.is_some_and(|g| env.now >= g.release_at))
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            self.leave(&id, env, out);
        }
        let unregistered: Vec<String> = self
            .locals
            .iter()
            .filter(|(_, l)| !l.registered && l.join_reply.is_none() && l.gone.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in unregistered {
            let busy = self.in_flight(
                |p| matches!(p, Pending::Reregister { instance_id } if *instance_id == id),
            );
            if !busy {
                let ops = vec![Op::create(
                    self.paths.instance(&id),
                    instance_yaml(&id, &self.settings.ip),
                    CreateMode::Ephemeral,
                )];
                self.commit(Pending::Reregister { instance_id: id }, ops, &[], out);
            }
        }
        self.reconcile_sidecar_node(env, out);
        self.remove_orphans(env, out);
    }

    /// Whether `id` names an instance of this host that no local instance stands for any more
    /// (its nodes, ephemeral on this sidecar's session, are nobody else's to remove).
    pub(super) fn is_gone_instance_of_this_host(&self, id: &str) -> bool {
        ip_of(id) == self.settings.ip && !self.locals.contains_key(id)
    }

    /// An instance node of this host, owned by this sidecar's current session, that no local
    /// instance stands for: a registration whose answer was lost (a timeout, the connection
    /// dropped) may still have created it. Nobody else can remove it, and it would own items as
    /// a ghost: delete it (fenced on its version).
    fn remove_orphans(&mut self, env: &Env, out: &mut Vec<Action>) {
        let SessionState::Connected { session_id, .. } = env.session else {
            return;
        };
        if self.in_flight(|p| matches!(p, Pending::Orphans)) {
            return;
        }
        let ops: Vec<Op> = self
            .view
            .instances
            .keys()
            .filter(|id| self.is_gone_instance_of_this_host(id))
            .filter_map(|id| {
                let path = self.paths.instance(id);
                let node = self.cache.get(&path)?;
                (node.stat.ephemeral_owner == session_id && !self.inexact.contains(&path))
                    .then_some(Op::Delete {
                        path,
                        version: Some(node.stat.version),
                    })
            })
            .collect();
        if !ops.is_empty() {
            info!(job = %self.name, count = ops.len(),
                  "removing instance nodes of this host that no worker stands for");
            self.commit(Pending::Orphans, ops, &[], out);
        }
    }

    /// Keeps `shardcar/sidecars/{ip}` (ephemeral) while this sidecar has local instances of the
    /// job, and removes it once it has none.
    fn reconcile_sidecar_node(&mut self, env: &Env, out: &mut Vec<Action>) {
        if self.in_flight(|p| matches!(p, Pending::SidecarNode)) {
            return;
        }
        let path = self.paths.sidecar(&self.settings.ip);
        let session_id = match env.session {
            SessionState::Connected { session_id, .. } => session_id,
            _ => return,
        };
        let node = self.cache.get(&path);
        let ours = node.is_some_and(|n| n.stat.ephemeral_owner == session_id);
        // Not for a job that is being removed: nothing would be left to look after.
        let wanted = self.view.config.is_some() && self.locals.values().any(|l| l.registered);
        if wanted && node.is_none() {
            let mut ops = Vec::new();
            for parent in [self.paths.shardcar(), self.paths.sidecars()] {
                if !self.cache.contains(&parent) {
                    ops.push(create_empty(parent, CreateMode::Persistent));
                }
            }
            ops.push(create_empty(path, CreateMode::Ephemeral));
            self.commit(Pending::SidecarNode, ops, &[], out);
        } else if !wanted && ours && self.pending.is_empty() {
            self.commit(Pending::SidecarNode, vec![Op::delete(path)], &[], out);
        }
    }

    /// A local instance whose node disappeared in its own session was shut down remotely
    /// (ElasticJob's console deletes `instances/{id}`): tell the worker, take its work back,
    /// end its stream once it has stopped.
    fn detect_remote_shutdown(&mut self, env: &Env, out: &mut Vec<Action>) {
        let generation = self.generation;
        let mut removed = Vec::new();
        for (id, local) in self.locals.iter_mut() {
            if !local.registered || local.gone.is_some() {
                continue;
            }
            if self.view.instances.contains_key(id) {
                local.seen = true;
            } else if local.seen && local.generation == generation {
                removed.push(id.clone());
            }
        }
        let reason = "instance removed from the registry (remote shutdown)";
        for id in removed {
            let Some(local) = self.locals.get(&id) else {
                continue;
            };
            info!(job = %self.name, instance = %id, "{reason}: shutting the worker down");
            out.push(Action::Send {
                stream: local.stream,
                event: WorkerEvent::Shutdown {
                    reason: reason.into(),
                    kind: ShutdownKind::Remote,
                },
            });
            for exec in local.executions.clone() {
                self.revoke(&exec, reason, failover::Release::Abandoned, env, out);
            }
            self.end_local(&id, StreamEnd::BySidecar, env, out);
            if let Some(gone) = self.locals.get_mut(&id).and_then(|l| l.gone.as_mut()) {
                gone.removed_remotely = true;
            }
        }
    }

    /// Removes a local instance whose stream is over: its node, the leader node if it leads,
    /// and the items it may have left running, in one conditional multi-op.
    fn leave(&mut self, id: &str, env: &Env, out: &mut Vec<Action>) {
        if self.in_flight(|p| matches!(p, Pending::Leave { instance_id, .. } | Pending::Register { instance_id } if instance_id == id))
        {
            return;
        }
        let Some(local) = self.locals.get(id) else {
            return;
        };
        let execs: Vec<_> = local
            .executions
            .iter()
            .filter_map(|e| self.executions.get(e))
            .collect();
        if execs.iter().any(|e| !e.held.is_empty()) {
            return; // answers being recorded: leave after them
        }
        let mut ops = Vec::new();
        let current = local.registered && local.generation == self.generation;
        let removed_remotely = local.gone.is_some_and(|g| g.removed_remotely);
        if current && !removed_remotely && self.view.instances.contains_key(id) {
            ops.push(Op::delete(self.paths.instance(id)));
        }
        // What it leaves running goes straight to another local instance with room, if there
        // is one, in this same write: no flag, no claim, no round trip more. Failing that, to
        // an idle worker of a peer sidecar, which runs it once it reads this write.
        let taker = if current { self.taker(id, env) } else { None };
        let mut items = Vec::new();
        let mut handed = Vec::new();
        for exec in execs {
            let unreleased = exec.unreleased();
            // Claimed ahead of an instant it never reached: nothing ran, nothing to hand on.
            let unrun = exec
                .void
                .as_ref()
                .is_some_and(|v| v.release == failover::Release::Unrun);
            let handover = taker.as_ref().filter(|_| !unrun).and_then(|taker| {
                failover::handover_ops(
                    &self.view,
                    &self.paths,
                    id,
                    taker.id(),
                    &unreleased,
                    &exec.versions,
                    exec.monitored,
                )
            });
            match handover {
                Some(handover) => {
                    ops.extend(handover);
                    handed.extend(unreleased.iter().copied());
                }
                None => ops.extend(failover::release_ops(
                    &self.view,
                    &self.paths,
                    id,
                    &unreleased,
                    &exec.versions,
                    exec.monitored,
                    if unrun {
                        failover::Release::Unrun
                    } else {
                        failover::Release::Abandoned
                    },
                )),
            }
            items.extend(unreleased);
        }
        if let Some((leader, version)) = &self.view.leader {
            if leader == id && current {
                ops.push(Op::Delete {
                    path: self.paths.leader_election_instance(),
                    version: Some(*version),
                });
            }
        }
        if ops.is_empty() || !current {
            self.forget_local(id, env, out);
            return;
        }
        let handed = self.prepare_hand_over(&mut ops, &mut handed, taker, env);
        self.commit(
            Pending::Leave {
                instance_id: id.to_string(),
                handed,
            },
            ops,
            &items,
            out,
        );
    }

    pub(super) fn on_left(
        &mut self,
        id: &str,
        handed: Option<Handed>,
        ops: &[Op],
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let items: Vec<i32> = self
            .locals
            .get(id)
            .map(|l| l.executions.as_slice())
            .unwrap_or_default()
            .iter()
            .filter_map(|e| self.executions.get(e))
            .flat_map(|e| e.unreleased())
            .collect();
        self.unlock(&items);
        match result {
            Ok(results) => {
                self.forget_local(id, env, out);
                self.handed_over(handed, ops, &results, env, out);
            }
            Err(RegError::SessionExpired) => {
                self.forget_unclaimed(handed.and_then(Handed::execution));
                self.forget_local(id, env, out);
            }
            Err(e) => {
                self.forget_unclaimed(handed.and_then(Handed::execution));
                // Refused only by the latch's state: the leave is decided again at once.
                if !self.latch_refused(&e, ops) {
                    self.write_failed("removing an instance", &e, env);
                }
            }
        }
    }

    /// Drops a local instance that has left, and its execution.
    pub(super) fn forget_local(&mut self, id: &str, env: &Env, out: &mut Vec<Action>) {
        let Some(local) = self.locals.remove(id) else {
            return;
        };
        self.streams.remove(&local.stream);
        out.push(Action::EndStream {
            stream: local.stream,
        });
        for exec in local.executions {
            self.drop_execution(&exec, env, out);
        }
        info!(job = %self.name, instance = %id, "worker left");
    }

    /// Sends each live local instance its items if they, its leader flag or the epoch changed.
    pub(super) fn push_assignments(&mut self, out: &mut Vec<Action>) {
        let ids: Vec<String> = self.locals.keys().cloned().collect();
        for id in ids {
            self.push_assignment(&id, out);
        }
    }

    pub(super) fn push_assignment(&mut self, id: &str, out: &mut Vec<Action>) {
        // A sharding being written (ElasticJob's leader under `processing`, which it clears
        // in the same transaction as it writes the owners) or not yet read whole: what the
        // mirror shows may be half of it. The worker keeps its last assignment until then
        // (its first one goes out at once: it comes right after `Registered`).
        let first = self.locals.get(id).is_some_and(|l| l.sent.is_none());
        if !first
            && (self.view.processing
                || self.owners_reread
                || self.in_flight(|p| matches!(p, Pending::ReadOwners)))
        {
            return;
        }
        let items = self.view.items_of(id, &self.settings.ip);
        let leader = self.view.leader.as_ref().is_some_and(|(l, _)| l == id);
        let mut epoch = self.view.epoch();
        let params = self.parameters();
        let Some(local) = self.locals.get_mut(id) else {
            return;
        };
        if !local.live() {
            return;
        }
        // The epoch never goes back, and grows whenever the items change: the owners' zxids
        // cannot show a change that only removed items (fewer items, a disabled item or
        // server), so such a change takes the next number after the last one sent.
        if let Some((sent_items, _, sent_epoch)) = &local.sent {
            epoch = if *sent_items != items {
                epoch.max(sent_epoch + 1)
            } else {
                epoch.max(*sent_epoch)
            };
        }
        let next = (items, leader, epoch);
        if local.sent.as_ref() == Some(&next) {
            return;
        }
        debug!(job = %self.name, instance = %id, items = ?next.0, leader = next.1, epoch = next.2,
               "assignment sent");
        out.push(Action::Send {
            stream: local.stream,
            event: WorkerEvent::Assignment {
                items: next
                    .0
                    .iter()
                    .map(|i| (*i, params.get(i).cloned().unwrap_or_default()))
                    .collect(),
                leader,
                epoch,
            },
        });
        local.sent = Some(next);
    }

    /// Tells the observer when leadership of the job moves to or away from this sidecar.
    pub(super) fn observe_leadership(&mut self, out: &mut Vec<Action>) {
        let leading = self
            .view
            .leader
            .as_ref()
            .is_some_and(|(id, _)| self.locals.get(id).is_some_and(|l| l.live()));
        if leading != self.leading {
            self.leading = leading;
            out.push(Action::Observe(Observation::Leadership { leading }));
        }
    }

    pub(super) fn parameters(&self) -> super::Parameters {
        self.view
            .config
            .as_ref()
            .and_then(|c| c.item_parameters().ok())
            .unwrap_or_default()
    }
}
