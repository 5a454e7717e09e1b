//! A finished execution as the rows an ElasticJob-Lite executor would have left in the tracing
//! tables for the same run (`elasticjob::tracing_tables` has the formats and where they come from).
//!
//! The rows are written when the execution is over, from its record: each row carries the time
//! of the moment it stands for, as the state machine noted it while the execution ran —
//! `TASK_STAGING` the decision to run (the fire acted on), `TASK_RUNNING` the `running` nodes
//! written (else the trigger sent), an item's `start_time` the trigger sent and its
//! `complete_time` its answer, `TASK_FINISHED`/`TASK_ERROR` the last answer. Writing at the end
//! keeps the database off the trigger path and makes each execution one unit for the queue,
//! so an outage drops whole executions, never half of one.
//!
//! An item taken back (the worker died, its lease ran out, it declined) has no outcome to
//! report, as an ElasticJob process killed mid-item has none: its execution row keeps
//! `is_success` false and no `complete_time` or `failure_cause`, and an execution with such an
//! item gets no `TASK_FINISHED`/`TASK_ERROR` row.
//!
//! Times are the sidecar host's local wall-clock time, at millisecond precision: ElasticJob's
//! JDBC driver sends a `java.util.Date` in the JVM's time zone into these `TIMESTAMP` (without
//! time zone) columns, and a sidecar runs beside its workers, in the same zone.
//!
//! A retry (source RETRY, `attempt` 1 or more) is a run ElasticJob's tables have no word for.
//! Its rows keep ElasticJob's columns and values, so that ElasticJob's console reads them
//! (it reads `execution_source` with `ExecutionSource.valueOf`), and say what it was in two
//! places:
//! - its execution-log rows' `execution_source` is `FAILOVER`, the closest of ElasticJob's
//!   three: like a failover, a retry runs items again, off their schedule, because their last
//!   run did not succeed (a cron fire or a trigger-once is `NORMAL_TRIGGER`, a late run of a
//!   fire `MISFIRE`). A Lite executor never writes `FAILOVER` (its failed-over items run
//!   through its normal path, and shardcar writes its own failovers as Lite does), so in the
//!   rows of Lite processes and sidecars it only ever stands for a retry;
//! - its `TASK_RUNNING` status row, whose message a Lite executor leaves empty, says which
//!   attempt it was: `shardcar retry, attempt 2` ([`retry_message`]).
//!
//! `tracing_db::reader` reads both back, so that `ListExecutions` gives a retry its source
//! and attempt whichever sidecar ran it.

use std::collections::BTreeMap;
use std::time::SystemTime;

use chrono::{NaiveDateTime, Timelike};

use crate::coordination::events::Source;
use crate::coordination::{ExecutionRecord, ItemOutcome};
use crate::elasticjob::instance::ip_of;
use crate::elasticjob::tracing_tables::{
    error_message, items_text, new_id, staging_message, task_parts, truncate, ExecutionSource,
    State, LITE_EXECUTOR,
};

/// `execution_source` of a retry's rows (see the module docs).
pub const RETRY_EXECUTION_SOURCE: &str = "FAILOVER";
/// What a retry's `TASK_RUNNING` message starts with; the attempt follows.
const RETRY_MESSAGE_PREFIX: &str = "shardcar retry, attempt ";

/// The message of a retry's `TASK_RUNNING` row: `shardcar retry, attempt 2`.
pub fn retry_message(attempt: u32) -> String {
    format!("{RETRY_MESSAGE_PREFIX}{attempt}")
}

/// The attempt a `TASK_RUNNING` message names, if it is a retry's ([`retry_message`]).
pub fn attempt_of(message: &str) -> Option<u32> {
    message
        .strip_prefix(RETRY_MESSAGE_PREFIX)?
        .parse()
        .ok()
        .filter(|a| *a > 0)
}

/// One row of `JOB_EXECUTION_LOG`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionLogRow {
    pub id: String,
    pub job_name: String,
    pub task_id: String,
    pub hostname: String,
    pub ip: String,
    pub sharding_item: i32,
    pub execution_source: &'static str,
    pub failure_cause: Option<String>,
    pub is_success: bool,
    pub start_time: NaiveDateTime,
    pub complete_time: Option<NaiveDateTime>,
}

/// One row of `JOB_STATUS_TRACE_LOG`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusTraceRow {
    pub id: String,
    pub job_name: String,
    pub original_task_id: String,
    pub task_id: String,
    pub slave_id: String,
    pub source: &'static str,
    pub execution_type: String,
    pub sharding_item: String,
    pub state: &'static str,
    pub message: String,
    pub creation_time: NaiveDateTime,
}

