//! The cluster-wide execution history, read back from `JOB_EXECUTION_LOG` for
//! `Admin.ListExecutions` when `tracing_db` is set: the executions of every sidecar writing to
//! the database, and those of ElasticJob processes configured with its RDB tracing.
//!
//! The table has one row per item run. The rows of one execution share its task id and its
//! `execution_source`, hold each item once, and start within moments of each other (shardcar
//! writes one start time for all its items; ElasticJob takes each item's as it hands the item
//! to its thread pool). Rows are read newest first, a page at a time, and put together by those
//! rules ([`Grouping`]); reading stops once no older row can belong to the newest executions.
//!
//! A retry's rows are `FAILOVER` rows whose run's `TASK_RUNNING` status row names the attempt
//! (`rows` says why). For each `FAILOVER` row the query reads the message of the newest
//! `TASK_RUNNING` row of its task id written at or before its start and within a minute of it
//! (the index on `(task_id, state)` finds it): a sidecar writes that row when the run's
//! `running` nodes are written, in the step that sends its trigger, and the runs of one task id
//! never overlap (its items never run twice at once), so that row is its run's. A `FAILOVER`
//! row without such a message (ElasticJob Cloud's failovers) stays a failover.
//!
//! Each listing uses a connection of its own, closed at its end, and gives up after
//! [`READ_TIMEOUT`]; the caller then answers from the sidecar's own history. The writer's
//! connection is never used for reading, so a slow listing cannot hold up the rows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use chrono::{NaiveDateTime, TimeZone};
use tokio_postgres::NoTls;

use super::rows::attempt_of;
use super::writer::describe;
use super::TracingDbSettings;

/// Rows read per query.
const PAGE: i64 = 500;
/// The items of one execution start within this long of each other; two runs of one task (its
/// items again) are told apart by an item coming back, whatever the time between them.
const TOGETHER: chrono::TimeDelta = chrono::TimeDelta::seconds(1);
/// How long one listing may take before the sidecar's own history answers instead.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The most executions one listing returns (`limit` 0 included).
pub const MAX_EXECUTIONS: usize = 1000;

const SELECT: &str = "SELECT e.id, e.job_name, e.task_id, e.ip, e.sharding_item, \
     e.execution_source, e.failure_cause, e.is_success, e.start_time, e.complete_time, \
     CASE WHEN e.execution_source = 'FAILOVER' THEN (\
       SELECT s.message FROM JOB_STATUS_TRACE_LOG s \
       WHERE s.task_id = e.task_id AND s.state = 'TASK_RUNNING' \
       AND s.creation_time <= e.start_time \
       AND s.creation_time >= e.start_time - interval '1 minute' \
       ORDER BY s.creation_time DESC, s.id DESC LIMIT 1) END \
     FROM JOB_EXECUTION_LOG e \
     WHERE e.start_time IS NOT NULL \
     AND ($1::text IS NULL OR e.job_name = $1::text) \
     AND ($2::timestamp IS NULL OR (e.start_time, e.id) < ($2::timestamp, $3::text)) \
     ORDER BY e.start_time DESC, e.id DESC LIMIT $4::bigint";

/// One row of `JOB_EXECUTION_LOG`, as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemRow {
    pub id: String,
    pub job_name: String,
    pub task_id: String,
    pub ip: String,
    pub sharding_item: i32,
    pub execution_source: String,
    pub failure_cause: Option<String>,
    pub is_success: bool,
    pub start_time: NaiveDateTime,
    pub complete_time: Option<NaiveDateTime>,
    /// A retry's attempt, from its run's `TASK_RUNNING` row (`None`: not a retry).
    pub attempt: Option<u32>,
}

/// One execution put together from its rows, in item order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedExecution {
    pub rows: Vec<ItemRow>,
}

impl TracedExecution {
    /// When its first item started (local wall-clock time, as the table has it).
    pub fn started(&self) -> NaiveDateTime {
        self.rows
            .iter()
            .map(|r| r.start_time)
            .min()
            .expect("an execution has rows")
    }

    fn latest_start(&self) -> NaiveDateTime {
        self.rows
            .iter()
            .map(|r| r.start_time)
            .max()
            .expect("an execution has rows")
    }

    /// Whether `row` (no newer than any row so far) is another item of this execution.
    fn takes(&self, row: &ItemRow) -> bool {
        let first = &self.rows[0];
        row.execution_source == first.execution_source
            && row.attempt == first.attempt
            && row.start_time >= self.latest_start() - TOGETHER
            && self
                .rows
                .iter()
                .all(|r| r.sharding_item != row.sharding_item)
    }
}

/// Puts rows, given newest first, together into executions.
#[derive(Debug, Default)]
pub struct Grouping {
    executions: Vec<TracedExecution>,
    /// Per task id, its newest execution so far (the one an older row may still join).
    open: HashMap<String, usize>,
}

