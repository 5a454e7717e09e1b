//! What the coordinator tells a worker, and how a worker's stream ended: the domain side of the
//! worker contract (`proto/shardcar/v1/shardcar.proto` documents the rules). The gRPC layer
//! (`api`) turns these into protobuf messages; nothing here knows about gRPC.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};

use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;

/// Why an execution was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// A cron fire.
    Cron,
    /// A catch-up run for a fire the instance missed (busy, or without a lease).
    Misfire,
    /// Items of an instance that went away, taken over.
    Failover,
    /// A trigger-once request (`trigger/{instance}`, the Admin API, ElasticJob's console).
    Manual,
    /// A failed item run again under the job's retry policy.
    Retry,
    /// An item of a resident job, held until it is revoked.
    Resident,
}

impl Source {
    /// The name used in logs, history and metrics labels (the wire enum's value names).
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Cron => "CRON",
            Source::Misfire => "MISFIRE",
            Source::Failover => "FAILOVER",
            Source::Manual => "MANUAL",
            Source::Retry => "RETRY",
            Source::Resident => "RESIDENT",
        }
    }
}

/// One run of some items of a job on one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    pub execution_id: String,
    /// ElasticJob's task id: `{job}@-@{items}@-@READY@-@{ip}@-@{pid}`.
    pub task_id: String,
    /// Item and its parameter.
    pub items: Vec<(i32, String)>,
    pub job_parameter: String,
    pub sharding_total_count: i32,
    pub source: Source,
    pub fire_time: DateTime<Utc>,
    /// Per item: grows every time the item changes hands (the czxid of its `running` node).
    pub fencing_tokens: BTreeMap<i32, i64>,
    /// W3C Trace Context of the execution's span.
    pub traceparent: String,
    pub tracestate: String,
    /// Which retry of its items this run is (0: a first run).
    pub attempt: u32,
}

/// An event on a worker's stream, in the order the coordinator decided them.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerEvent {
    /// First on every stream: the instance id and the job's effective configuration.
    Registered {
        instance_id: String,
        config: Box<(JobConfiguration, JobExtras)>,
    },
    /// The items this instance owns now (item and parameter), whether it leads, and the
    /// sharding epoch.
    Assignment {
        items: Vec<(i32, String)>,
        leader: bool,
        epoch: i64,
    },
    /// Permission to work until the earlier of `valid_for` after receipt and `expires_at`.
    Lease {
        valid_for: Duration,
        expires_at: SystemTime,
        sequence: u64,
    },
    /// Boxed: a trigger is several times the size of every other event, and each worker
    /// stream's queue holds its events in blocks sized for the largest.
    Trigger(Box<Trigger>),
    /// Stop these items and decline them once stopped.
    Revoke { items: Vec<i32>, reason: String },
    /// The stream is ending: no new work.
    Shutdown { reason: String, kind: ShutdownKind },
}

/// Why a worker's stream is ending, which tells the worker whether to subscribe again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownKind {
    /// The sidecar is stopping: the worker may come back once it is up again.
    Drain,
    /// An operator shut the instance down: it does not come back to the job.
    Remote,
}

/// Who ended a worker's stream, as its transport saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// The worker closed it, or its process went away (its side of the connection closed):
    /// the worker knows its stream is over, so it runs nothing it delivered any more.
    ByWorker,
    /// This sidecar closed it (keepalive found the worker unresponsive, or the sidecar ended
    /// the stream itself): the worker may not know yet, and may run on until its lease ends.
    BySidecar,
}

/// The transport under a worker's stream, asked how the stream ended once it has.
pub trait Connection: Send + Sync {
    /// Who closed the stream's connection first (`ByWorker` while it is still open: the worker
    /// cancelled the stream itself).
    fn end(&self) -> StreamEnd;
}

/// A connection that always reports that the worker ended the stream (in-process callers,
/// whose streams end only when they drop them).
#[derive(Debug, Default, Clone, Copy)]
pub struct InProcess;

impl Connection for InProcess {
    fn end(&self) -> StreamEnd {
        StreamEnd::ByWorker
    }
}

/// How an item of an execution ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemOutcome {
    Completed,
    Failed(String),
    /// The sidecar took the item back (revoke, timeout, fencing, decline); answers are refused.
    Revoked(String),
}

impl ItemOutcome {
    /// `completed`, `failed` or `revoked`.
    pub fn kind(&self) -> &'static str {
        match self {
            ItemOutcome::Completed => "completed",
            ItemOutcome::Failed(_) => "failed",
            ItemOutcome::Revoked(_) => "revoked",
        }
    }
}
