//! Registration beyond the join: the instance nodes written again in a new session (expiry is
//! not shutdown), this sidecar's liveness node, and instance nodes of this host that no local
//! instance stands for.

use tracing::{info, warn};

use super::{Instances, WorkerLease};
use crate::coordination::job::io::{Cx, Pending};
use crate::elasticjob::instance::instance_yaml;
use crate::registry::{CreateMode, Error as RegError, Op, OpResult, SessionState};

impl Instances {
    /// A new session: every instance is to be registered again (expiry is not shutdown).
    /// Returns the gone instances, which simply leave.
    pub(in crate::coordination::job) fn new_session(&mut self) -> Vec<String> {
        let gone: Vec<String> = self
            .locals
            .iter()
            .filter(|(_, l)| l.gone.is_some())
            .map(|(id, _)| id.clone())
            .collect();
        for local in self.locals.values_mut() {
            local.registered = false;
            local.seen = false;
            local.lease = WorkerLease::new();
        }
        gone
    }

    /// Instance nodes to write again in a new session.
    pub(in crate::coordination::job) fn reregister(&mut self, cx: &mut Cx) {
        let unregistered: Vec<String> = self
            .locals
            .iter()
            .filter(|(_, l)| !l.registered && l.join_reply.is_none() && l.gone.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in unregistered {
            let busy = cx.io.in_flight(
                |p| matches!(p, Pending::Reregister { instance_id } if *instance_id == id),
            );
            if !busy {
                let ops = vec![Op::create(
                    cx.paths().instance(&id),
                    instance_yaml(&id, &cx.settings().ip),
                    CreateMode::Ephemeral,
                )];
                cx.commit(Pending::Reregister { instance_id: id }, ops, &[]);
            }
        }
    }

    /// An instance node written again (or not). Returns whether the instance must end: another
    /// process registered its id meanwhile.
    pub(in crate::coordination::job) fn reregistered(
        &mut self,
        cx: &mut Cx,
        id: &str,
        result: &Result<Vec<OpResult>, RegError>,
    ) -> bool {
        let generation = cx.io.generation();
        match result {
            Ok(_) => {
                if let Some(local) = self.locals.get_mut(id) {
                    local.registered = true;
                    local.generation = generation;
                    local.seen = true;
                    // Registering again waits for the fresh read of the job (the reconcile
                    // decides nothing while a reload is wanted or in flight).
                    info!(job = %cx.name(), instance = %id, generation,
                          "registered again in the new session, on a fresh read of the job");
                }
                false
            }
            Err(RegError::MultiFailed { source, .. })
                if matches!(**source, RegError::NodeExists(_)) =>
            {
                warn!(job = %cx.name(), instance = %id, "another process registered this instance id meanwhile; ending its stream");
                if let Some(local) = self.locals.get_mut(id) {
                    local.registered = true; // so it leaves through the normal path
                    local.generation = 0;
                }
                true
            }
            Err(e) => {
                cx.write_failed("registering an instance again", e);
                false
            }
        }
    }

    /// Keeps `shardcar/sidecars/{ip}` (ephemeral) while this sidecar has local instances of the
    /// job, and removes it once it has none.
    pub(in crate::coordination::job) fn reconcile_sidecar_node(&self, cx: &mut Cx) {
        if cx.io.in_flight(|p| matches!(p, Pending::SidecarNode)) {
            return;
        }
        let path = cx.paths().sidecar(&cx.settings().ip);
        let SessionState::Connected { session_id, .. } = cx.env.session else {
            return;
        };
        let node = cx.mirror.cache().get(&path);
        let ours = node.is_some_and(|n| n.stat.ephemeral_owner == session_id);
        // Not for a job that is being removed: nothing would be left to look after.
        let wanted = cx.view().config.is_some() && self.locals.values().any(|l| l.registered);
        if wanted && node.is_none() {
            let mut ops = Vec::new();
            for parent in [cx.paths().shardcar(), cx.paths().sidecars()] {
                if !cx.mirror.cache().contains(&parent) {
                    ops.push(Op::create(parent, Vec::new(), CreateMode::Persistent));
                }
            }
            ops.push(Op::create(path, Vec::new(), CreateMode::Ephemeral));
            cx.commit(Pending::SidecarNode, ops, &[]);
        } else if !wanted && ours && cx.io.is_idle() {
            cx.commit(Pending::SidecarNode, vec![Op::delete(path)], &[]);
        }
    }

    /// An instance node of this host, owned by this sidecar's current session, that no local
    /// instance stands for: a registration whose answer was lost (a timeout, the connection
    /// dropped) may still have created it. Nobody else can remove it, and it would own items as
    /// a ghost: delete it (fenced on its version).
    pub(in crate::coordination::job) fn remove_orphans(&self, cx: &mut Cx) {
        let SessionState::Connected { session_id, .. } = cx.env.session else {
            return;
        };
        if cx.io.in_flight(|p| matches!(p, Pending::Orphans)) {
            return;
        }
        let ip = &cx.settings().ip;
        let ops: Vec<Op> = cx
            .view()
            .instances
            .keys()
            .filter(|id| self.is_gone_instance_of_this_host(id, ip))
            .filter_map(|id| {
                let path = cx.paths().instance(id);
                let node = cx.mirror.cache().get(&path)?;
                (node.stat.ephemeral_owner == session_id && cx.mirror.exact(&path)).then_some(
                    Op::Delete {
                        path,
                        version: Some(node.stat.version),
                    },
                )
            })
            .collect();
        if !ops.is_empty() {
            info!(job = %cx.name(), count = ops.len(),
                  "removing instance nodes of this host that no worker stands for");
            cx.commit(Pending::Orphans, ops, &[]);
        }
    }
}
