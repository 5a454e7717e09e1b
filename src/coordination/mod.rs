//! Coordination of jobs on this sidecar: one actor per job with local instances
//! ([`job`]), fed by worker commands and registry events, deciding through pure functions
//! ([`view`], [`election`], [`sharding`], [`execution`], [`failover`], [`strategy`]).
//!
//! [`Coordinator`] is the handle the gRPC services use: it routes a subscription to its job's
//! actor (starting it when needed) and an answer to the actor that owns the execution.

pub mod election;
pub mod execution;
pub mod failover;
mod job;
pub mod lease;
pub mod observer;
pub mod sharding;
pub mod strategy;
pub mod view;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tonic::{Code, Status};

use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::proto::WorkerEvent;
use crate::registry::{self, Registry};
use crate::schedule::Timer;
use execution::FinishedExecutions;
pub use execution::ItemOutcome;
use job::{JobActor, JobCmd};
pub use lease::{EventSender, Leases};
pub use observer::{ExecutionRecord, NoObserver, Observer};

/// How many finished executions the sidecar remembers for late or repeated answers.
pub const FINISHED_MEMORY: usize = 16_384;

/// Capacity of each worker's event stream; a worker this far behind is released.
pub const WORKER_STREAM_CAPACITY: usize = 256;

/// Errors of coordination requests, each mapped to the gRPC status a client can act on.
#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("invalid {field}: {message}")]
    InvalidArgument { field: String, message: String },
    #[error("the registry is not available: {0}")]
    Registry(#[from] registry::Error),
    #[error("{0}")]
    Unavailable(String),
}

impl CoordError {
    /// The error for an answer naming an execution this sidecar does not know.
    pub fn unknown_execution(execution_id: &str) -> CoordError {
        CoordError::NotFound(format!(
            "execution {execution_id} is not known to this sidecar (it never existed here, was forgotten long ago, or the sidecar restarted)"
        ))
    }
}

impl From<CoordError> for Status {
    fn from(e: CoordError) -> Status {
        let code = match &e {
            CoordError::NotFound(_) => Code::NotFound,
            CoordError::AlreadyExists(_) => Code::AlreadyExists,
            CoordError::PermissionDenied(_) => Code::PermissionDenied,
            CoordError::FailedPrecondition(_) => Code::FailedPrecondition,
            CoordError::InvalidArgument { .. } => Code::InvalidArgument,
            CoordError::Registry(_) | CoordError::Unavailable(_) => Code::Unavailable,
        };
        Status::new(code, e.to_string())
    }
}

/// State shared by the coordinator and its job actors.
pub(crate) struct Shared {
    pub registry: Registry,
    pub timer: Timer,
    /// This sidecar's advertised IP: its `servers/{ip}` node.
    pub ip: String,
    pub leases: Leases,
    /// The registry session timeout: self-fencing starts after 2/3 of it without a reply.
    pub session_timeout: Duration,
    /// Told about executions, misfires, failovers, revokes, workers and leadership.
    pub observer: Arc<dyn Observer>,
    /// Job name → its actor. Locked only to look up, insert or remove; never across an await.
    pub jobs: Mutex<HashMap<String, mpsc::Sender<JobCmd>>>,
    /// Execution id → job name of executions in flight, to route answers. Same locking rule.
    pub executions: Mutex<HashMap<String, String>>,
    /// Recently finished executions of every job. Same locking rule.
    pub finished: Mutex<FinishedExecutions>,
    keys: AtomicU64,
}

