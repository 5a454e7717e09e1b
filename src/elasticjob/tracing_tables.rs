//! ElasticJob's RDB event tracing, as its PostgreSQL dialect lays it out and as ElasticJob-Lite
//! 3.0.4 fills it: the two tables ElasticJob-UI's history pages read, and the values a Lite
//! executor writes into them. Pure formats, no I/O; `ops::tracing_db` writes the rows.
//!
//! The facts, from ElasticJob 3.0.4's sources (`docs/elasticjob-compat.md` §12):
//! - the tables and their index (`elasticjob-tracing-rdb`, `META-INF/sql/PostgreSQL.properties`),
//!   created only when absent, the index only together with its table (`RDBJobEventStorage`);
//! - one execution-log row per item, `execution_source` `NORMAL_TRIGGER` or `MISFIRE` (a Lite
//!   executor never writes `FAILOVER`: failed-over items run through the normal path), ids
//!   `UUID.randomUUID()` (`JobExecutionEvent`, `ElasticJobExecutor`);
//! - status rows for the whole task: `TASK_STAGING` with "Job '{job}' execute begin." when a fire
//!   is handled (not before a misfire catch-up, which runs inside the fire that found the items
//!   busy), `TASK_RUNNING` with an empty message once the `running` nodes are written, then
//!   `TASK_FINISHED` (empty message) or `TASK_ERROR` (the failed items' causes as a Java map,
//!   `{0=cause, 2=cause}`) (`ElasticJobExecutor`);
//! - `source` `LITE_EXECUTOR`, and `job_name`, `execution_type`, `slave_id` and `sharding_item`
//!   taken apart from the task id: its job, `READY` (always, in Lite), its IP, and its items as a
//!   Java list, `[0, 1]` (`LiteJobFacade.postJobStatusTraceEvent`, `TaskContext.from`);
//! - `original_task_id` empty (Lite's events never set it and the storage copies the staging
//!   row's), texts cut at 4000 UTF-16 units, times at millisecond precision (`java.util.Date`).

use std::collections::BTreeMap;

use crate::elasticjob::instance::DELIMITER;

/// The execution log, one row per item run.
pub const EXECUTION_LOG_TABLE: &str = "job_execution_log";
/// The status trace, a few rows per task.
pub const STATUS_TRACE_LOG_TABLE: &str = "job_status_trace_log";
/// The status trace's index on `(task_id, state)`.
pub const TASK_ID_STATE_INDEX: &str = "task_id_state_index";

/// `JOB_EXECUTION_LOG` as ElasticJob's PostgreSQL dialect creates it (unquoted names, so
/// PostgreSQL folds them to lower case).
pub const CREATE_EXECUTION_LOG: &str = "CREATE TABLE JOB_EXECUTION_LOG (\
     id VARCHAR(40) NOT NULL, \
     job_name VARCHAR(100) NOT NULL, \
     task_id VARCHAR(255) NOT NULL, \
     hostname VARCHAR(255) NOT NULL, \
     ip VARCHAR(50) NOT NULL, \
     sharding_item INT NOT NULL, \
     execution_source VARCHAR(20) NOT NULL, \
     failure_cause VARCHAR(4000) NULL, \
     is_success BOOLEAN NOT NULL, \
     start_time TIMESTAMP NULL, \
     complete_time TIMESTAMP NULL, \
     PRIMARY KEY (id))";

/// `JOB_STATUS_TRACE_LOG` as ElasticJob's PostgreSQL dialect creates it.
pub const CREATE_STATUS_TRACE_LOG: &str = "CREATE TABLE JOB_STATUS_TRACE_LOG (\
     id VARCHAR(40) NOT NULL, \
     job_name VARCHAR(100) NOT NULL, \
     original_task_id VARCHAR(255) NOT NULL, \
     task_id VARCHAR(255) NOT NULL, \
     slave_id VARCHAR(50) NOT NULL, \
     source VARCHAR(50) NOT NULL, \
     execution_type VARCHAR(20) NOT NULL, \
     sharding_item VARCHAR(100) NOT NULL, \
     state VARCHAR(20) NOT NULL, \
     message VARCHAR(4000) NULL, \
     creation_time TIMESTAMP NULL, \
     PRIMARY KEY (id))";

/// `TASK_ID_STATE_INDEX`, created with the status table.
pub const CREATE_TASK_ID_STATE_INDEX: &str =
    "CREATE INDEX TASK_ID_STATE_INDEX ON JOB_STATUS_TRACE_LOG (task_id, state)";

/// The longest text ElasticJob stores in `failure_cause` and `message`, in UTF-16 units.
pub const MAX_TEXT: usize = 4000;

/// `execution_source` of an execution-log row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionSource {
    /// A fire, a trigger-once request, or failed-over items: Lite runs them all the same way.
    NormalTrigger,
    /// A catch-up for a fire that found the items busy.
    Misfire,
}

impl ExecutionSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionSource::NormalTrigger => "NORMAL_TRIGGER",
            ExecutionSource::Misfire => "MISFIRE",
        }
    }
}

/// `state` of a status row: the four a Lite executor writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Staging,
    Running,
    Finished,
    Error,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Staging => "TASK_STAGING",
            State::Running => "TASK_RUNNING",
            State::Finished => "TASK_FINISHED",
            State::Error => "TASK_ERROR",
        }
    }
}

/// `source` of every status row a Lite executor writes.
pub const LITE_EXECUTOR: &str = "LITE_EXECUTOR";

