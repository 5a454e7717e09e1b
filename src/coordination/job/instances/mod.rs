//! The job's local instances: one per worker stream of this sidecar, from the `Subscribe` that
//! registers it to the leave that removes it; the job's setup on this sidecar (the first
//! instance sets it up); registration again in a new session; the drain; what each worker is
//! told of its items; and its lease ([`leases`]).
//!
//! A worker's stream that ends takes its instance out at once when the worker itself ended it
//! (it knows it must stop), but only once its lease has run out when this sidecar ended it
//! (keepalive, a full stream, a remote shutdown): until then the worker may be running its
//! items, so its instance stays, and its `running` nodes with it. This sidecar's liveness node
//! (`shardcar/sidecars/{ip}`) tells the leader that items of its instances are looked after
//! here, so the leader never hands them over early.

mod assignments;
mod drain;
mod join;
mod leases;
mod registration;

use std::time::Instant;

use tracing::info;

pub(crate) use join::ConfigSetup;
pub(crate) use leases::WorkerLease;

use super::io::Cx;
use super::{Action, Input, Observation, ReplyId, StreamKey};
use crate::coordination::events::{ShutdownKind, StreamEnd, WorkerEvent};
use crate::coordination::small_map::SmallMap;
use crate::elasticjob::instance::ip_of;

/// Where the job is in its setup on this sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// No local instance has joined yet.
    New,
    /// Config, server node, watch and first read in flight.
    SettingUp,
    /// The subtree is mirrored and watched.
    Ready,
}

/// One worker stream of this job on this sidecar.
#[derive(Debug)]
pub(super) struct Local {
    stream: StreamKey,
    /// The call to answer once the instance node exists.
    join_reply: Option<ReplyId>,
    /// Whether its instance node exists in `generation` (false while being created).
    registered: bool,
    /// The session generation of its instance node.
    generation: u64,
    /// Whether the mirror has shown its instance node (so its absence means removal).
    seen: bool,
    /// The last assignment sent: items, leader flag, epoch.
    sent: Option<(Vec<i32>, bool, i64)>,
    lease: WorkerLease,
    /// How many executions the worker runs at once (1: one at a time, as an ElasticJob
    /// instance).
    max_concurrent: u32,
    /// `Shutdown` was sent (drain, remote shutdown): no new work.
    shutting_down: bool,
    /// Its instance node was removed by someone else (ElasticJob's console, ShutdownInstance):
    /// `Shutdown` was sent and its runs revoked; its stream ends once they are over.
    shut_down_remotely: bool,
    /// The stream ended (or is being ended): how, and when its items may be released.
    gone: Option<Gone>,
}

/// A local instance whose stream is over.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gone {
    /// Not before this instant are its items released and its instance removed: a worker that
    /// may not know its stream is over can work on until its lease ends.
    pub release_at: Instant,
    /// Its instance node was removed by someone else (remote shutdown).
    pub removed_remotely: bool,
}

impl Local {
    fn new(stream: StreamKey, reply: ReplyId, max_concurrent: u32) -> Local {
        Local {
            stream,
            join_reply: Some(reply),
            registered: false,
            generation: 0,
            seen: false,
            sent: None,
            lease: WorkerLease::new(),
            max_concurrent,
            shutting_down: false,
            shut_down_remotely: false,
            gone: None,
        }
    }

    pub fn stream(&self) -> StreamKey {
        self.stream
    }

    /// Registered, stream open: may be told things, and given work unless shutting down.
    pub fn live(&self) -> bool {
        self.registered && self.gone.is_none()
    }

    pub fn registered(&self) -> bool {
        self.registered
    }

    /// Its instance node is in this session (`generation`).
    pub fn current(&self, generation: u64) -> bool {
        self.registered && self.generation == generation
    }

    pub fn lease(&self) -> &WorkerLease {
        &self.lease
    }

    pub fn max_concurrent(&self) -> u32 {
        self.max_concurrent.max(1)
    }

    pub fn shutting_down(&self) -> bool {
        self.shutting_down
    }

    pub fn gone(&self) -> Option<Gone> {
        self.gone
    }
}

/// A pending drain.
#[derive(Debug, Clone, Copy)]
pub(super) struct Drain {
    pub reply: ReplyId,
    pub deadline: Instant,
}

/// The local instances; see the module docs.
#[derive(Debug)]
pub(crate) struct Instances {
    phase: Phase,
    /// Most jobs have one local instance: a B-tree would hold it in a node of eleven.
    locals: SmallMap<String, Box<Local>>,
    /// Each worker stream's local instance (most jobs have one).
    streams: SmallMap<StreamKey, String>,
    /// Joins waiting for the setup.
    joins_waiting: Vec<Input>,
    drain: Option<Drain>,
    lease_sequence: u64,
}

impl Instances {
    pub(super) fn new() -> Instances {
        Instances {
            phase: Phase::New,
            locals: SmallMap::new(),
            streams: SmallMap::new(),
            joins_waiting: Vec::new(),
            drain: None,
            lease_sequence: 0,
        }
    }

    /// Whether the job is set up here (its subtree mirrored and watched).
    pub(super) fn ready(&self) -> bool {
        self.phase == Phase::Ready
    }

    pub(super) fn get(&self, id: &str) -> Option<&Local> {
        self.locals.get(id).map(|l| &**l)
    }

    pub(super) fn contains(&self, id: &str) -> bool {
        self.locals.contains_key(id)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.locals.is_empty()
    }

