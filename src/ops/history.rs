//! Execution history of this sidecar: the last N finished executions (every item's outcome) in
//! memory, served by `Admin.ListExecutions`, and optionally appended as JSON lines to a file.
//!
//! The coordinator's job actors record into it through the [`Observer`](crate::coordination::Observer)
//! hook, so recording never blocks: the in-memory ring is guarded by a lock held only to push or
//! copy, and file writes go to a dedicated writer thread over a bounded channel (a line that
//! does not fit is dropped and counted, never waited for).

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};

use crate::coordination::{ExecutionRecord, ItemOutcome};

/// Lines waiting for the writer thread before new ones are dropped.
const FILE_QUEUE: usize = 4096;

/// The history file cannot be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the execution history file {path}: {source}")]
pub struct HistoryFileError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// A bounded, in-memory record of finished executions, newest last.
pub struct History {
    capacity: usize,
    /// Locked only to push or copy records; never across an await.
    records: Mutex<VecDeque<ExecutionRecord>>,
    file_tx: Option<mpsc::SyncSender<String>>,
    dropped_lines: AtomicU64,
    /// Counts records, so that followers (the console's live pages) learn of new ones.
    recorded: tokio::sync::watch::Sender<u64>,
}

impl History {
    /// A history keeping the last `capacity` executions (0 keeps none), without a file.
    pub fn new(capacity: usize) -> History {
        History {
            capacity,
            records: Mutex::new(VecDeque::with_capacity(capacity.min(4096))),
            file_tx: None,
            dropped_lines: AtomicU64::new(0),
            recorded: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Like [`History::new`], also appending every record as one JSON line to `path`.
    ///
    /// # Errors
    /// When the file cannot be opened for appending (it is created if missing).
    pub fn with_file(capacity: usize, path: &Path) -> Result<History, HistoryFileError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| HistoryFileError {
                path: path.to_path_buf(),
                source,
            })?;
        let (tx, rx) = mpsc::sync_channel::<String>(FILE_QUEUE);
        let shown = path.display().to_string();
        std::thread::Builder::new()
            .name("shardcar-history".into())
            .spawn(move || write_lines(file, rx, &shown))
            .map_err(|source| HistoryFileError {
                path: path.to_path_buf(),
                source,
            })?;
        let mut history = History::new(capacity);
        history.file_tx = Some(tx);
        Ok(history)
    }

    /// Records a finished execution.
    pub fn record(&self, record: &ExecutionRecord) {
        if let Some(tx) = &self.file_tx {
            let line = to_json(record).to_string();
            if tx.try_send(line).is_err() {
                self.dropped_lines.fetch_add(1, Ordering::Relaxed);
            }
        }
        if self.capacity == 0 {
            return;
        }
        {
            // Short critical section: push and trim, no await.
            let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
            if records.len() == self.capacity {
                records.pop_front();
            }
            records.push_back(record.clone());
        }
        // Never blocks: followers read the count when they get to it.
        self.recorded.send_modify(|n| *n += 1);
    }

    /// A receiver that sees a change each time executions are recorded.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.recorded.subscribe()
    }

    /// The most recent executions of `job` (every job when `None`), newest first, at most
    /// `limit` of them (all that are kept when 0).
    pub fn recent(&self, job: Option<&str>, limit: usize) -> Vec<ExecutionRecord> {
        let limit = if limit == 0 { usize::MAX } else { limit };
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records
            .iter()
            .rev()
            .filter(|r| job.is_none_or(|j| r.job == j))
            .take(limit)
            .cloned()
            .collect()
    }

    /// Calls `visit` with the kept executions, newest first, until it returns `false`; the lock
    /// is held meanwhile, so `visit` must be quick.
    pub fn visit_newest_first(&self, mut visit: impl FnMut(&ExecutionRecord) -> bool) {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        for r in records.iter().rev() {
            if !visit(r) {
                return;
            }
        }
    }

    /// Lines that could not be queued for the history file because the writer fell behind.
    pub fn dropped_lines(&self) -> u64 {
        self.dropped_lines.load(Ordering::Relaxed)
    }
}

fn write_lines(file: std::fs::File, rx: mpsc::Receiver<String>, path: &str) {
    let mut out = std::io::BufWriter::new(file);
    let mut failing = false;
    while let Ok(line) = rx.recv() {
        let mut result = writeln!(out, "{line}");
        // Write whatever else is queued, then flush once.
        while let Ok(more) = rx.try_recv() {
            result = result.and_then(|()| writeln!(out, "{more}"));
        }
        result = result.and_then(|()| out.flush());
        match result {
            Err(e) if !failing => {
                tracing::warn!(file = %path, error = %e, "cannot write the execution history file");
                failing = true;
            }
            Ok(()) => failing = false,
            Err(_) => {}
        }
    }
}

