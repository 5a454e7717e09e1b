//! What the driver does with each action the state returns: a registry request in its turn,
//! an event queued on a worker's stream, a reply, a latch, the timer's schedule, the observer.

use futures::FutureExt;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::setup::set_up;
use super::{Child, Driver, Queued, ReplyTx, LATCH_DEADLINE};
use crate::coordination::events::StreamEnd;
use crate::coordination::job::{Action, Input, IoResult, Observation, Reply};
use crate::registry::{Error as RegError, Registry, Stat};
use crate::schedule::CronSchedule;

impl Driver {
    pub(super) fn perform(&mut self, action: Action) {
        let registry = self.shared.registry.clone();
        match action {
            Action::Send { stream, event } => {
                let Some(sink) = self.sinks.get(&stream) else {
                    return;
                };
                if let Err(mpsc::error::TrySendError::Full(_)) = sink.tx.try_send(Box::new(event)) {
                    warn!(job = %self.state.name(), stream, "worker stream full: the worker is not reading its events; ending it");
                    self.followups.push(Input::StreamEnded {
                        stream,
                        end: StreamEnd::BySidecar,
                    });
                }
            }
            Action::EndStream { stream } => {
                if let Some(sink) = self.sinks.remove(&stream) {
                    sink.stop.cancel();
                }
            }
            Action::Reply { reply, result } => match (self.replies.remove(&reply), result) {
                (Some(ReplyTx::Join(tx)), Reply::Joined(r)) => {
                    let _ = tx.send(r.map(|c| *c));
                }
                (Some(ReplyTx::Answer(tx)), Reply::Answered(r)) => {
                    let _ = tx.send(r);
                }
                (Some(ReplyTx::Drain(tx)), Reply::Drained { released }) => {
                    let _ = tx.send(released);
                }
                _ => {}
            },
            Action::Remembered {
                reply,
                execution_id,
                instance_id,
                decline,
            } => {
                if let Some(ReplyTx::Answer(tx)) = self.replies.remove(&reply) {
                    let _ = tx.send(self.shared.remembered(&execution_id, &instance_id, decline));
                }
            }
            Action::SetUp {
                op,
                config,
                overwrite,
            } => {
                let (paths, ip) = (self.paths.clone(), self.shared.ip.clone());
                self.children.push(
                    async move {
                        Child::SetUp(op, set_up(&registry, &paths, &ip, config, overwrite).await)
                    }
                    .boxed(),
                );
            }
            Action::Commit {
                op,
                generation,
                ops,
            } => self.push_request(true, async move {
                let result = registry.multi_at_batched(generation, ops).await;
                Queued::Done(op, IoResult::Committed(result))
            }),
            Action::Persist { op, path, data } => self.push_request(false, async move {
                let result = registry.persist(&path, &data).await;
                Queued::Done(op, IoResult::Persisted(result))
            }),
            Action::Read { op, path } => self.push_request(false, async move {
                let node = registry.get(&path).await;
                Queued::Done(op, IoResult::Read { path, node })
            }),
            Action::ReadMany { op, paths } => self.push_request(false, async move {
                let nodes = registry.get_many(&paths).await;
                Queued::Done(op, IoResult::ReadMany { paths, nodes })
            }),
            Action::Reload { op } => {
                let root = self.paths.root();
                self.push_request(false, async move {
                    Queued::Done(op, IoResult::Loaded(registry.read_tree(&root).await))
                })
            }
            Action::Watch { op } => {
                let root = self.paths.root();
                self.children.push(
                    async move { Child::Watching(op, registry.watch_recursive(&root).await) }
                        .boxed(),
                );
            }
            Action::AcquireLatch { op, dir } => {
                self.children.push(
                    async move {
                        let result =
                            tokio::time::timeout(LATCH_DEADLINE, registry.acquire_latch(&dir))
                                .await
                                .unwrap_or(Err(RegError::Timeout(LATCH_DEADLINE)));
                        Child::Latched(op, result)
                    }
                    .boxed(),
                );
            }
            Action::ReleaseLatch { latch } => {
                if let Some(latch) = self.latches.remove(&latch) {
                    self.shared.tracker.spawn(async move {
                        if let Err(e) = latch.release().await {
                            debug!(error = %e, "latch release failed; its node goes with the session");
                        }
                    });
                }
            }
            Action::TouchClock { op } => {
                let path = self.paths.system_time();
                self.push_request(false, async move {
                    Queued::Done(op, IoResult::Clock(touch(&registry, &path).await))
                })
            }
            Action::Schedule(wanted) => self.schedule(wanted),
            Action::Observe(observation) => self.observe(observation),
            Action::TrackExecution { id } => {
                self.shared
                    .executions
                    .lock()
                    .expect("execution table poisoned")
                    .insert(id, self.state.name().to_string());
            }
            Action::ForgetExecution { id, finished } => {
                self.shared
                    .executions
                    .lock()
                    .expect("execution table poisoned")
                    .remove(&id);
                self.shared
                    .finished
                    .lock()
                    .expect("finished table poisoned")
                    .insert(&id, finished);
            }
        }
    }

    fn schedule(&mut self, wanted: Option<CronSchedule>) {
        match wanted {
            Some(schedule) => {
                self.shared
                    .timer
                    .schedule(self.timer_key.clone(), schedule, self.fires.clone())
            }
            None => self.shared.timer.cancel(&self.timer_key),
        }
    }

    fn observe(&self, observation: Observation) {
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
async fn touch(registry: &Registry, path: &str) -> Result<Stat, RegError> {
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