/// A task id taken apart as ElasticJob's `TaskContext.from` does:
/// `{job}@-@{items}@-@{type}@-@{ip}@-@{pid}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskParts<'a> {
    pub job_name: &'a str,
    /// The items in the task id's order.
    pub items: Vec<i32>,
    /// `READY` in Lite.
    pub execution_type: &'a str,
    /// The IP of the instance (`slave_id`).
    pub slave_id: &'a str,
}

/// Takes a task id apart; `None` when it does not have ElasticJob's five parts (Java would
/// refuse it too).
pub fn task_parts(task_id: &str) -> Option<TaskParts<'_>> {
    let parts: Vec<&str> = task_id.split(DELIMITER).collect();
    if parts.len() != 5 {
        return None;
    }
    let items = if parts[1].is_empty() {
        Vec::new()
    } else {
        parts[1]
            .split(',')
            .map(|i| i.parse().ok())
            .collect::<Option<Vec<i32>>>()?
    };
    Some(TaskParts {
        job_name: parts[0],
        items,
        execution_type: parts[2],
        slave_id: parts[3],
    })
}

/// Items as Java prints a list of integers: `[0, 1, 6]`, `[]`.
pub fn items_text(items: &[i32]) -> String {
    let items: Vec<String> = items.iter().map(i32::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// The message of a `TASK_STAGING` row.
pub fn staging_message(job_name: &str) -> String {
    format!("Job '{job_name}' execute begin.")
}

/// The message of a `TASK_ERROR` row: each failed item and its cause, as Java prints the map
/// (`{0=cause, 2=cause}`; ascending, the order of a map sized for the job's items).
pub fn error_message(causes: &BTreeMap<i32, String>) -> String {
    let entries: Vec<String> = causes.iter().map(|(i, c)| format!("{i}={c}")).collect();
    truncate(&format!("{{{}}}", entries.join(", ")))
}

/// `text` cut to its first [`MAX_TEXT`] UTF-16 units, as ElasticJob cuts what it stores (never
/// inside a character here).
pub fn truncate(text: &str) -> String {
    let mut units = 0;
    for (at, c) in text.char_indices() {
        units += c.len_utf16();
        if units > MAX_TEXT {
            return text[..at].to_string();
        }
    }
    text.to_string()
}

/// A row id: a random UUID in Java's `UUID.toString()` form (36 lower-case characters).
#[allow(
    clippy::disallowed_methods,
    reason = "the id of a tracing-table row, drawn as the row is written (ops), never by a job's decision"
)]
pub fn new_id() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_are_taken_apart_as_elasticjob_does() {
        let p = task_parts("orders@-@0,1,6@-@READY@-@10.0.0.5@-@4242").unwrap();
        assert_eq!(p.job_name, "orders");
        assert_eq!(p.items, vec![0, 1, 6]);
        assert_eq!(p.execution_type, "READY");
        assert_eq!(p.slave_id, "10.0.0.5");
        assert!(task_parts("j@-@@-@READY@-@ip@-@1")
            .unwrap()
            .items
            .is_empty());
        assert_eq!(task_parts("j@-@0@-@READY@-@ip"), None);
        assert_eq!(task_parts("j@-@x@-@READY@-@ip@-@1"), None);
    }

    #[test]
    fn texts_are_javas() {
        assert_eq!(items_text(&[0, 1, 6]), "[0, 1, 6]");
        assert_eq!(items_text(&[3]), "[3]");
        assert_eq!(items_text(&[]), "[]");
        assert_eq!(staging_message("orders"), "Job 'orders' execute begin.");
        let causes: BTreeMap<i32, String> =
            [(2, "disk full".to_string()), (0, "boom".to_string())].into();
        assert_eq!(error_message(&causes), "{0=boom, 2=disk full}");
        assert_eq!(ExecutionSource::Misfire.as_str(), "MISFIRE");
        assert_eq!(State::Error.as_str(), "TASK_ERROR");
    }

    #[test]
    fn long_texts_are_cut_at_4000_utf16_units() {
        assert_eq!(truncate(&"a".repeat(4001)).len(), 4000);
        assert_eq!(truncate("short"), "short");
        // A character outside the BMP is two UTF-16 units: it does not fit in the last one.
        let text = format!("{}😀", "a".repeat(3999));
        assert_eq!(truncate(&text), "a".repeat(3999));
        let text = format!("{}é", "a".repeat(3999));
        assert_eq!(truncate(&text), text, "é is one unit");
    }

    #[test]
    fn ids_are_java_uuids() {
        let id = new_id();
        assert_eq!(id.len(), 36);
        assert_eq!(id.matches('-').count(), 4);
        assert_eq!(id.as_bytes()[14], b'4', "version 4: {id}");
        assert_eq!(id, id.to_lowercase());
        assert_ne!(id, new_id());
    }

    #[test]
    fn the_ddl_has_elasticjobs_columns() {
        for column in [
            "id VARCHAR(40) NOT NULL",
            "failure_cause VARCHAR(4000) NULL",
            "is_success BOOLEAN NOT NULL",
            "complete_time TIMESTAMP NULL",
        ] {
            assert!(CREATE_EXECUTION_LOG.contains(column), "{column}");
        }
        for column in [
            "original_task_id VARCHAR(255) NOT NULL",
            "slave_id VARCHAR(50) NOT NULL",
            "sharding_item VARCHAR(100) NOT NULL",
            "creation_time TIMESTAMP NULL",
        ] {
            assert!(CREATE_STATUS_TRACE_LOG.contains(column), "{column}");
        }
    }
}
