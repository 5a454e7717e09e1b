//! The one task that owns the tracing database's connection: it takes the rows of finished
//! executions from the queue, writes them in batches (every insert of a batch pipelined on the
//! one connection), and when the database is unreachable holds its batch and retries with
//! backoff while the queue takes the next executions, up to its bound.
//!
//! Each row's outcome is decided alone: written (a row already there from a retry whose first
//! answer was lost counts as written: ids are chosen once), rejected for good by the database
//! (counted, logged, dropped), or to retry (the connection failed: it is opened again; the
//! tables were dropped: they are created again).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, Statement};
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use super::rows::Row;
use super::TracingDbSettings;
use crate::elasticjob::tracing_tables::{
    CREATE_EXECUTION_LOG, CREATE_STATUS_TRACE_LOG, CREATE_TASK_ID_STATE_INDEX, EXECUTION_LOG_TABLE,
    STATUS_TRACE_LOG_TABLE,
};
use crate::ops::metrics::Metrics;

/// The outcomes `shardcar_tracing_rows_total` counts.
pub(super) const OUTCOMES: [&str; 3] = ["written", "dropped", "rejected"];
/// Rows per batch.
const BATCH: usize = 512;
/// How long one batch (with its connection, if a new one is needed) may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Retry delays: doubling from the first to the last, with jitter.
const BACKOFF_FIRST: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Sidecars creating the tables at once take turns on this advisory lock ("shardcar" in ASCII).
const SCHEMA_LOCK: i64 = 0x7368_6172_6463_6172;

const INSERT_EXECUTION: &str = "INSERT INTO JOB_EXECUTION_LOG (id, job_name, task_id, hostname, \
     ip, sharding_item, execution_source, failure_cause, is_success, start_time, complete_time) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";
const INSERT_STATUS: &str = "INSERT INTO JOB_STATUS_TRACE_LOG (id, job_name, original_task_id, \
     task_id, slave_id, source, execution_type, sharding_item, state, message, creation_time) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

/// Why the database could not be used.
#[derive(Debug)]
pub(super) enum Failure {
    /// The login or the rights are wrong: at start the sidecar stops; later it retries (the
    /// password may be fixed meanwhile), warning.
    Fatal(String),
    /// Unreachable, restarting, overloaded: retry.
    Transient(String),
}

impl Failure {
    fn message(&self) -> &str {
        match self {
            Failure::Fatal(m) | Failure::Transient(m) => m,
        }
    }
}

/// Reads an error of the driver: a server's refusal of the login or of the rights is fatal,
/// everything else transient.
fn failure(e: &tokio_postgres::Error) -> Failure {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        let message = db.message().to_string();
        if code.starts_with("28")
            || *db.code() == SqlState::INVALID_CATALOG_NAME
            || *db.code() == SqlState::INSUFFICIENT_PRIVILEGE
        {
            return Failure::Fatal(message);
        }
        return Failure::Transient(format!("{message} (SQLSTATE {code})"));
    }
    let text = describe(e);
    // The driver's own refusals: the server asked for a password that was not given, or the
    // authentication exchange failed.
    if text.starts_with("authentication error") || text.starts_with("invalid configuration") {
        Failure::Fatal(text)
    } else {
        Failure::Transient(text)
    }
}

/// An error of the driver with its causes (its own text leaves them out): `error connecting to
/// server: Connection refused (os error 111)`.
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// An open connection with the tables in place and the inserts prepared.
pub(super) struct Connection {
    client: Client,
    insert_execution: Statement,
    insert_status: Statement,
}

