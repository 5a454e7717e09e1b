//! Coordination of jobs on this sidecar: one [`job`] state machine and driver per job with
//! local instances, fed by worker commands and registry events. It speaks in domain terms
//! ([`events`]); the gRPC layer converts.
//!
//! [`Coordinator`] is the handle the services use: it routes a subscription to its job's
//! driver (starting one when needed) and an answer to the driver that owns the execution.

pub mod events;
mod finished;
pub(crate) mod job;
pub mod observer;
pub mod small_map;
pub mod trace;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::registry::{self, Registry};
use crate::schedule::{Timer, ANSWER_WAIT_MAX};
pub use events::{
    Connection, InProcess, ItemOutcome, ShutdownKind, Source, StreamEnd, Trigger, WorkerEvent,
};
use finished::FinishedExecutions;
use job::JobCmd;
pub use observer::{ExecutionRecord, ItemFailure, NoObserver, Observer};

/// How many finished executions the sidecar remembers for late or repeated answers.
pub const FINISHED_MEMORY: usize = 16_384;

/// Capacity of each worker's event stream; a worker this far behind is released.
pub const WORKER_STREAM_CAPACITY: usize = 256;

/// Errors of coordination requests, each mapped to the gRPC status a client can act on.
#[derive(Debug, Clone, thiserror::Error)]
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

/// State shared by the coordinator and its job drivers.
pub(crate) struct Shared {
    pub registry: Registry,
    pub timer: Timer,
    /// This sidecar's advertised IP: its `servers/{ip}` node.
    pub ip: String,
    /// How long each worker lease is valid.
    pub lease: Duration,
    /// The registry session timeout: self-fencing starts after 2/3 of it without a reply.
    pub session_timeout: Duration,
    /// Told about executions, misfires, failovers, revokes, workers and leadership.
    pub observer: Arc<dyn Observer>,
    /// Every task of the coordinator, so a shutdown can wait for them.
    pub tracker: TaskTracker,
    /// Job name → its driver. Locked only to look up, insert or remove; never across an await.
    pub jobs: Mutex<HashMap<String, job::JobSender>>,
    /// Execution id → job name of executions in flight, to route answers. Same locking rule.
    pub executions: Mutex<HashMap<String, String>>,
    /// Recently finished executions of every job. Same locking rule.
    pub finished: Mutex<FinishedExecutions>,
    /// The sidecar drains: no job takes a new worker. Set under the job table's lock, so that no
    /// job's driver starts unseen by the drain.
    pub draining: AtomicBool,
    keys: AtomicU64,
}

impl Shared {
    /// A number unique within this process (stream keys, timer keys).
    pub fn next_key(&self) -> u64 {
        self.keys.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// How long an answer call waits for its answer to be recorded before it returns
    /// UNAVAILABLE (the answer stays held and is recorded later): half the session timeout,
    /// within which a connection that was lost is back or the session is on its way out.
    pub(crate) fn answer_wait(&self) -> Duration {
        self.session_timeout / 2
    }

    /// What a job's state machine needs to know about this sidecar.
    pub(crate) fn job_settings(&self) -> job::Settings {
        job::Settings {
            ip: self.ip.clone(),
            session_timeout: self.session_timeout,
            lease: self.lease,
        }
    }

    /// The reply to an answer for an execution no job holds: remembered, or unknown.
    /// The reply to an answer (or, with `decline`, a decline) for an execution no job holds,
    /// from the sidecar's memory of finished executions ([`job::remembered_reply`]).
    pub(crate) fn remembered(
        &self,
        execution_id: &str,
        instance_id: &str,
        decline: bool,
    ) -> Result<(), CoordError> {
        let remembered = self
            .finished
            .lock()
            .expect("finished table poisoned")
            .reply(execution_id, instance_id)
            .unwrap_or_else(|| Err(CoordError::unknown_execution(execution_id)));
        job::remembered_reply(decline, remembered)
    }
}

/// Sends a command to job `job`'s driver, starting one if the job has none (or its driver
/// retired meanwhile). Returns the driver's sender.
pub(crate) async fn route(shared: &Arc<Shared>, job: &str, mut cmd: Box<JobCmd>) {
    loop {
        let driver = {
            // Held without an await: look up or insert only.
            let mut jobs = shared.jobs.lock().expect("job table poisoned");
            match jobs.get(job) {
                Some(tx) if !tx.is_closed() => tx.clone(),
                _ if shared.draining.load(Ordering::SeqCst) => {
                    // A job the drain did not reach (it had no driver then) takes no worker: the
                    // drain would never tell it to stop (checked under the table's lock, which
                    // the drain takes to start).
                    if let JobCmd::Join { reply, .. } = *cmd {
                        let _ = reply.send(Err(CoordError::Unavailable(DRAINING.into())));
                        return;
                    }
                    let tx = job::spawn(job, shared.clone());
                    jobs.insert(job.to_string(), tx.clone());
                    tx
                }
                _ => {
                    let tx = job::spawn(job, shared.clone());
                    jobs.insert(job.to_string(), tx.clone());
                    tx
                }
            }
        };
        match driver.send(cmd).await {
            Ok(()) => return,
            Err(mpsc::error::SendError(returned)) => cmd = returned,
        }
    }
}

/// Why a subscribe is refused while the sidecar drains.
const DRAINING: &str =
    "the sidecar is shutting down; subscribe again once it is back, or to another sidecar";

/// A request to register one worker instance for a job.
pub struct Subscription {
    pub job_name: String,
    pub instance_id: String,
    /// The job's config and shardcar's extra settings, to create (or overwrite) the job.
    pub config: Option<(JobConfiguration, JobExtras)>,
    pub overwrite: bool,
    /// How many executions the worker runs at once (≥ 1): with more than 1 it is also given
    /// FAILOVER and MISFIRE runs while busy.
    pub max_concurrent: u32,
    /// The transport of the worker's stream, asked who ended it.
    pub connection: Arc<dyn Connection>,
}

/// How the coordinator is set up.
pub struct CoordinatorSettings {
    /// This sidecar's advertised IP.
    pub ip: String,
    /// Worker lease length (capped at half the session timeout).
    pub lease: Duration,
    pub session_timeout: Duration,
}

/// The handle used by the gRPC services.
#[derive(Clone)]
pub struct Coordinator {
    shared: Arc<Shared>,
}

impl Coordinator {
    /// A coordinator whose tasks are tracked by `tracker`.
    pub fn new(
        registry: Registry,
        timer: Timer,
        settings: CoordinatorSettings,
        observer: Arc<dyn Observer>,
        tracker: TaskTracker,
    ) -> Coordinator {
        Coordinator {
            shared: Arc::new(Shared {
                registry,
                timer,
                ip: settings.ip,
                lease: settings.lease.min(settings.session_timeout / 2),
                session_timeout: settings.session_timeout,
                observer,
                tracker,
                jobs: Mutex::new(HashMap::new()),
                executions: Mutex::new(HashMap::new()),
                finished: Mutex::new(FinishedExecutions::new(FINISHED_MEMORY)),
                draining: AtomicBool::new(false),
                keys: AtomicU64::new(0),
            }),
        }
    }