/// A row of either table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Row {
    Execution(ExecutionLogRow),
    Status(StatusTraceRow),
}

/// A time as ElasticJob stores it: local wall-clock time, milliseconds.
pub fn local_millis(at: SystemTime) -> NaiveDateTime {
    let t = chrono::DateTime::<chrono::Local>::from(at).naive_local();
    let millis = t.nanosecond() / 1_000_000 * 1_000_000;
    t.with_nanosecond(millis).unwrap_or(t)
}

/// When item `item` was answered, from its `answer` event.
fn answered(r: &ExecutionRecord, item: i32) -> Option<SystemTime> {
    let item = item.to_string();
    r.events
        .iter()
        .find(|e| {
            e.name == "answer" && e.attributes.iter().any(|(k, v)| *k == "item" && *v == item)
        })
        .map(|e| e.at)
}

/// When the worker was sent the execution's items: the `start_time` of its execution-log rows
/// (as [`local_millis`] writes it), which with the task id finds them again in the table.
pub fn sent(r: &ExecutionRecord) -> SystemTime {
    r.noted("trigger sent").unwrap_or(r.started_at)
}

/// The rows of a finished execution on the host named `hostname`.
pub fn rows_of(r: &ExecutionRecord, hostname: &str) -> Vec<Row> {
    let end = r.started_at + r.duration;
    let sent = sent(r);
    let running = r.noted("running nodes written").unwrap_or(sent);
    let items: Vec<i32> = r.items.keys().copied().collect();
    let (job_name, execution_type, slave_id, task_items) = match task_parts(&r.task_id) {
        Some(p) => (
            p.job_name.to_string(),
            p.execution_type.to_string(),
            p.slave_id.to_string(),
            p.items,
        ),
        None => (
            r.job.clone(),
            "READY".to_string(),
            ip_of(&r.instance_id).to_string(),
            items.clone(),
        ),
    };
    let status = |state: State, message: String, at: SystemTime| {
        Row::Status(StatusTraceRow {
            id: new_id(),
            job_name: job_name.clone(),
            original_task_id: String::new(),
            task_id: r.task_id.clone(),
            slave_id: slave_id.clone(),
            source: LITE_EXECUTOR,
            execution_type: execution_type.clone(),
            sharding_item: items_text(&task_items),
            state: state.as_str(),
            message: truncate(&message),
            creation_time: local_millis(at),
        })
    };
    let retry = (r.source == Source::Retry).then_some(r.attempt.max(1));
    let execution_source = match r.source {
        Source::Misfire => ExecutionSource::Misfire.as_str(),
        Source::Retry => RETRY_EXECUTION_SOURCE,
        // Lite runs failed-over items, trigger-once requests and fires the same way.
        Source::Cron | Source::Manual | Source::Failover | Source::Resident => {
            ExecutionSource::NormalTrigger.as_str()
        }
    };
    let mut rows = Vec::with_capacity(items.len() + 3);
    // A misfire catch-up runs inside the fire that found the items busy: no staging of its own.
    // A run claimed ahead of its instant was taken up when it was claimed, before its
    // `running` nodes were written and before the instant at which it started.
    if r.source != Source::Misfire {
        rows.push(status(
            State::Staging,
            staging_message(&r.job),
            r.noted("claimed ahead").unwrap_or(r.started_at),
        ));
    }
    rows.push(status(
        State::Running,
        retry.map(retry_message).unwrap_or_default(),
        running,
    ));
    let mut causes = BTreeMap::new();
    let mut taken_back = false;
    for (item, outcome) in &r.items {
        let (is_success, failure_cause, complete_time) = match outcome {
            ItemOutcome::Completed => (true, None, Some(answered(r, *item).unwrap_or(end))),
            ItemOutcome::Failed(cause) => {
                causes.insert(*item, cause.clone());
                (
                    false,
                    Some(truncate(cause)),
                    Some(answered(r, *item).unwrap_or(end)),
                )
            }
            ItemOutcome::Revoked(_) => {
                taken_back = true;
                (false, None, None)
            }
        };
        rows.push(Row::Execution(ExecutionLogRow {
            id: new_id(),
            job_name: r.job.clone(),
            task_id: r.task_id.clone(),
            hostname: hostname.to_string(),
            ip: ip_of(&r.instance_id).to_string(),
            sharding_item: *item,
            execution_source,
            failure_cause,
            is_success,
            start_time: local_millis(sent),
            complete_time: complete_time.map(local_millis),
        }));
    }
    if !taken_back {
        rows.push(if causes.is_empty() {
            status(State::Finished, String::new(), end)
        } else {
            status(State::Error, error_message(&causes), end)
        });
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordination::trace::SpanEvent;
    use crate::ops::history::tests::record;
    use std::time::Duration;

    const T0: u64 = 1_700_000_000_250;

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(T0 + ms)
    }

    fn event(ms: u64, name: &'static str, item: Option<i32>) -> SpanEvent {
        SpanEvent {
            at: at(ms),
            name,
            attributes: item
                .map(|i| vec![("item", i.to_string()), ("outcome", "x".into())])
                .unwrap_or_default(),
        }
    }

    /// Items 0 and 2 of `orders` on 10.0.0.1@-@7, started at T0 and over 1.5 s later.
    fn execution(source: Source, outcomes: Vec<(i32, ItemOutcome)>) -> ExecutionRecord {
        let mut r = record("orders", "x1", outcomes);
        r.source = source;
        r.task_id = "orders@-@0,2@-@READY@-@10.0.0.1@-@7".into();
        r.events = vec![
            event(10, "running nodes written", None),
            event(20, "trigger sent", None),
            event(700, "answer", Some(2)),
            event(900, "answer", Some(0)),
        ];
        r
    }

    fn statuses(rows: &[Row]) -> Vec<(&str, &str, NaiveDateTime)> {
        rows.iter()
            .filter_map(|r| match r {
                Row::Status(s) => Some((s.state, s.message.as_str(), s.creation_time)),
                Row::Execution(_) => None,
            })
            .collect()
    }

    fn executions(rows: &[Row]) -> Vec<&ExecutionLogRow> {
        rows.iter()
            .filter_map(|r| match r {
                Row::Execution(e) => Some(e),
                Row::Status(_) => None,
            })
            .collect()
    }

    #[test]
    fn a_completed_execution() {
        let r = execution(
            Source::Cron,
            vec![(0, ItemOutcome::Completed), (2, ItemOutcome::Completed)],
        );
        let rows = rows_of(&r, "host-a");
        assert_eq!(
            statuses(&rows),
            vec![
                (
                    "TASK_STAGING",
                    "Job 'orders' execute begin.",
                    local_millis(at(0))
                ),
                ("TASK_RUNNING", "", local_millis(at(10))),
                ("TASK_FINISHED", "", local_millis(at(1500))),
            ]
        );
        for row in &rows {
            if let Row::Status(s) = row {
                assert_eq!(s.job_name, "orders");
                assert_eq!(s.original_task_id, "");
                assert_eq!(s.task_id, "orders@-@0,2@-@READY@-@10.0.0.1@-@7");
                assert_eq!(s.slave_id, "10.0.0.1");
                assert_eq!(s.source, "LITE_EXECUTOR");
                assert_eq!(s.execution_type, "READY");
                assert_eq!(s.sharding_item, "[0, 2]");
                assert_eq!(s.id.len(), 36);
            }
        }
        let e = executions(&rows);
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].sharding_item, e[0].is_success, e[0].complete_time),
            (0, true, Some(local_millis(at(900))))
        );
        assert_eq!(e[1].complete_time, Some(local_millis(at(700))));
        for row in e {
            assert_eq!(row.execution_source, "NORMAL_TRIGGER");
            assert_eq!(row.hostname, "host-a");
            assert_eq!(row.ip, "10.0.0.1");
            assert_eq!(row.failure_cause, None);
            assert_eq!(row.start_time, local_millis(at(20)));
        }
    }

    #[test]
    fn a_run_claimed_ahead_is_staged_when_claimed_and_running_before_it_starts() {
        // Claimed 100 ms before its instant, its running nodes written 98 ms before, sent at
        // the instant (its start, T0 + 100).
        let mut r = execution(Source::Cron, vec![(0, ItemOutcome::Completed)]);
        r.started_at = at(100);
        r.events = vec![
            event(0, "claimed ahead", None),
            event(2, "running nodes written", None),
            event(100, "trigger sent", None),
            event(300, "answer", Some(0)),
        ];
        let rows = rows_of(&r, "host-a");
        let s = statuses(&rows);
        assert_eq!(
            s.iter().map(|(st, _, t)| (*st, *t)).collect::<Vec<_>>()[..2],
            [
                ("TASK_STAGING", local_millis(at(0))),
                ("TASK_RUNNING", local_millis(at(2)))
            ]
        );
        assert_eq!(executions(&rows)[0].start_time, local_millis(at(100)));
    }

    #[test]
    fn a_failed_item_is_an_error_with_its_cause() {
        let r = execution(
            Source::Failover,
            vec![
                (0, ItemOutcome::Completed),
                (2, ItemOutcome::Failed("disk full".into())),
            ],
        );
        let rows = rows_of(&r, "h");
        let s = statuses(&rows);
        assert_eq!(s.len(), 3);
        assert_eq!(s[2].0, "TASK_ERROR");
        assert_eq!(s[2].1, "{2=disk full}");
        let e = executions(&rows);
        assert_eq!(
            (
                e[1].is_success,
                e[1].failure_cause.as_deref(),
                e[1].execution_source
            ),
            (false, Some("disk full"), "NORMAL_TRIGGER"),
            "Lite runs failed-over items as normal triggers"
        );
        assert_eq!(e[0].failure_cause, None);
    }

    #[test]
    fn a_misfire_catch_up_has_no_staging_row() {
        let r = execution(Source::Misfire, vec![(0, ItemOutcome::Completed)]);
        let rows = rows_of(&r, "h");
        let states: Vec<&str> = statuses(&rows).iter().map(|s| s.0).collect();
        assert_eq!(states, ["TASK_RUNNING", "TASK_FINISHED"]);
        assert_eq!(executions(&rows)[0].execution_source, "MISFIRE");
    }

    #[test]
    fn a_retry_is_a_failover_to_elasticjob_and_its_running_row_names_the_attempt() {
        let mut r = execution(
            Source::Retry,
            vec![(0, ItemOutcome::Completed), (2, ItemOutcome::Completed)],
        );
        r.attempt = 2;
        let rows = rows_of(&r, "h");
        let s = statuses(&rows);
        assert_eq!(
            s.iter().map(|(st, m, _)| (*st, *m)).collect::<Vec<_>>(),
            [
                ("TASK_STAGING", "Job 'orders' execute begin."),
                ("TASK_RUNNING", "shardcar retry, attempt 2"),
                ("TASK_FINISHED", ""),
            ]
        );
        assert!(executions(&rows)
            .iter()
            .all(|e| e.execution_source == "FAILOVER"));
        assert_eq!(attempt_of(&retry_message(2)), Some(2));
        // The running row is never after the items' start: the reader finds it from there.
        assert!(s[1].2 <= executions(&rows)[0].start_time);
        // Other runs keep Lite's empty message and sources; a failover is a normal trigger.
        for source in [
            Source::Cron,
            Source::Failover,
            Source::Manual,
            Source::Resident,
        ] {
            let rows = rows_of(&execution(source, vec![(0, ItemOutcome::Completed)]), "h");
            assert_eq!(
                statuses(&rows)[1],
                ("TASK_RUNNING", "", local_millis(at(10)))
            );
            assert_eq!(executions(&rows)[0].execution_source, "NORMAL_TRIGGER");
        }
    }

    #[test]
    fn only_a_retrys_message_names_an_attempt() {
        for (message, attempt) in [
            ("shardcar retry, attempt 1", Some(1)),
            ("shardcar retry, attempt 17", Some(17)),
            ("shardcar retry, attempt 0", None),
            ("shardcar retry, attempt x", None),
            ("", None),
            ("Job 'orders' execute begin.", None),
        ] {
            assert_eq!(attempt_of(message), attempt, "{message:?}");
        }
    }

    #[test]
    fn an_item_taken_back_is_left_as_a_killed_process_leaves_it() {
        let r = execution(
            Source::Manual,
            vec![
                (0, ItemOutcome::Completed),
                (2, ItemOutcome::Revoked("the worker went away".into())),
            ],
        );
        let rows = rows_of(&r, "h");
        let states: Vec<&str> = statuses(&rows).iter().map(|s| s.0).collect();
        assert_eq!(states, ["TASK_STAGING", "TASK_RUNNING"]);
        let e = executions(&rows);
        assert_eq!(
            (e[1].is_success, &e[1].failure_cause, e[1].complete_time),
            (false, &None, None)
        );
        assert!(e[0].is_success);
    }

    #[test]
    fn without_events_the_times_fall_back_to_the_start_and_end() {
        let mut r = execution(Source::Cron, vec![(0, ItemOutcome::Completed)]);
        r.events.clear();
        let rows = rows_of(&r, "h");
        let s = statuses(&rows);
        assert_eq!(s[1].2, local_millis(at(0)), "running at the start");
        let e = executions(&rows);
        assert_eq!(e[0].start_time, local_millis(at(0)));
        assert_eq!(e[0].complete_time, Some(local_millis(at(1500))));
    }

    #[test]
    fn times_have_millisecond_precision() {
        let t =
            local_millis(SystemTime::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789));
        assert_eq!(t.nanosecond(), 123_000_000);
    }
}