impl Connection {
    /// Connects, creates the tables if absent, prepares the inserts. The connection's I/O runs
    /// as a task on `tracker` that ends when the client is dropped or the server goes away.
    pub(super) async fn open(
        config: &tokio_postgres::Config,
        tracker: &TaskTracker,
    ) -> Result<Connection, Failure> {
        let (mut client, connection) = config.connect(NoTls).await.map_err(|e| failure(&e))?;
        tracker.spawn(async move {
            if let Err(e) = connection.await {
                debug!(error = %describe(&e), "the tracing database connection ended");
            }
        });
        create_tables(&mut client).await.map_err(|e| failure(&e))?;
        let insert_execution = client
            .prepare(INSERT_EXECUTION)
            .await
            .map_err(|e| failure(&e))?;
        let insert_status = client
            .prepare(INSERT_STATUS)
            .await
            .map_err(|e| failure(&e))?;
        Ok(Connection {
            client,
            insert_execution,
            insert_status,
        })
    }

    async fn insert(&self, row: &Row) -> Result<u64, tokio_postgres::Error> {
        match row {
            Row::Execution(r) => {
                self.client
                    .execute(
                        &self.insert_execution,
                        &[
                            &r.id,
                            &r.job_name,
                            &r.task_id,
                            &r.hostname,
                            &r.ip,
                            &r.sharding_item,
                            &r.execution_source,
                            &r.failure_cause,
                            &r.is_success,
                            &r.start_time,
                            &r.complete_time,
                        ],
                    )
                    .await
            }
            Row::Status(r) => {
                self.client
                    .execute(
                        &self.insert_status,
                        &[
                            &r.id,
                            &r.job_name,
                            &r.original_task_id,
                            &r.task_id,
                            &r.slave_id,
                            &r.source,
                            &r.execution_type,
                            &r.sharding_item,
                            &r.state,
                            &r.message,
                            &r.creation_time,
                        ],
                    )
                    .await
            }
        }
    }
}

/// Creates each table that is absent from the search path, as ElasticJob does: the status
/// table together with its index. One transaction under an advisory lock, so sidecars starting
/// together take turns; a table created meanwhile by someone without the lock (an ElasticJob
/// process) makes it start over once.
async fn create_tables(client: &mut Client) -> Result<(), tokio_postgres::Error> {
    let mut tries = 0;
    loop {
        tries += 1;
        let result = async {
            let tx = client.transaction().await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
                .await?;
            if !table_exists(&tx, EXECUTION_LOG_TABLE).await? {
                tx.batch_execute(CREATE_EXECUTION_LOG).await?;
                info!(
                    table = EXECUTION_LOG_TABLE,
                    "created ElasticJob's tracing table"
                );
            }
            if !table_exists(&tx, STATUS_TRACE_LOG_TABLE).await? {
                tx.batch_execute(CREATE_STATUS_TRACE_LOG).await?;
                tx.batch_execute(CREATE_TASK_ID_STATE_INDEX).await?;
                info!(
                    table = STATUS_TRACE_LOG_TABLE,
                    "created ElasticJob's tracing table"
                );
            }
            tx.commit().await
        }
        .await;
        match result {
            Err(e)
                if tries == 1
                    && matches!(
                        e.code(),
                        Some(&SqlState::DUPLICATE_TABLE) | Some(&SqlState::UNIQUE_VIOLATION)
                    ) => {}
            other => return other,
        }
    }
}

/// Whether `table` is on the search path (where unqualified inserts go).
async fn table_exists(
    tx: &tokio_postgres::Transaction<'_>,
    table: &str,
) -> Result<bool, tokio_postgres::Error> {
    let row = tx
        .query_one("SELECT to_regclass($1::text) IS NOT NULL", &[&table])
        .await?;
    Ok(row.get(0))
}

/// Retry delays: doubling, capped, with ±25 % jitter so sidecars do not retry in step.
struct Backoff(Duration);

impl Backoff {
    #[allow(
        clippy::disallowed_methods,
        reason = "the writer's reconnect jitter, an I/O edge: no decision of a job's state"
    )]
    fn next(&mut self) -> Duration {
        let base = self.0;
        self.0 = (self.0 * 2).min(BACKOFF_MAX);
        base.mul_f64(rand::random_range(0.75..1.25))
    }

    fn reset(&mut self) {
        self.0 = BACKOFF_FIRST;
    }
}

