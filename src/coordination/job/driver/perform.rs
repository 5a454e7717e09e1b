//! Helpers of the driver's actions: the timer's schedule, the observer, ZooKeeper's clock.

use super::Driver;
use crate::coordination::job::Observation;
use crate::registry::{Error as RegError, Registry, Stat};
use crate::schedule::CronSchedule;

impl Driver {
    pub(super) fn schedule(&mut self, wanted: Option<CronSchedule>) {
        match wanted {
            Some(schedule) => {
                self.shared
                    .timer
                    .schedule(self.timer_key.clone(), schedule, self.fires.clone())
            }
            None => self.shared.timer.cancel(&self.timer_key),
        }
    }

    pub(super) fn observe(&self, observation: Observation) {
        let job = self.state.name();
        let observer = &self.shared.observer;
        match observation {
            Observation::TriggerSent {
                source,
                items,
                latency,
            } => observer.trigger_sent(job, source, &items, latency),
            Observation::Finished(record) => observer.execution_finished(&record),
            Observation::Misfired(items) => observer.misfired(job, &items),
            Observation::ItemFailed(failure) => observer.item_failed(&failure),
            Observation::FailoverTaken(items) => {
                for item in items {
                    observer.failover_taken(job, item);
                }
            }
            Observation::Revoked { items, reason } => observer.revoked(job, &items, &reason),
            Observation::Worker { joined } => observer.worker(job, joined),
            Observation::Leadership { leading } => observer.leadership(job, leading),
            Observation::HoldStarted { item, waited } => observer.hold_started(job, item, waited),
            Observation::ClaimAnswered { fire_time } => self.shared.timer.lead().claimed(fire_time),
        }
    }
}

/// Touches `path` (ElasticJob's `systemTime/current`), creating it when it is missing: its stat
/// carries ZooKeeper's clock.
pub(super) async fn touch(registry: &Registry, path: &str) -> Result<Stat, RegError> {
    match registry.set(path, b"", None).await {
        Err(RegError::NoNode(_)) => {
            registry.persist(path, b"").await?;
            registry
                .exists(path)
                .await?
                .ok_or_else(|| RegError::NoNode(path.to_string()))
        }
        other => other,
    }
}
