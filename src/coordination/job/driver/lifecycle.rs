//! A job driver's life: the commands it takes ([`JobCmd`]), its start ([`spawn`]) and its
//! retirement once nothing is left to do.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesOrdered, FuturesUnordered};
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

use super::{Driver, EventSender, JobSender};
use crate::coordination::events::{Connection, ItemOutcome};
use crate::coordination::job::state::JobState;
use crate::coordination::small_map::SmallMap;
use crate::coordination::{CoordError, Shared};
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::elasticjob::paths::JobPaths;
use crate::registry::RequestOrder;
use crate::schedule::{Fire, FireQueue};

/// A command for a job's driver.
pub(crate) enum JobCmd {
    Join {
        instance_id: String,
        /// Boxed: the config is large and most commands carry none.
        config: Option<Box<(JobConfiguration, JobExtras)>>,
        overwrite: bool,
        max_concurrent: u32,
        sink: EventSender,
        connection: Arc<dyn Connection>,
        reply: oneshot::Sender<Result<JobConfiguration, CoordError>>,
    },
    Answer {
        instance_id: String,
        execution_id: String,
        outcomes: Vec<(i32, ItemOutcome)>,
        reply: oneshot::Sender<Result<(), CoordError>>,
    },
    Decline {
        instance_id: String,
        execution_id: String,
        items: Vec<i32>,
        reason: String,
        reply: oneshot::Sender<Result<(), CoordError>>,
    },
    Drain {
        deadline: Instant,
        /// Whether every local instance has left.
        reply: oneshot::Sender<bool>,
    },
    /// See [`Input::ContinueTrace`].
    ContinueTrace {
        parent: Option<crate::coordination::trace::TraceParent>,
        for_: Duration,
        /// Answered as the input is fed, before anything else is handled.
        reply: oneshot::Sender<()>,
    },
    /// A fire of the job's schedule (sent by the timer through its [`FireQueue`]).
    Fire(Box<Fire>),
}

impl From<Box<Fire>> for JobCmd {
    fn from(fire: Box<Fire>) -> JobCmd {
        JobCmd::Fire(fire)
    }
}

/// Starts the driver of job `name` and returns its command sender.
pub(crate) fn spawn(name: &str, shared: Arc<Shared>) -> JobSender {
    let (cmd_tx, cmd_rx) = mpsc::channel(1024);
    let settings = shared.job_settings();
    let driver = Driver {
        timer_key: format!("{name}#{}", shared.next_key()),
        paths: JobPaths::new(name),
        state: JobState::new(name, settings),
        session_rx: shared.registry.session(),
        shared: shared.clone(),
        cmd_rx,
        fires: Arc::new(FireQueue::new(cmd_tx.clone())),
        taken: None,
        watch: None,
        io: FuturesOrdered::new(),
        children: FuturesUnordered::new(),
        sinks: SmallMap::new(),
        replies: HashMap::new(),
        latches: HashMap::new(),
        next_reply: 0,
        next_latch: 0,
        followups: Vec::new(),
        order: RequestOrder::default(),
    };
    // Boxed: the loop's future then holds a pointer, not the driver (which an `async fn`
    // taking `self` by value would hold twice: as its argument and as its local).
    shared.tracker.spawn(Box::new(driver).run());
    cmd_tx
}

impl Driver {
    /// Leaves the sidecar's job table when there is nothing left to do. Commands that raced
    /// in after the table entry was removed are handed to a new driver of the job.
    pub(super) fn try_retire(&mut self) -> bool {
        let name = self.state.name().to_string();
        {
            // Held without an await: only the table and the queue are looked at.
            let mut jobs = self.shared.jobs.lock().expect("job table poisoned");
            if !self.cmd_rx.is_empty() {
                return false;
            }
            if jobs
                .get(&name)
                .is_some_and(|tx| tx.same_channel(self.fires.sender()))
            {
                jobs.remove(&name);
            }
        }
        self.cmd_rx.close();
        let mut leftover = Vec::new();
        while let Ok(cmd) = self.cmd_rx.try_recv() {
            // A fire is the retired schedule's (cancelled below): a new driver has none.
            if !matches!(*cmd, JobCmd::Fire(_)) {
                leftover.push(cmd);
            }
        }
        self.shared.timer.cancel(&self.timer_key);
        for (_, latch) in self.latches.drain() {
            drop(latch); // deletes its node in the background
        }
        if !leftover.is_empty() {
            let shared = self.shared.clone();
            self.shared.tracker.spawn(async move {
                for cmd in leftover {
                    crate::coordination::route(&shared, &name, cmd).await;
                }
            });
        }
        debug!(job = %self.state.name(), "job driver retired: nothing left to do");
        true
    }
}