    /// This sidecar's advertised IP.
    pub fn ip(&self) -> &str {
        &self.shared.ip
    }

    /// How long worker leases are valid.
    pub fn lease(&self) -> Duration {
        self.shared.lease
    }

    /// Registers a worker instance and returns its event stream. The instance leaves as soon
    /// as the returned receiver is dropped, whenever that happens (even before this returns).
    ///
    /// # Errors
    /// `NotFound` for a job without config and none given, `AlreadyExists` for an instance id
    /// with a live stream, `FailedPrecondition` for an unusable config in the registry,
    /// `Unavailable`/`Registry` when ZooKeeper cannot be reached.
    pub async fn subscribe(
        &self,
        sub: Subscription,
    ) -> Result<(JobConfiguration, mpsc::Receiver<Box<WorkerEvent>>), CoordError> {
        let (tx, rx) = mpsc::channel(WORKER_STREAM_CAPACITY);
        let (reply_tx, reply_rx) = oneshot::channel();
        let cmd = JobCmd::Join {
            instance_id: sub.instance_id,
            config: sub.config.map(Box::new),
            overwrite: sub.overwrite,
            max_concurrent: sub.max_concurrent,
            sink: tx,
            connection: sub.connection,
            reply: reply_tx,
        };
        route(&self.shared, &sub.job_name, Box::new(cmd)).await;
        let config = reply_rx.await.map_err(|_| {
            CoordError::Unavailable(format!("job {} stopped while subscribing", sub.job_name))
        })??;
        Ok((config, rx))
    }

    /// The driver holding `execution_id`, if any.
    fn driver_of(&self, execution_id: &str) -> Option<job::JobSender> {
        let job = self
            .shared
            .executions
            .lock()
            .expect("execution table poisoned")
            .get(execution_id)
            .cloned()?;
        self.driver_of_job(&job)
    }

    /// The driver of `job`, if it has an instance here.
    fn driver_of_job(&self, job: &str) -> Option<job::JobSender> {
        self.shared
            .jobs
            .lock()
            .expect("job table poisoned")
            .get(job)
            .cloned()
    }

    /// Waits, at most [`ANSWER_WAIT_MAX`], until the jobs have taken up every fire the timer
    /// has sent (see [`crate::schedule::Burst`]): at an instant when many jobs fire, the
    /// answers to the first triggers come after the rest of the fires, not between them.
    async fn after_the_fires(&self) {
        self.shared.timer.burst().settled(ANSWER_WAIT_MAX).await;
    }