/// The writer task.
pub(super) struct Writer {
    settings: TracingDbSettings,
    connection: Option<Connection>,
    rx: mpsc::Receiver<Vec<Row>>,
    close_rx: watch::Receiver<Option<Instant>>,
    metrics: Arc<Metrics>,
    tracker: TaskTracker,
    /// Rejected rows, for warnings at powers of two.
    rejected: u64,
}

impl Writer {
    pub(super) fn new(
        settings: TracingDbSettings,
        connection: Option<Connection>,
        rx: mpsc::Receiver<Vec<Row>>,
        close_rx: watch::Receiver<Option<Instant>>,
        metrics: Arc<Metrics>,
        tracker: TaskTracker,
    ) -> Writer {
        Writer {
            settings,
            connection,
            rx,
            close_rx,
            metrics,
            tracker,
            rejected: 0,
        }
    }

    /// Writes until closed, then writes what is queued until the deadline it was given.
    #[allow(
        clippy::disallowed_methods,
        reason = "the database writer's timeouts and backoff: an I/O edge"
    )]
    pub(super) async fn run(mut self) {
        let mut batch: Vec<Row> = Vec::new();
        let mut backoff = Backoff(BACKOFF_FIRST);
        let mut closing: Option<Instant> = None;
        let mut failing = false;
        loop {
            if batch.is_empty() {
                if closing.is_some() {
                    match self.rx.try_recv() {
                        Ok(rows) => batch.extend(rows),
                        Err(_) => return,
                    }
                } else {
                    tokio::select! {
                        rows = self.rx.recv() => match rows {
                            Some(rows) => batch.extend(rows),
                            None => return,
                        },
                        deadline = closed(&mut self.close_rx) => {
                            closing = Some(deadline);
                            self.rx.close();
                            continue;
                        }
                    }
                }
                while batch.len() < BATCH {
                    match self.rx.try_recv() {
                        Ok(rows) => batch.extend(rows),
                        Err(_) => break,
                    }
                }
            }
            let limit = Instant::now() + WRITE_TIMEOUT;
            let limit = closing.map_or(limit, |d| d.min(limit));
            let result = match tokio::time::timeout_at(limit, self.write(&mut batch)).await {
                Ok(result) => result,
                Err(_) => {
                    // A batch that hangs: its connection is suspect.
                    self.connection = None;
                    Err(Failure::Transient(
                        "no answer within the time a batch may take".into(),
                    ))
                }
            };
            match result {
                Ok(()) => {
                    if failing {
                        info!(db = %self.settings.shown,
                              "the tracing database is back: writing the queued executions");
                        failing = false;
                    }
                    backoff.reset();
                }
                Err(e) => {
                    if failing {
                        debug!(error = %e.message(), "the tracing database is still unavailable");
                    } else {
                        warn!(db = %self.settings.shown, error = %e.message(),
                              "the tracing database is unavailable: executions wait in the queue \
                               and are retried with backoff");
                        failing = true;
                    }
                    let wait = backoff.next();
                    if let Some(deadline) = closing {
                        // Closing: retry until the deadline, then give up.
                        let now = Instant::now();
                        if now >= deadline {
                            self.give_up(batch);
                            return;
                        }
                        tokio::time::sleep(wait.min(deadline - now)).await;
                    } else {
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            deadline = closed(&mut self.close_rx) => {
                                closing = Some(deadline);
                                self.rx.close();
                            }
                        }
                    }
                }
            }
        }
    }

    /// Writes `batch`, leaving in it the rows to retry.
    async fn write(&mut self, batch: &mut Vec<Row>) -> Result<(), Failure> {
        if self.connection.is_none() {
            self.connection = Some(Connection::open(&self.settings.config, &self.tracker).await?);
        }
        let connection = self.connection.as_ref().expect("opened above");
        let results =
            futures::future::join_all(batch.iter().map(|row| connection.insert(row))).await;
        let mut retry = Vec::new();
        let (mut written, mut rejected) = (0, 0);
        let mut failed: Option<Failure> = None;
        let mut reopen = false;
        for (row, result) in batch.drain(..).zip(results) {
            let e = match result {
                Ok(_) => {
                    written += 1;
                    continue;
                }
                Err(e) => e,
            };
            match e.code() {
                // Already there: an earlier try whose answer was lost wrote it.
                Some(&SqlState::UNIQUE_VIOLATION) => written += 1,
                // The tables went away: create them again on a new connection.
                Some(&SqlState::UNDEFINED_TABLE) => {
                    reopen = true;
                    failed.get_or_insert_with(|| failure(&e));
                    retry.push(row);
                }
                Some(code) if !retryable(code) => {
                    rejected += 1;
                    self.rejected += 1;
                    if self.rejected.is_power_of_two() {
                        warn!(error = %failure(&e).message(), rejected = self.rejected, row = ?row,
                              "the tracing database rejected a row: it is dropped");
                    }
                }
                _ => {
                    reopen |= e.as_db_error().is_none() || connection.client.is_closed();
                    failed.get_or_insert_with(|| failure(&e));
                    retry.push(row);
                }
            }
        }
        *batch = retry;
        self.metrics.tracing_rows("written", written);
        self.metrics.tracing_rows("rejected", rejected);
        if reopen {
            self.connection = None;
        }
        match failed {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }

    /// The shutdown grace ran out: what is left is dropped, and said so.
    fn give_up(&mut self, batch: Vec<Row>) {
        let mut left = batch.len() as u64;
        while let Ok(rows) = self.rx.try_recv() {
            left += rows.len() as u64;
        }
        if left > 0 {
            self.metrics.tracing_rows("dropped", left);
            warn!(
                rows = left,
                "tracing rows not written: the tracing database was unavailable until the \
                 shutdown grace ran out"
            );
        }
    }
}