impl Grouping {
    /// Adds a row no newer than any row added before.
    pub fn push(&mut self, row: ItemRow) {
        if let Some(&i) = self.open.get(&row.task_id) {
            if self.executions[i].takes(&row) {
                self.executions[i].rows.push(row);
                return;
            }
        }
        self.open.insert(row.task_id.clone(), self.executions.len());
        self.executions.push(TracedExecution { rows: vec![row] });
    }

    /// Whether rows starting before `next` can no longer change the newest `limit` executions:
    /// they could join none of them, and executions made of them would all be older.
    pub fn settled(&self, limit: usize, next: NaiveDateTime) -> bool {
        if self.executions.len() < limit {
            return false;
        }
        let mut latest: Vec<NaiveDateTime> = self
            .executions
            .iter()
            .map(TracedExecution::latest_start)
            .collect();
        latest.sort_unstable_by(|a, b| b.cmp(a));
        next < latest[limit - 1] - TOGETHER
    }

    /// The newest `limit` executions, newest first, each with its rows in item order.
    pub fn finish(self, limit: usize) -> Vec<TracedExecution> {
        let mut executions = self.executions;
        for e in &mut executions {
            e.rows.sort_by_key(|r| r.sharding_item);
        }
        executions.sort_by(|a, b| {
            b.started()
                .cmp(&a.started())
                .then_with(|| a.rows[0].task_id.cmp(&b.rows[0].task_id))
        });
        executions.truncate(limit);
        executions
    }
}

/// A time of the table (the writer's local wall-clock time) as an instant, read in this host's
/// time zone, as it was written (ElasticJob and shardcar both write local time).
pub fn instant(t: NaiveDateTime) -> SystemTime {
    let local = chrono::Local.from_local_datetime(&t);
    match local.earliest() {
        Some(at) => at.into(),
        // A time the clocks skipped (a DST gap): read as UTC.
        None => chrono::Utc.from_utc_datetime(&t).into(),
    }
}

/// Reads executions back from the tracing tables.
pub struct Reader {
    settings: TracingDbSettings,
    /// The last listing failed: the next failure is logged at debug level only.
    failing: AtomicBool,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("db", &self.settings.shown)
            .finish_non_exhaustive()
    }
}

impl Reader {
    pub fn new(settings: TracingDbSettings) -> Reader {
        Reader {
            settings,
            failing: AtomicBool::new(false),
        }
    }

    /// The newest `limit` executions (all jobs, or `job`'s), newest first; `limit` 0 or above
    /// [`MAX_EXECUTIONS`] is [`MAX_EXECUTIONS`].
    ///
    /// # Errors
    /// The database cannot be reached, refuses the login or the query, or does not answer
    /// within [`READ_TIMEOUT`]: a warning is logged (once until a listing succeeds again).
    ///
    /// # Cancellation safety
    /// Dropped midway, its connection is closed.
    pub async fn recent(
        &self,
        job: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TracedExecution>, String> {
        let limit = if limit == 0 {
            MAX_EXECUTIONS
        } else {
            limit.min(MAX_EXECUTIONS)
        };
        let result = match tokio::time::timeout(READ_TIMEOUT, self.read(job, limit)).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {READ_TIMEOUT:?}")),
        };
        match &result {
            Ok(_) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(db = %self.settings.shown,
                                   "the tracing database answers again: executions are listed \
                                    from it");
                }
            }
            Err(e) => {
                if self.failing.swap(true, Ordering::Relaxed) {
                    tracing::debug!(error = %e, "the tracing database is still unavailable for \
                                                 listing executions");
                } else {
                    tracing::warn!(db = %self.settings.shown, error = %e,
                                   "cannot read the execution history from the tracing \
                                    database: executions are listed from this sidecar's own \
                                    history");
                }
            }
        }
        result
    }

    async fn read(&self, job: Option<&str>, limit: usize) -> Result<Vec<TracedExecution>, String> {
        let (client, connection) = self
            .settings
            .config
            .connect(NoTls)
            .await
            .map_err(|e| describe(&e))?;
        let work = async {
            let statement = client.prepare(SELECT).await?;
            let mut grouping = Grouping::default();
            let mut cursor: Option<(NaiveDateTime, String)> = None;
            loop {
                let (after, after_id) = match &cursor {
                    Some((t, id)) => (Some(*t), id.clone()),
                    None => (None, String::new()),
                };
                let rows = client
                    .query(&statement, &[&job, &after, &after_id, &PAGE])
                    .await?;
                let n = rows.len();
                for row in rows {
                    let row = ItemRow {
                        id: row.try_get(0)?,
                        job_name: row.try_get(1)?,
                        task_id: row.try_get(2)?,
                        ip: row.try_get(3)?,
                        sharding_item: row.try_get(4)?,
                        execution_source: row.try_get(5)?,
                        failure_cause: row.try_get(6)?,
                        is_success: row.try_get(7)?,
                        start_time: row.try_get(8)?,
                        complete_time: row.try_get(9)?,
                        attempt: row
                            .try_get::<_, Option<String>>(10)?
                            .as_deref()
                            .and_then(attempt_of),
                    };
                    cursor = Some((row.start_time, row.id.clone()));
                    grouping.push(row);
                }
                let done = match &cursor {
                    Some((next, _)) => grouping.settled(limit, *next),
                    None => true,
                };
                if n < PAGE as usize || done {
                    return Ok::<_, tokio_postgres::Error>(grouping.finish(limit));
                }
            }
        };
        tokio::pin!(work);
        tokio::select! {
            result = &mut work => result.map_err(|e| describe(&e)),
            ended = connection => Err(match ended {
                Err(e) => describe(&e),
                Ok(()) => "the server closed the connection".to_string(),
            }),
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests run against real time and real servers"
)]
mod tests {
    use super::*;

