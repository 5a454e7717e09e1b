//! Worker leases (`docs/guarantees.md`, "Leases"): every worker stream holds a lease, renewed
//! by its job's coordinator every third of its length while the registry session is proven
//! alive. A worker works only under a valid lease, so the workers of a frozen or cut-off
//! sidecar stop before its session can expire and their items be given to others.
//!
//! This is the sidecar's side of one stream's lease, without I/O: when it was granted, when the
//! worker has certainly stopped, and how many times it ran out. The worker counts its lease
//! from receipt but never past `expires_at` on the host's clock, so it stops no later than
//! `granted + valid_for` here; the sidecar therefore knows exactly when a lease is over.
//!
//! Below the lease of one stream, [`Instances`]' renewals of every stream's lease and what a
//! lapse means: whatever a worker was given under a lease that ran out is void.

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

use tracing::{debug, info};

use super::Instances;
use crate::coordination::events::WorkerEvent;
use crate::coordination::job::io::Cx;

/// The lease of one worker stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerLease {
    /// When the latest lease was sent; `None` before the first and after a lapse.
    granted: Option<Instant>,
    /// How many times the lease ran out. Work delivered under an earlier epoch was stopped by
    /// its worker.
    epoch: u64,
}

impl Default for WorkerLease {
    fn default() -> Self {
        WorkerLease::new()
    }
}

impl WorkerLease {
    pub fn new() -> WorkerLease {
        WorkerLease {
            granted: None,
            epoch: 0,
        }
    }

    /// The lease epoch: a count of lapses.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// When the worker has certainly stopped under the latest lease (`None`: no lease held).
    pub fn expires(&self, valid_for: Duration) -> Option<Instant> {
        self.granted.map(|g| g + valid_for)
    }

    /// Whether the worker may be working at `now`.
    pub fn valid(&self, now: Instant, valid_for: Duration) -> bool {
        self.expires(valid_for).is_some_and(|e| now < e)
    }

    /// How much of the lease is left at `now` (zero without one).
    pub fn remaining(&self, now: Instant, valid_for: Duration) -> Duration {
        self.expires(valid_for)
            .map_or(Duration::ZERO, |e| e.saturating_duration_since(now))
    }

    /// Whether a renewal is due at `now`: no lease, or a third of it used up.
    pub fn renewal_due(&self, now: Instant, valid_for: Duration) -> bool {
        self.granted.is_none_or(|g| now >= g + valid_for / 3)
    }

    /// When the next renewal is due (`None` without a lease: due now).
    pub fn next_renewal(&self, valid_for: Duration) -> Option<Instant> {
        self.granted.map(|g| g + valid_for / 3)
    }

    /// Notes the lapse of a lease that ran out by `now`. Returns whether it did (the epoch then
    /// grows and the lease is gone).
    pub fn check_lapse(&mut self, now: Instant, valid_for: Duration) -> bool {
        match self.expires(valid_for) {
            Some(e) if now >= e => {
                self.granted = None;
                self.epoch += 1;
                true
            }
            _ => false,
        }
    }

    /// Records a lease sent at `now` (after [`WorkerLease::check_lapse`], so a renewal after a
    /// lapse starts a new epoch).
    pub fn grant(&mut self, now: Instant) {
        self.granted = Some(now);
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_lapses_once_and_a_renewal_starts_a_new_epoch() {
        let t0 = crate::testing::epoch();
        let v = Duration::from_secs(3);
        let mut lease = WorkerLease::new();
        assert!(!lease.valid(t0, v));
        assert!(lease.renewal_due(t0, v));
        lease.grant(t0);
        assert!(lease.valid(t0 + Duration::from_secs(2), v));
        assert!(!lease.renewal_due(t0 + Duration::from_millis(900), v));
        assert!(lease.renewal_due(t0 + Duration::from_secs(1), v));
        assert_eq!(
            lease.remaining(t0 + Duration::from_secs(1), v),
            Duration::from_secs(2)
        );
        assert!(!lease.check_lapse(t0 + Duration::from_millis(2999), v));
        assert!(lease.check_lapse(t0 + v, v));
        assert!(!lease.check_lapse(t0 + v, v), "a lapse is counted once");
        assert_eq!(lease.epoch(), 1);
        assert!(!lease.valid(t0 + v, v));
        lease.grant(t0 + v);
        assert!(lease.valid(t0 + v, v));
        assert_eq!(lease.epoch(), 1);
    }
}