/// Errors worth retrying: the connection (class 08), resources (53), the server shutting down
/// or starting (57), serialization failures and deadlocks (40). Others (a value too long, a
/// constraint) would fail again.
fn retryable(code: &SqlState) -> bool {
    let code = code.code();
    ["08", "53", "57", "40"].iter().any(|c| code.starts_with(c))
}

/// Resolves with the deadline once the sidecar closes the sink (at once if it went away).
#[allow(
    clippy::disallowed_methods,
    reason = "the database writer's timeouts and backoff: an I/O edge"
)]
async fn closed(close_rx: &mut watch::Receiver<Option<Instant>>) -> Instant {
    loop {
        if let Some(deadline) = *close_rx.borrow_and_update() {
            return deadline;
        }
        if close_rx.changed().await.is_err() {
            return Instant::now() + Duration::from_secs(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_retried() {
        for code in [
            SqlState::CONNECTION_FAILURE,
            SqlState::TOO_MANY_CONNECTIONS,
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::T_R_SERIALIZATION_FAILURE,
        ] {
            assert!(retryable(&code), "{code:?}");
        }
        for code in [
            SqlState::STRING_DATA_RIGHT_TRUNCATION,
            SqlState::NOT_NULL_VIOLATION,
            SqlState::DATATYPE_MISMATCH,
        ] {
            assert!(!retryable(&code), "{code:?}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_with_jitter() {
        let mut b = Backoff(BACKOFF_FIRST);
        let first = b.next();
        assert!(first >= BACKOFF_FIRST.mul_f64(0.75) && first <= BACKOFF_FIRST.mul_f64(1.25));
        for _ in 0..20 {
            assert!(b.next() <= BACKOFF_MAX.mul_f64(1.25));
        }
        b.reset();
        assert!(b.next() <= BACKOFF_FIRST.mul_f64(1.25));
    }
}