impl Shared {
    /// A number unique within this process (stream keys, timer keys).
    pub fn next_key(&self) -> u64 {
        self.keys.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// A request to register one worker instance for a job.
pub struct Subscription {
    pub job_name: String,
    pub instance_id: String,
    /// The job's config and shardcar's extra settings, to create (or overwrite) the job.
    pub config: Option<(JobConfiguration, JobExtras)>,
    pub overwrite: bool,
}

/// The handle used by the gRPC services.
#[derive(Clone)]
pub struct Coordinator {
    shared: Arc<Shared>,
}

impl Coordinator {
    /// A coordinator for the sidecar advertised as `ip`.
    pub fn new(
        registry: Registry,
        timer: Timer,
        ip: String,
        leases: Leases,
        session_timeout: Duration,
        observer: Arc<dyn Observer>,
    ) -> Coordinator {
        Coordinator {
            shared: Arc::new(Shared {
                registry,
                timer,
                ip,
                leases,
                session_timeout,
                observer,
                jobs: Mutex::new(HashMap::new()),
                executions: Mutex::new(HashMap::new()),
                finished: Mutex::new(FinishedExecutions::new(FINISHED_MEMORY)),
                keys: AtomicU64::new(0),
            }),
        }
    }

    /// This sidecar's advertised IP.
    pub fn ip(&self) -> &str {
        &self.shared.ip
    }

    /// Registers a worker instance and returns its event stream. The instance is removed
    /// as soon as the returned receiver is dropped (the worker's stream ended).
    ///
    /// # Errors
    /// `NotFound` for a job without config and none given, `AlreadyExists` for an instance id
    /// with a live stream, `FailedPrecondition` for an unreadable config in the registry,
    /// `Registry` when ZooKeeper cannot be reached.
    pub async fn subscribe(
        &self,
        sub: Subscription,
    ) -> Result<
        (
            JobConfiguration,
            mpsc::Receiver<Result<WorkerEvent, Status>>,
        ),
        CoordError,
    > {
        let (tx, rx) = mpsc::channel(WORKER_STREAM_CAPACITY);
        let stream_key = self.shared.next_key();
        let (reply_tx, reply_rx) = oneshot::channel();
        let stop = CancellationToken::new();
        let cmd = JobCmd::Join {
            instance_id: sub.instance_id.clone(),
            config: sub.config.map(Box::new),
            overwrite: sub.overwrite,
            sink: tx.clone(),
            stream_key,
            stop: stop.clone(),
            reply: reply_tx,
        };
        let actor = self.send(&sub.job_name, cmd).await?;
        let config = reply_rx.await.map_err(|_| {
            CoordError::Unavailable(format!("job {} stopped while subscribing", sub.job_name))
        })??;
        // Watch for the end of the stream: the instance leaves at once. When the sidecar ends
        // the stream itself (`stop`), this task lets go of its sender so the stream can end.
        tokio::spawn(async move {
            tokio::select! {
                _ = tx.closed() => {
                    let leave = JobCmd::Leave { instance_id: sub.instance_id, stream_key, reason: "stream closed".into() };
                    let _ = actor.send(leave).await;
                }
                _ = stop.cancelled() => {}
            }
        });
        Ok((config, rx))
    }

    /// Records answers for items of an execution.
    ///
    /// # Errors
    /// `NotFound` for an unknown execution, `PermissionDenied` for another instance's,
    /// `FailedPrecondition` for a revoked (fenced) one, `InvalidArgument` for foreign items.
    pub async fn answer(
        &self,
        instance_id: &str,
        execution_id: &str,
        outcomes: Vec<(i32, ItemOutcome)>,
    ) -> Result<(), CoordError> {
        let job = self
            .shared
            .executions
            .lock()
            .expect("execution table poisoned")
            .get(execution_id)
            .cloned();
        let remembered = || {
            self.shared
                .finished
                .lock()
                .expect("finished table poisoned")
                .reply(execution_id, instance_id)
                .unwrap_or_else(|| Err(CoordError::unknown_execution(execution_id)))
        };
        let Some(actor) = job.and_then(|job| {
            self.shared
                .jobs
                .lock()
                .expect("job table poisoned")
                .get(&job)
                .cloned()
        }) else {
            return remembered();
        };
        let (reply_tx, reply_rx) = oneshot::channel();
        let cmd = JobCmd::Answer {
            instance_id: instance_id.to_string(),
            execution_id: execution_id.to_string(),
            outcomes,
            reply: reply_tx,
        };
        if actor.send(cmd).await.is_err() {
            return remembered();
        }
        reply_rx.await.unwrap_or_else(|_| remembered())
    }

    /// Graceful shutdown of every job: each local worker gets `Shutdown`, its instance is
    /// removed (so peers take over at once) and its stream ends.
    pub async fn drain(&self, reason: &str) {
        let actors: Vec<mpsc::Sender<JobCmd>> = self
            .shared
            .jobs
            .lock()
            .expect("job table poisoned")
            .values()
            .cloned()
            .collect();
        for actor in actors {
            let (reply_tx, reply_rx) = oneshot::channel();
            if actor
                .send(JobCmd::Drain {
                    reason: reason.to_string(),
                    reply: reply_tx,
                })
                .await
                .is_ok()
            {
                let _ = reply_rx.await;
            }
        }
    }

    /// Sends a command to the job's actor, starting one if the job has none (or its actor
    /// retired meanwhile). Returns the actor's sender.
    async fn send(&self, job: &str, mut cmd: JobCmd) -> Result<mpsc::Sender<JobCmd>, CoordError> {
        loop {
            let actor = {
                let mut jobs = self.shared.jobs.lock().expect("job table poisoned");
                match jobs.get(job) {
                    Some(tx) if !tx.is_closed() => tx.clone(),
                    _ => {
                        let (tx, rx) = mpsc::channel(1024);
                        jobs.insert(job.to_string(), tx.clone());
                        let actor =
                            JobActor::new(job.to_string(), self.shared.clone(), tx.clone(), rx);
                        tokio::spawn(actor.run());
                        tx
                    }
                }
            };
            match actor.send(cmd).await {
                Ok(()) => return Ok(actor),
                Err(mpsc::error::SendError(returned)) => cmd = returned,
            }
        }
    }
}