    /// The local instances, in id order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&String, &Local)> {
        self.locals.iter().map(|(id, l)| (id, &**l))
    }

    pub(super) fn ids(&self) -> Vec<String> {
        self.locals.keys().cloned().collect()
    }

    /// Whether nothing is left here: no instance, no join waiting, no drain.
    pub(super) fn idle(&self) -> bool {
        self.locals.is_empty() && self.joins_waiting.is_empty() && self.drain.is_none()
    }

    /// Whether `id` names an instance of this host that no local instance stands for any more
    /// (its nodes, ephemeral on this sidecar's session, are nobody else's to remove).
    pub(super) fn is_gone_instance_of_this_host(&self, id: &str, ip: &str) -> bool {
        ip_of(id) == ip && !self.locals.contains_key(id)
    }

    /// A local instance's stream is over (or being ended by us): no more events, and it
    /// leaves once its worker can no longer be running anything (`busy`: it has executions).
    /// Returns whether it was live until now (its executions are then to be taken back).
    pub(super) fn end(&mut self, cx: &mut Cx, id: &str, end: StreamEnd, busy: bool) -> bool {
        let valid_for = cx.settings().lease;
        let Some(local) = self.locals.get_mut(id) else {
            return false;
        };
        // A worker that may not know its stream is over can go on until its lease ends — but
        // only with work it was given; one with nothing running holds nothing.
        let release_at = match end {
            StreamEnd::BySidecar if busy => local
                .lease
                .expires(valid_for)
                .filter(|e| *e > cx.env.now)
                .unwrap_or(cx.env.now),
            _ => cx.env.now,
        };
        local.gone = Some(Gone {
            release_at,
            removed_remotely: false,
        });
        let (stream, registered) = (local.stream, local.registered);
        cx.out.push(Action::EndStream { stream });
        info!(job = %cx.name(), instance = %id, ?end,
              wait_ms = release_at.saturating_duration_since(cx.env.now).as_millis() as u64,
              "worker stream ended");
        if registered {
            cx.observe(Observation::Worker { joined: false });
        }
        true
    }

    /// Notes that a gone instance's node was removed by someone else (a remote shutdown).
    pub(super) fn removed_remotely(&mut self, id: &str) {
        if let Some(gone) = self.locals.get_mut(id).and_then(|l| l.gone.as_mut()) {
            gone.removed_remotely = true;
        }
    }

    /// The worker has stopped what it was given: its items need not wait for its lease.
    pub(super) fn stopped(&mut self, id: &str, now: Instant) {
        if let Some(gone) = self.locals.get_mut(id).and_then(|l| l.gone.as_mut()) {
            gone.release_at = gone.release_at.min(now);
        }
    }

    /// Drops a local instance that has left.
    pub(super) fn forget(&mut self, cx: &mut Cx, id: &str) {
        let Some(local) = self.locals.remove(id) else {
            return;
        };
        self.streams.remove(&local.stream);
        cx.out.push(Action::EndStream {
            stream: local.stream,
        });
        info!(job = %cx.name(), instance = %id, "worker left");
    }

    /// Gone instances whose leave is due now.
    pub(super) fn due_to_leave(&self, now: Instant) -> Vec<String> {
        self.locals
            .iter()
            .filter(|(_, l)| l.gone.is_some_and(|g| now >= g.release_at))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Local instances whose node disappeared in their own session: shut down remotely
    /// (ElasticJob's console deletes `instances/{id}`). Each is told `Shutdown` now.
    pub(super) fn detect_remote_shutdown(&mut self, cx: &mut Cx) -> Vec<String> {
        let generation = cx.io.generation();
        let mut removed = Vec::new();
        for (id, local) in self.locals.iter_mut() {
            if !local.registered || local.gone.is_some() || local.shut_down_remotely {
                continue;
            }
            if cx.view().instances.contains_key(id) {
                local.seen = true;
            } else if local.seen && local.generation == generation {
                removed.push(id.clone());
            }
        }
        for id in &removed {
            let local = self.locals.get_mut(id).expect("listed");
            local.shutting_down = true;
            local.shut_down_remotely = true;
            let stream = local.stream;
            info!(job = %cx.name(), instance = %id, "{REMOTE_SHUTDOWN}: shutting the worker down");
            cx.send(
                stream,
                WorkerEvent::Shutdown {
                    reason: REMOTE_SHUTDOWN.into(),
                    kind: ShutdownKind::Remote,
                },
            );
        }
        removed
    }

    /// Instances shut down remotely whose runs are all over (`idle`): their streams end now.
    /// Until then the stream stays open, so that the worker's `Decline` of what was revoked
    /// can reach the sidecar and hand the items on at once, not at the end of its lease.
    pub(super) fn shut_down_and_idle(&self, idle: impl Fn(&str) -> bool) -> Vec<String> {
        self.locals
            .iter()
            .filter(|(id, l)| l.shut_down_remotely && l.gone.is_none() && idle(id))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Frees what emptied (see [`super::io::Io::give_back_emptied`]).
    pub(super) fn give_back_emptied(&mut self) {
        if self.locals.is_empty() {
            self.locals = SmallMap::new();
        }
        if self.streams.is_empty() {
            self.streams = SmallMap::new();
        }
        if self.joins_waiting.is_empty() {
            self.joins_waiting = Vec::new();
        }
    }

    #[cfg(test)]
    pub(super) fn joins_waiting(&self) -> usize {
        self.joins_waiting.len()
    }
}

/// Why a worker whose instance node was removed by someone else is shut down.
pub(super) const REMOTE_SHUTDOWN: &str = "instance removed from the registry (remote shutdown)";

/// Why every worker is shut down in a drain.
pub(super) const DRAINING: &str = "the sidecar is shutting down";
