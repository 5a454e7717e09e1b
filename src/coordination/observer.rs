//! What the coordinator reports as it works, for execution history, metrics and logs.
//! The job actors call an [`Observer`]; implementations must return quickly and never block
//! (they run on the actor's task).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

pub use crate::coordination::events::ItemOutcome;
use crate::coordination::events::Source;
use crate::coordination::trace::{SpanEvent, TraceContext};

/// A finished execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionRecord {
    pub job: String,
    pub execution_id: String,
    pub instance_id: String,
    pub source: Source,
    pub started_at: SystemTime,
    pub duration: Duration,
    pub items: BTreeMap<i32, ItemOutcome>,
    /// ElasticJob's task id.
    pub task_id: String,
    pub fire_time: SystemTime,
    pub fencing_tokens: BTreeMap<i32, i64>,
    /// Its span's ids (the `traceparent` its trigger carried) and events.
    pub trace: TraceContext,
    pub events: Vec<SpanEvent>,
    /// Which retry of its items it was (0: a first run).
    pub attempt: u32,
}

impl ExecutionRecord {
    /// When its span first noted the event `name`, if it did.
    pub fn noted(&self, name: &str) -> Option<SystemTime> {
        self.events.iter().find(|e| e.name == name).map(|e| e.at)
    }

    /// `completed`, `failed` (some item failed) or `revoked` (some item was taken back).
    pub fn outcome(&self) -> &'static str {
        if self
            .items
            .values()
            .any(|r| matches!(r, ItemOutcome::Revoked(_)))
        {
            "revoked"
        } else if self
            .items
            .values()
            .any(|r| matches!(r, ItemOutcome::Failed(_)))
        {
            "failed"
        } else {
            "completed"
        }
    }

    /// The first error text, if any item failed or was revoked.
    pub fn error(&self) -> Option<&str> {
        self.items.values().find_map(|r| match r {
            ItemOutcome::Failed(e) | ItemOutcome::Revoked(e) => Some(e.as_str()),
            ItemOutcome::Completed => None,
        })
    }
}

/// An item whose run failed (answered `ReportFailure`, or not answered within the execution
/// timeout), as the sidecar that received the failure recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemFailure {
    pub job: String,
    pub execution_id: String,
    pub task_id: String,
    pub instance_id: String,
    pub item: i32,
    /// Which retry of the item the failed run was (0: a first run).
    pub attempt: u32,
    pub error: String,
    pub at: SystemTime,
    /// The retry the job's policy scheduled (its attempt), or `None`: the failure stands.
    pub retry: Option<u32>,
    /// Whether the job has a retry policy at all (a failure that stands then ran out of
    /// attempts).
    pub retrying: bool,
    /// ElasticJob's `jobErrorHandlerType` and the job's props (the handler's settings): how a
    /// failure that stands is reported.
    pub error_handler: Option<String>,
    pub props: BTreeMap<String, String>,
}

/// Receives the coordinator's events. Every method has an empty default.
pub trait Observer: Send + Sync {
    /// A `Trigger` was sent; `latency` is from the fire instant to the send.
    fn trigger_sent(&self, _job: &str, _source: Source, _items: &[i32], _latency: Duration) {}
    /// An execution ended (every item answered or taken back).
    fn execution_finished(&self, _record: &ExecutionRecord) {}
    /// Items were flagged `misfire`.
    fn misfired(&self, _job: &str, _items: &[i32]) {}
    /// An item's run failed: a retry is scheduled, or the failure stands.
    fn item_failed(&self, _failure: &ItemFailure) {}
    /// This sidecar took over a failed item.
    fn failover_taken(&self, _job: &str, _item: i32) {}
    /// Items were revoked from a worker.
    fn revoked(&self, _job: &str, _items: &[i32], _reason: &str) {}
    /// A worker stream joined (`true`) or left (`false`) a job.
    fn worker(&self, _job: &str, _joined: bool) {}
    /// One of this sidecar's instances became (`true`) or stopped being (`false`) the job's leader.
    fn leadership(&self, _job: &str, _leader: bool) {}
    /// A resident item's hold started here: after a hand-off (`waited`, from reading that the
    /// item is this sidecar's instance's to the start) or a restart (`None`).
    fn hold_started(&self, _job: &str, _item: i32, _waited: Option<Duration>) {}
}

/// An observer that ignores everything.
pub struct NoObserver;

impl Observer for NoObserver {}
