//! Worker leases: renewals every third of a lease while the session is proven alive, and
//! what a lapse means. A worker whose lease ran out has stopped (that is the contract), so
//! whatever it was given under that lease is void and may be released at once.

use std::collections::BTreeSet;
use std::time::{Instant, SystemTime};

use tracing::{debug, info};

use super::Instances;
use crate::coordination::events::WorkerEvent;
use crate::coordination::job::io::Cx;

impl Instances {
    /// Notes lapses, whatever the session's state. Returns each registered instance with its
    /// lease epoch: what was delivered under an earlier epoch was stopped by its worker.
    pub(in crate::coordination::job) fn check_lapses(&mut self, cx: &mut Cx) -> Vec<(String, u64)> {
        let valid_for = cx.settings().lease;
        let mut epochs = Vec::with_capacity(self.locals.len());
        for (id, local) in self.locals.iter_mut() {
            if !local.registered {
                continue;
            }
            if local.lease.check_lapse(cx.env.now, valid_for) {
                info!(job = %cx.name(), instance = %id, epoch = local.lease.epoch(), "worker lease ran out");
            }
            epochs.push((id.clone(), local.lease.epoch()));
        }
        epochs
    }

    /// Renewals, while the session is proven alive: a renewal after a lapse starts a new lease
    /// epoch. None within a lease of a drain's deadline, none to an instance whose revoke waits
    /// for its acknowledgement (`withheld`).
    pub(in crate::coordination::job) fn renew(&mut self, cx: &mut Cx, withheld: &BTreeSet<String>) {
        let valid_for = cx.settings().lease;
        let may = cx.may_grant();
        let stop = self
            .drain
            .is_some_and(|d| cx.env.now + valid_for >= d.deadline);
        if !may || stop {
            return;
        }
        let due: Vec<String> = self
            .locals
            .iter()
            .filter(|(id, l)| {
                l.registered
                    && l.gone.is_none()
                    && !withheld.contains(*id)
                    && l.lease.renewal_due(cx.env.now, valid_for)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            self.grant(cx, &id);
        }
    }

    /// Sends local instance `id` a lease valid for the configured length from now.
    pub(in crate::coordination::job) fn grant(&mut self, cx: &mut Cx, id: &str) {
        let valid_for = cx.settings().lease;
        let Some(local) = self.locals.get_mut(id) else {
            return;
        };
        local.lease.check_lapse(cx.env.now, valid_for);
        if !local.lease.valid(cx.env.now, valid_for) {
            debug!(job = %cx.name(), instance = %id, "lease granted (none was valid)");
        }
        self.lease_sequence += 1;
        let expires_at = SystemTime::from(cx.env.wall) + valid_for;
        let event = WorkerEvent::Lease {
            valid_for,
            expires_at,
            sequence: self.lease_sequence,
        };
        cx.send(local.stream, event);
        local.lease.grant(cx.env.now);
    }

    /// The instants the instances' leases and leaves are due, and whether a renewal waits for
    /// the session to be proven alive (`withheld`: instances whose renewals wait for a revoke's
    /// acknowledgement).
    pub(in crate::coordination::job) fn due(
        &self,
        now: Instant,
        valid_for: std::time::Duration,
        withheld: &BTreeSet<String>,
    ) -> (Vec<Instant>, bool) {
        let mut due = Vec::new();
        let mut waits_on_health = false;
        for (id, local) in self.locals.iter() {
            if let Some(gone) = &local.gone {
                due.push(gone.release_at);
                continue;
            }
            if !local.registered {
                continue;
            }
            due.extend(local.lease.expires(valid_for));
            if !withheld.contains(id) {
                match local.lease.next_renewal(valid_for) {
                    Some(t) if t > now => due.push(t),
                    _ => waits_on_health = true,
                }
            }
        }
        if let Some(drain) = &self.drain {
            due.push(drain.deadline.checked_sub(valid_for).unwrap_or(now));
            due.push(drain.deadline);
        }
        (due, waits_on_health)
    }
}