/// `completed`, `failed` or `revoked`.
pub fn item_outcome(outcome: &ItemOutcome) -> (&'static str, Option<&str>) {
    match outcome {
        ItemOutcome::Completed => ("completed", None),
        ItemOutcome::Failed(e) => ("failed", Some(e.as_str())),
        ItemOutcome::Revoked(e) => ("revoked", Some(e.as_str())),
    }
}

/// The JSON line written to the history file.
pub fn to_json(r: &ExecutionRecord) -> serde_json::Value {
    let started = chrono::DateTime::<chrono::Utc>::from(r.started_at);
    let items: Vec<serde_json::Value> = r
        .items
        .iter()
        .map(|(item, outcome)| {
            let (name, error) = item_outcome(outcome);
            serde_json::json!({ "item": item, "outcome": name, "error": error })
        })
        .collect();
    serde_json::json!({
        "job": r.job,
        "execution_id": r.execution_id,
        "instance_id": r.instance_id,
        "source": r.source.as_str(),
        "items": r.items.keys().collect::<Vec<_>>(),
        "started_at": started.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "duration_seconds": r.duration.as_secs_f64(),
        "outcome": r.outcome(),
        "error": r.error(),
        "item_results": items,
    })
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests run against real time and real servers"
)]
pub(crate) mod tests {
    use super::*;
    use crate::coordination::Source as TriggerSource;
    use std::time::{Duration, SystemTime};

    /// A finished CRON execution of `job` with these outcomes (1.5 s long, started at
    /// 2023-11-14T22:13:20.250Z); also used by the Admin API's tests.
    pub(crate) fn record(
        job: &str,
        id: &str,
        outcomes: Vec<(i32, ItemOutcome)>,
    ) -> ExecutionRecord {
        ExecutionRecord {
            job: job.into(),
            execution_id: id.into(),
            instance_id: "10.0.0.1@-@7".into(),
            source: TriggerSource::Cron,
            started_at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_250),
            duration: Duration::from_millis(1500),
            items: outcomes.into_iter().collect(),
            task_id: format!("{job}@-@0@-@READY@-@10.0.0.1@-@7"),
            fire_time: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_000),
            fencing_tokens: Default::default(),
            trace: crate::coordination::trace::TraceContext::for_execution(id, None),
            events: Vec::new(),
            attempt: 0,
        }
    }

    #[test]
    fn keeps_the_newest_within_capacity() {
        let h = History::new(3);
        for i in 0..5 {
            let job = if i % 2 == 0 { "a" } else { "b" };
            h.record(&record(
                job,
                &format!("e{i}"),
                vec![(0, ItemOutcome::Completed)],
            ));
        }
        let ids =
            |v: Vec<ExecutionRecord>| v.into_iter().map(|r| r.execution_id).collect::<Vec<_>>();
        assert_eq!(ids(h.recent(None, 0)), ["e4", "e3", "e2"]);
        assert_eq!(ids(h.recent(Some("a"), 0)), ["e4", "e2"]);
        assert_eq!(ids(h.recent(None, 1)), ["e4"]);
        assert!(History::new(0).recent(None, 0).is_empty());
    }

    /// Execution `x1` of `orders`: item 0 completed, item 2 failed with "disk full".
    pub(crate) fn one_failed_item() -> ExecutionRecord {
        record(
            "orders",
            "x1",
            vec![
                (0, ItemOutcome::Completed),
                (2, ItemOutcome::Failed("disk full".into())),
            ],
        )
    }

    #[test]
    fn json_form() {
        let r = one_failed_item();
        let j = to_json(&r);
        assert_eq!(j["outcome"], "failed");
        assert_eq!(j["source"], "CRON");
        assert_eq!(j["started_at"], "2023-11-14T22:13:20.250Z");
        assert_eq!(j["item_results"][1]["error"], "disk full");
        assert_eq!(j["item_results"][0]["error"], serde_json::Value::Null);
    }

    #[test]
    fn appends_json_lines_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        let h = History::with_file(1, &path).unwrap();
        h.record(&record("a", "e1", vec![(0, ItemOutcome::Completed)]));
        h.record(&record(
            "a",
            "e2",
            vec![(0, ItemOutcome::Revoked("lease".into()))],
        ));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let lines = loop {
            let text = std::fs::read_to_string(&path).unwrap();
            let lines: Vec<serde_json::Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            if lines.len() == 2 || std::time::Instant::now() > deadline {
                break lines;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["execution_id"], "e2");
        assert_eq!(lines[1]["outcome"], "revoked");
        assert_eq!(h.recent(None, 0).len(), 1);
        let err = History::with_file(1, &dir.path().join("no/such/dir/h.jsonl"))
            .err()
            .unwrap();
        assert!(err.to_string().contains("no/such/dir"), "{err}");
    }
}
