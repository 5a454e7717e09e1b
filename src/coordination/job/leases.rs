//! Worker leases: renewals every third of a lease while the session is proven alive, and
//! what a lapse means. A worker whose lease ran out has stopped (that is the contract), so
//! whatever it was given under that lease is void and may be released at once.

use std::time::SystemTime;

use tracing::{debug, info};

use super::state::JobState;
use super::{Action, Env};
use crate::coordination::events::WorkerEvent;
use crate::coordination::failover::Release;

impl JobState {
    /// Lapses, whatever the session's state: a worker whose lease ran out has stopped, so what
    /// it was given under that lease is void (its release waits for the registry).
    pub(super) fn check_lapses(&mut self, env: &Env, out: &mut Vec<Action>) {
        let valid_for = self.settings.lease;
        let ids: Vec<String> = self.locals.keys().cloned().collect();
        for id in ids {
            let Some(local) = self.locals.get_mut(&id) else {
                continue;
            };
            if !local.registered {
                continue;
            }
            if local.lease.check_lapse(env.now, valid_for) {
                info!(job = %self.name, instance = %id, epoch = local.lease.epoch(), "worker lease ran out");
            }
            let epoch = local.lease.epoch();
            let lapsed: Vec<String> = self
                .executions
                .values()
                .filter(|e| e.instance_id == id && e.delivered && e.lease_epoch < epoch)
                .map(|e| e.id.clone())
                .collect();
            for exec in lapsed {
                self.void(
                    &exec,
                    "the worker's lease ran out before the execution was answered",
                    Release::Abandoned,
                    true,
                    env,
                    out,
                );
                if let Some(void) = self.executions.get_mut(&exec).and_then(|e| e.void.as_mut()) {
                    void.waiting_ack = false; // the lapse is the acknowledgement
                }
            }
        }
    }

    /// Renewals, while the session is proven alive: a renewal after a lapse starts a new lease
    /// epoch. None within a lease of a drain's deadline, none while a revoke waits.
    pub(super) fn reconcile_leases(&mut self, env: &Env, out: &mut Vec<Action>) {
        let valid_for = self.settings.lease;
        let may = self.may_grant(env);
        let stop = self
            .drain
            .is_some_and(|d| env.now + valid_for >= d.deadline);
        let ids: Vec<String> = self.locals.keys().cloned().collect();
        for id in ids {
            let Some(local) = self.locals.get(&id) else {
                continue;
            };
            if !local.registered {
                continue;
            }
            if may
                && !stop
                && local.gone.is_none()
                && !local.withheld
                && local.lease.renewal_due(env.now, valid_for)
            {
                self.grant(&id, env, out);
            }
        }
    }

    /// Sends local instance `id` a lease valid for the configured length from now.
    pub(super) fn grant(&mut self, id: &str, env: &Env, out: &mut Vec<Action>) {
        let valid_for = self.settings.lease;
        let Some(local) = self.locals.get_mut(id) else {
            return;
        };
        local.lease.check_lapse(env.now, valid_for);
        if !local.lease.valid(env.now, valid_for) {
            debug!(job = %self.name, instance = %id, "lease granted (none was valid)");
        }
        self.lease_sequence += 1;
        let expires_at = SystemTime::from(env.wall) + valid_for;
        out.push(Action::Send {
            stream: local.stream,
            event: WorkerEvent::Lease {
                valid_for,
                expires_at,
                sequence: self.lease_sequence,
            },
        });
        local.lease.grant(env.now);
    }
}