    /// Records answers for items of an execution: returns once they are recorded in
    /// ZooKeeper, or refused, or after [`Shared::answer_wait`] without either. The sidecar holds
    /// every answer it has accepted and records it itself, whatever the call returns.
    ///
    /// # Errors
    /// `NotFound` for an unknown execution, `PermissionDenied` for another instance's,
    /// `FailedPrecondition` for a revoked (fenced) one, `InvalidArgument` for foreign items,
    /// `Unavailable` when ZooKeeper has not confirmed it in time (the sidecar goes on recording
    /// it; sending it again is harmless and never needed).
    pub async fn answer(
        &self,
        instance_id: &str,
        execution_id: &str,
        outcomes: Vec<(i32, ItemOutcome)>,
    ) -> Result<(), CoordError> {
        self.after_the_fires().await;
        let Some(driver) = self.driver_of(execution_id) else {
            return self.shared.remembered(execution_id, instance_id, false);
        };
        let (reply_tx, reply_rx) = oneshot::channel();
        let cmd = JobCmd::Answer {
            instance_id: instance_id.to_string(),
            execution_id: execution_id.to_string(),
            outcomes,
            reply: reply_tx,
        };
        if driver.send(Box::new(cmd)).await.is_err() {
            return self.shared.remembered(execution_id, instance_id, false);
        }
        match tokio::time::timeout(self.shared.answer_wait(), reply_rx).await {
            Ok(reply) => {
                reply.unwrap_or_else(|_| self.shared.remembered(execution_id, instance_id, false))
            }
            Err(_) => Err(CoordError::Unavailable(format!(
                "ZooKeeper has not confirmed the answer for execution {execution_id} within {} ms; \
                 the sidecar holds it and goes on recording it (sending it again is harmless)",
                self.shared.answer_wait().as_millis()
            ))),
        }
    }

    /// Gives items of an execution back without an outcome (empty `items`: all of them).
    ///
    /// # Errors
    /// `PermissionDenied` for another instance's execution, `InvalidArgument` for foreign
    /// items. An execution that is unknown or over is fine: nothing is left to give back.
    pub async fn decline(
        &self,
        instance_id: &str,
        execution_id: &str,
        items: Vec<i32>,
        reason: &str,
    ) -> Result<(), CoordError> {
        let Some(driver) = self.driver_of(execution_id) else {
            return self.shared.remembered(execution_id, instance_id, true);
        };
        let (reply_tx, reply_rx) = oneshot::channel();
        let cmd = JobCmd::Decline {
            instance_id: instance_id.to_string(),
            execution_id: execution_id.to_string(),
            items,
            reason: reason.to_string(),
            reply: reply_tx,
        };
        if driver.send(Box::new(cmd)).await.is_err() {
            return self.shared.remembered(execution_id, instance_id, true);
        }
        reply_rx
            .await
            .unwrap_or_else(|_| self.shared.remembered(execution_id, instance_id, true))
    }

    /// A `TriggerJob` call for `job` is about to write its trigger nodes: the MANUAL execution
    /// it starts on each local instance (within `for_`) continues `parent`'s trace, or starts
    /// its own with `None` (an untraced call, which also ends an earlier call's). Returns once
    /// the job's driver has taken it, so trigger nodes written after this are seen after it. A
    /// no-op for a job that has no instance here.
    pub async fn continue_trace(
        &self,
        job: &str,
        parent: Option<trace::TraceParent>,
        for_: Duration,
    ) {
        if let Some(driver) = self.driver_of_job(job) {
            let (reply, taken) = oneshot::channel();
            let cmd = JobCmd::ContinueTrace {
                parent,
                for_,
                reply,
            };
            if driver.send(Box::new(cmd)).await.is_ok() {
                let _ = taken.await;
            }
        }
    }

    /// Graceful shutdown of every job, all at once, by `deadline`: every local worker gets
    /// `Shutdown`; each instance leaves once its work is answered or its lease (no longer
    /// renewed one lease before the deadline) has run out. Returns when every job is done or
    /// the deadline has passed.
    /// Returns whether every job answered in time with every local instance gone (a job that
    /// retired meanwhile has none): only then may the session be closed at once.
    pub async fn drain(&self, deadline: Instant) -> bool {
        let drivers: Vec<job::JobSender> = {
            // Held without an await: from now on no job starts without the drain seeing it.
            let jobs = self.shared.jobs.lock().expect("job table poisoned");
            self.shared.draining.store(true, Ordering::SeqCst);
            jobs.values().cloned().collect()
        };
        let drains = drivers.into_iter().map(|driver| async move {
            let (reply_tx, reply_rx) = oneshot::channel();
            if driver
                .send(Box::new(JobCmd::Drain {
                    deadline,
                    reply: reply_tx,
                }))
                .await
                .is_ok()
            {
                // A driver that retired before answering had no instance left.
                reply_rx.await.unwrap_or(true)
            } else {
                true
            }
        });
        tokio::time::timeout_at(deadline.into(), futures::future::join_all(drains))
            .await
            .is_ok_and(|released| released.into_iter().all(|r| r))
    }

    /// Whether every job's work is given back (no job left with local instances).
    pub fn is_empty(&self) -> bool {
        self.shared
            .jobs
            .lock()
            .expect("job table poisoned")
            .is_empty()
    }
}
