//! Following a job as it changes: one recursive watch on the job's subtree, and the job's state
//! read again after each batch of changes. `Admin.WatchJob` streams it to `shardcar ctl watch`;
//! the console's job page turns it into server-sent events.

use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use crate::elasticjob::paths::{JobNode, JobPaths};
use crate::registry::{Registry, Watch, WatchEvent};

use super::jobs::{self, AdminError, JobInfo};

/// Changes arriving within this long of each other are reported in one update.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// Updates buffered for a slow follower before the watch waits for it.
const BUFFER: usize = 16;

/// The job's state after some changes.
#[derive(Debug, Clone)]
pub struct JobUpdate {
    pub at: SystemTime,
    /// What changed, for a person ("created sharding/0/running"); empty in the first update.
    pub changes: Vec<String>,
    /// The job's state now; `None`: it was removed (the last update).
    pub job: Option<JobInfo>,
}

/// Starts following `job`: the first update is its state now, then one per batch of changes,
/// until the receiver is dropped, the job is removed (an update without a job, then the end) or
/// the registry fails (an error, then the end). The follower runs on `tracker`.
///
/// # Errors
/// `JobNotFound`, or the watch cannot be set.
pub async fn follow(
    registry: &Registry,
    job: &str,
    tracker: &TaskTracker,
) -> Result<mpsc::Receiver<Result<JobUpdate, AdminError>>, AdminError> {
    let paths = JobPaths::new(job);
    // Watch first, then read: no change can fall between the two.
    let watch = registry.watch_recursive(&paths.root()).await?;
    let first = jobs::get_job(registry, job).await?;
    let (tx, rx) = mpsc::channel(BUFFER);
    tracker.spawn(run(registry.clone(), paths, watch, first, tx));
    Ok(rx)
}

/// Describes a change for a person, relative to the job root; `None` for nodes that change
/// all the time without meaning anything to an operator (latch contenders, the clock node).
pub fn describe(paths: &JobPaths, event: &WatchEvent) -> Option<String> {
    let (verb, path) = match event {
        WatchEvent::Created(p) => ("created", p),
        WatchEvent::Deleted(p) => ("deleted", p),
        WatchEvent::DataChanged(p) => ("changed", p),
        WatchEvent::Resync => return Some("reconnected to the registry: state re-read".into()),
    };
    match paths.classify(path) {
        JobNode::ElectionLatch | JobNode::FailoverLatch => return None,
        JobNode::Other if path.ends_with("systemTime/current") => return None,
        _ => {}
    }
    let root = paths.root();
    let relative = path
        .strip_prefix(&root)
        .map(|r| r.trim_start_matches('/'))
        .filter(|r| !r.is_empty())
        .unwrap_or("(job root)");
    Some(format!("{verb} {relative}"))
}

#[allow(
    clippy::disallowed_methods,
    reason = "stamps a change of a watched job when it is seen: an I/O edge"
)]
async fn run(
    registry: Registry,
    paths: JobPaths,
    mut watch: Watch,
    first: JobInfo,
    tx: mpsc::Sender<Result<JobUpdate, AdminError>>,
) {
    let update = JobUpdate {
        at: SystemTime::now(),
        changes: Vec::new(),
        job: Some(first),
    };
    if tx.send(Ok(update)).await.is_err() {
        return;
    }
    loop {
        let event = tokio::select! {
            _ = tx.closed() => return,
            event = watch.next() => match event {
                Some(event) => event,
                None => return,
            },
        };
        let mut changes: Vec<String> = describe(&paths, &event).into_iter().collect();
        tokio::time::sleep(DEBOUNCE).await;
        while let Some(event) = watch.try_next() {
            changes.extend(describe(&paths, &event));
        }
        if changes.is_empty() {
            continue;
        }
        let update = match jobs::get_job(&registry, paths.job_name()).await {
            Ok(job) => JobUpdate {
                at: SystemTime::now(),
                changes,
                job: Some(job),
            },
            Err(AdminError::JobNotFound(_)) => {
                let removed = JobUpdate {
                    at: SystemTime::now(),
                    changes,
                    job: None,
                };
                let _ = tx.send(Ok(removed)).await;
                return;
            }
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        if tx.send(Ok(update)).await.is_err() {
            return;
        }
    }
}