    fn at(ms: i64) -> NaiveDateTime {
        chrono::DateTime::from_timestamp_millis(1_700_000_000_000 + ms)
            .unwrap()
            .naive_utc()
    }

    fn row(task: &str, item: i32, source: &str, start_ms: i64) -> ItemRow {
        ItemRow {
            id: format!("{task}/{item}/{start_ms}"),
            job_name: "j".into(),
            task_id: task.into(),
            ip: "10.0.0.1".into(),
            sharding_item: item,
            execution_source: source.into(),
            failure_cause: None,
            is_success: true,
            start_time: at(start_ms),
            complete_time: Some(at(start_ms + 100)),
            attempt: None,
        }
    }

    fn grouped(mut rows: Vec<ItemRow>, limit: usize) -> Vec<Vec<(String, i32, i64)>> {
        rows.sort_by(|a, b| b.start_time.cmp(&a.start_time).then(b.id.cmp(&a.id)));
        let mut g = Grouping::default();
        for r in rows {
            g.push(r);
        }
        g.finish(limit)
            .into_iter()
            .map(|e| {
                e.rows
                    .iter()
                    .map(|r| {
                        (
                            r.task_id.clone(),
                            r.sharding_item,
                            (r.start_time - at(0)).num_milliseconds(),
                        )
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn rows_are_put_together_by_task_source_and_items() {
        let rows = vec![
            // ElasticJob: items of one run start a few milliseconds apart.
            row("a", 0, "NORMAL_TRIGGER", 0),
            row("a", 1, "NORMAL_TRIGGER", 2),
            row("a", 2, "NORMAL_TRIGGER", 3),
            // Its misfire catch-up right after: the same task, its items again.
            row("a", 0, "MISFIRE", 120),
            row("a", 1, "MISFIRE", 120),
            row("a", 2, "MISFIRE", 121),
            // Another instance's run at the same moment.
            row("b", 3, "NORMAL_TRIGGER", 1),
            // Two quick runs of one item, 10 ms apart.
            row("c", 0, "NORMAL_TRIGGER", 500),
            row("c", 0, "NORMAL_TRIGGER", 510),
        ];
        let got = grouped(rows, 100);
        let want: Vec<Vec<(String, i32, i64)>> = vec![
            vec![("c".into(), 0, 510)],
            vec![("c".into(), 0, 500)],
            vec![
                ("a".into(), 0, 120),
                ("a".into(), 1, 120),
                ("a".into(), 2, 121),
            ],
            vec![("b".into(), 3, 1)],
            vec![("a".into(), 0, 0), ("a".into(), 1, 2), ("a".into(), 2, 3)],
        ];
        assert_eq!(got, want);
        assert_eq!(grouped(vec![row("c", 0, "MISFIRE", 5)], 1).len(), 1);
    }

    #[test]
    fn rows_far_apart_are_separate_runs_even_with_other_items() {
        let rows = vec![
            row("a", 0, "NORMAL_TRIGGER", 0),
            row("a", 1, "NORMAL_TRIGGER", 5_000),
        ];
        assert_eq!(grouped(rows, 10).len(), 2);
    }

    #[test]
    fn reading_stops_once_older_rows_cannot_matter() {
        let mut g = Grouping::default();
        g.push(row("a", 1, "NORMAL_TRIGGER", 10_000));
        assert!(
            !g.settled(1, at(9_500)),
            "item 0 of that run may still come"
        );
        assert!(g.settled(1, at(8_999)));
        assert!(!g.settled(2, at(0)), "one execution is not two");
        g.push(row("a", 0, "NORMAL_TRIGGER", 9_999));
        g.push(row("b", 0, "NORMAL_TRIGGER", 9_000));
        assert!(!g.settled(2, at(8_500)));
        assert!(g.settled(2, at(7_999)));
        let newest = g.finish(1);
        assert_eq!(newest.len(), 1);
        assert_eq!(newest[0].rows.len(), 2);
        assert_eq!(newest[0].started(), at(9_999));
    }

    #[test]
    fn table_times_are_read_as_local_time() {
        let now = SystemTime::now();
        let t = super::super::rows::local_millis(now);
        let back = instant(t);
        let diff = now.duration_since(back).unwrap_or_else(|e| e.duration());
        assert!(diff < Duration::from_millis(1), "{diff:?}");
    }
}
