//! A resident job's holds (`JobExtras::resident`): each item is held by one worker, its owner's,
//! as a RESIDENT execution of that one item that lasts until it is revoked. Nothing here is
//! new machinery: a hold starts with the same fenced write as any run (so never while another
//! `running` node of the item exists), is revoked and released as any run is (so the next
//! holder starts only once the last one declined or its lease ran out), and its end by the
//! worker schedules its restart in the item's pending-retry node, which survives this process.
//!
//! One execution per item, so that revoking one hold interrupts no other.

use std::collections::BTreeSet;
use std::time::Instant;

use tracing::info;

use super::fire::Start;
use super::Runs;
use crate::coordination::events::Source;
use crate::coordination::job::instances::Instances;
use crate::coordination::job::io::Cx;
use crate::coordination::job::writes::Release;
use crate::coordination::job::Observation;
use crate::elasticjob::extras::PendingRetry;

impl Runs {
    /// Revokes the holds whose item is no longer their instance's to hold, then starts a hold
    /// on every item a local instance may hold that nobody holds and whose restart is due.
    pub(super) fn reconcile_resident(&mut self, cx: &mut Cx, instances: &mut Instances) {
        self.revoke_moved_holds(cx, instances);
        let ip = cx.settings().ip.clone();
        let now_ms = cx.env.wall.timestamp_millis();
        let ready = self.ready(cx, instances, |_, _, _| true);
        let mut waiting_now = BTreeSet::new();
        for (id, _) in instances.iter().filter(|(_, l)| l.live()) {
            for i in cx.view().items_of(id, &ip) {
                waiting_now.insert(i);
            }
        }
        // Hand-offs are timed from the first reading that made an item an instance's here.
        self.holds_waiting.retain(|i, _| waiting_now.contains(i));
        let executing = self.executing();
        for i in &waiting_now {
            if !executing.contains(i) {
                self.holds_waiting.entry(*i).or_insert(cx.env.now);
            }
        }
        for id in ready {
            for i in self.runnable_now(cx, &id) {
                let pending = cx.view().items.get(&i).and_then(|it| it.retry.as_ref());
                if pending.is_some_and(|r| r.due_ms > now_ms) {
                    continue; // restarted when due (`retries_due` wakes the job)
                }
                let what = Start {
                    attempt: pending.map_or(0, |r| r.attempt),
                    ..Start::of(Source::Resident, cx.env.wall)
                };
                let waited = self.holds_waiting.remove(&i);
                let handoff = waited
                    .filter(|_| pending.is_none())
                    .map(|since| cx.env.now.saturating_duration_since(since));
                info!(job = %cx.name(), instance = %id, item = i, attempt = what.attempt,
                      "holding a resident item");
                if self
                    .start(cx, instances, &id, vec![i], what, Vec::new())
                    .is_some()
                {
                    cx.observe(Observation::HoldStarted {
                        item: i,
                        waited: handoff,
                    });
                }
            }
        }
    }

    /// Revokes every hold its instance may no longer keep: the item moved to another owner, was
    /// disabled or is beyond the count, the server or job was disabled, or the instance is
    /// shutting down (a drain, a remote shutdown). The next holder starts once this one has
    /// declined or its lease ran out.
    fn revoke_moved_holds(&mut self, cx: &mut Cx, instances: &Instances) {
        let ip = cx.settings().ip.clone();
        let moved: Vec<(String, String)> = self
            .executions
            .values()
            .filter(|e| e.source == Source::Resident && e.void.is_none())
            .filter_map(|e| {
                let item = *e.items.iter().next()?;
                let reason = if instances
                    .get(&e.instance_id)
                    .is_some_and(|l| l.shutting_down())
                {
                    "the instance is shutting down"
                } else if !cx.view().items_of(&e.instance_id, &ip).contains(&item) {
                    "the item moved to another instance (or its server was disabled)"
                } else if cx.view().items.get(&item).is_some_and(|it| it.disabled) {
                    "the item was disabled"
                } else {
                    return None;
                };
                Some((e.id.clone(), format!("resident item {item}: {reason}")))
            })
            .collect();
        for (execution_id, reason) in moved {
            self.revoke(cx, instances, &execution_id, &reason, Release::Abandoned);
        }
    }

    /// Item `i`'s next hold after its worker ended the one of `attempt` (0 for a first hold)
    /// that began at `started`: after the job's restart backoff, which grows with each hold
    /// that ends before the longest backoff has passed and starts over after one that lasted.
    pub(super) fn next_hold(cx: &Cx, attempt: u32, started: Instant) -> PendingRetry {
        let policy = cx.view().extras.restart_policy();
        let lasted = cx.env.now.saturating_duration_since(started);
        let next = if lasted.as_millis() >= u128::from(policy.max_backoff_ms) {
            1
        } else {
            attempt.saturating_add(1)
        };
        PendingRetry {
            attempt: next,
            due_ms: cx.env.wall.timestamp_millis() + policy.backoff(next).as_millis() as i64,
            parameter: None,
        }
    }
}
