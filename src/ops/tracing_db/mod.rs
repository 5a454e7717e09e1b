//! Execution history in ElasticJob's RDB event-tracing tables on PostgreSQL
//! (`JOB_EXECUTION_LOG`, `JOB_STATUS_TRACE_LOG`), which ElasticJob-UI's history pages read, so
//! executions run by shardcar's workers show there beside those of ElasticJob processes.
//!
//! The sink is optional (the `tracing_db` setting) and never sits on the trigger path: the
//! observer turns a finished execution into its rows ([`rows`]) and hands them to one writer
//! task over a bounded queue (`try_send`, never waiting). The writer owns the one connection
//! ([`writer`]); it creates the tables when absent, writes in batches, and when the database
//! is unreachable keeps the rows queued and retries with backoff; once the queue is full, whole
//! executions are dropped. `shardcar_tracing_rows_total{outcome}` counts rows `written`,
//! `dropped` (no room in the queue, or still queued when the shutdown grace ran out) and
//! `rejected` (refused by the database, e.g. a value too long for its column); a warning says
//! when rows are dropped or rejected and when the database goes away and comes back.
//!
//! At start, a URL that cannot be used, and a database that refuses the login (wrong password,
//! no such database or user, no right to create the tables) stop the sidecar with exit status
//! 64; a database that cannot be reached does not: the sidecar runs and the rows wait.
//!
//! With the sink, `Admin.ListExecutions` reads the cluster-wide history back from the table
//! ([`reader`]): every sidecar's executions and those of ElasticJob processes writing there.
//!
//! The connection is plain TCP or a Unix socket, without TLS (`sslmode=require` is refused).

pub mod reader;
pub mod rows;
mod writer;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::task::TaskTracker;

use crate::coordination::ExecutionRecord;
use crate::ops::metrics::Metrics;
use rows::Row;

/// Finished executions that may wait for the writer; beyond that they are dropped (and counted).
pub const QUEUE: usize = 4096;
/// How long the connection at start may take before the sidecar goes on without it.
const START_WAIT: Duration = Duration::from_secs(5);

/// Where the tracing tables are: the `tracing_db` setting.
#[derive(Clone, PartialEq, Eq)]
pub struct TracingDbSettings {
    pub config: tokio_postgres::Config,
    /// The URL with its password hidden, for messages and logs.
    pub shown: String,
    /// The setting as the user gave it (`--tracing-db`, `SHARDCAR_TRACING_DB`, `tracing_db in
    /// FILE`), to name in errors found at start.
    pub origin: String,
}

impl std::fmt::Debug for TracingDbSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracingDbSettings")
            .field("url", &self.shown)
            .field("origin", &self.origin)
            .finish()
    }
}

impl TracingDbSettings {
    /// Reads a `postgres://user:password@host:port/db` URL (or `postgresql://`; any of
    /// tokio-postgres' query parameters, e.g. `?connect_timeout=5`); `origin` names the setting.
    ///
    /// # Errors
    /// A message naming what is wrong, without the password.
    pub fn parse(url: &str, origin: &str) -> Result<TracingDbSettings, String> {
        let url = url.trim();
        let example = "postgres://user:password@host:5432/db";
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(format!("must be a PostgreSQL URL like {example}"));
        }
        let shown = hide_password(url);
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            let e = writer::describe(&e);
            format!("{shown} is not a PostgreSQL URL like {example}: {e}")
        })?;
        if config.get_hosts().is_empty() {
            return Err(format!("{shown} names no host; write it like {example}"));
        }
        if config.get_user().is_none_or(str::is_empty) {
            return Err(format!("{shown} names no user; write it like {example}"));
        }
        if matches!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        ) {
            return Err(format!(
                "{shown} asks for TLS (sslmode=require), which shardcar does not support: \
                 it connects without TLS"
            ));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(START_WAIT);
        }
        if config.get_application_name().is_none() {
            config.application_name("shardcar");
        }
        Ok(TracingDbSettings {
            config,
            shown,
            origin: origin.to_string(),
        })
    }

    /// `host:port` of every host, for messages.
    fn hosts(&self) -> String {
        let ports = self.config.get_ports();
        self.config
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                match h {
                    tokio_postgres::config::Host::Tcp(host) => format!("{host}:{port}"),
                    tokio_postgres::config::Host::Unix(path) => {
                        format!("{}:{port}", path.display())
                    }
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The URL with the password of its user part (and of a `password=` parameter) replaced by
/// `***`. The user part ends at the first `@`, as tokio-postgres reads it.
fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let rest = match rest.split_once('@') {
        Some((credentials, after)) => match credentials.split_once(':') {
            Some((user, _)) => format!("{user}:***@{after}"),
            None => rest.to_string(),
        },
        None => rest.to_string(),
    };
    let rest = match rest.split_once('?') {
        Some((before, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| {
                    if pair.starts_with("password=") {
                        "password=***".to_string()
                    } else {
                        pair.to_string()
                    }
                })
                .collect();
            format!("{before}?{}", query.join("&"))
        }
        None => rest,
    };
    format!("{scheme}://{rest}")
}

/// The database refused the sidecar at start (exit status 64).
#[derive(Debug, thiserror::Error)]
#[error("invalid setting {setting}: {message}")]
pub struct TracingDbError {
    pub setting: String,
    pub message: String,
}

/// What a first connection at start found.
pub struct Started {
    connection: Option<writer::Connection>,
}

/// Connects once, creates the tables if absent and prepares the inserts, before the sidecar
/// serves. A database that cannot be reached within a few seconds is not an error: the writer
/// keeps trying.
///
/// # Errors
/// The database refused the login, the database or user does not exist, or the user may not
/// create the tables.
///
/// # Cancellation safety
/// Dropped midway, it leaves nothing behind: the connection's task ends with its client (the
/// tables, if it got as far, are created in one transaction).
pub async fn connect_at_start(
    settings: &TracingDbSettings,
    tracker: &TaskTracker,
) -> Result<Started, TracingDbError> {
    let attempt = writer::Connection::open(&settings.config, tracker);
    let result = match tokio::time::timeout(START_WAIT, attempt).await {
        Ok(result) => result,
        Err(_) => Err(writer::Failure::Transient(format!(
            "no answer within {START_WAIT:?}"
        ))),
    };
    match result {
        Ok(connection) => {
            tracing::info!(db = %settings.shown,
                           "writing execution history into ElasticJob's tracing tables");
            Ok(Started {
                connection: Some(connection),
            })
        }
        Err(writer::Failure::Fatal(message)) => Err(TracingDbError {
            setting: settings.origin.clone(),
            message: format!(
                "PostgreSQL at {} refused user {}: {message}",
                settings.hosts(),
                settings.config.get_user().unwrap_or_default()
            ),
        }),
        Err(writer::Failure::Transient(message)) => {
            tracing::warn!(db = %settings.shown, error = %message,
                           queue = QUEUE,
                           "the tracing database is unreachable: executions wait in a queue \
                            and are written once it is back");
            Ok(Started { connection: None })
        }
    }
}

/// The observer's end of the sink: hands finished executions to the writer task.
pub struct TracingDb {
    tx: mpsc::Sender<Vec<Row>>,
    hostname: String,
    metrics: Arc<Metrics>,
    dropped: AtomicU64,
    close_tx: watch::Sender<Option<tokio::time::Instant>>,
}

impl std::fmt::Debug for TracingDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracingDb").finish_non_exhaustive()
    }
}

impl TracingDb {
    /// Starts the writer task on `tracker`, with the connection made at start if there is one.
    /// It writes until [`TracingDb::close`].
    pub fn spawn(
        settings: &TracingDbSettings,
        started: Started,
        metrics: Arc<Metrics>,
        tracker: &TaskTracker,
    ) -> TracingDb {
        TracingDb::spawn_with_queue(settings, started, metrics, tracker, QUEUE)
    }

    fn spawn_with_queue(
        settings: &TracingDbSettings,
        started: Started,
        metrics: Arc<Metrics>,
        tracker: &TaskTracker,
        queue: usize,
    ) -> TracingDb {
        let (tx, rx) = mpsc::channel(queue);
        let (close_tx, close_rx) = watch::channel(None);
        for outcome in writer::OUTCOMES {
            metrics.tracing_rows(outcome, 0);
        }
        tracker.spawn(
            writer::Writer::new(
                settings.clone(),
                started.connection,
                rx,
                close_rx,
                metrics.clone(),
                tracker.clone(),
            )
            .run(),
        );
        TracingDb {
            tx,
            hostname: hostname(),
            metrics,
            dropped: AtomicU64::new(0),
            close_tx,
        }
    }

    /// Queues the rows of a finished execution, or drops them (counted) if the queue is full.
    pub fn execution_finished(&self, record: &ExecutionRecord) {
        let rows = rows::rows_of(record, &self.hostname);
        let n = rows.len() as u64;
        if self.tx.try_send(rows).is_err() {
            self.metrics.tracing_rows("dropped", n);
            let before = self.dropped.fetch_add(1, Ordering::Relaxed);
            if (before + 1).is_power_of_two() {
                tracing::warn!(
                    executions = before + 1,
                    "tracing rows dropped: the queue for the tracing database is full"
                );
            }
        }
    }

    /// Tells the writer to write what is queued until `deadline`, drop the rest, and end.
    pub fn close(&self, deadline: std::time::Instant) {
        let _ = self.close_tx.send(Some(deadline.into()));
    }
}

/// This host's name, as ElasticJob records it (`InetAddress.getLocalHost().getHostName()`,
/// `unknown` when there is none).
fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests run against real time and real servers"
)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_read_and_mistakes_named_without_the_password() {
        let s = TracingDbSettings::parse(
            "postgres://app:s3cret@db.example:5433/history",
            "--tracing-db",
        )
        .unwrap();
        assert_eq!(s.config.get_user(), Some("app"));
        assert_eq!(s.config.get_dbname(), Some("history"));
        assert_eq!(s.config.get_ports(), &[5433]);
        assert_eq!(s.shown, "postgres://app:***@db.example:5433/history");
        assert_eq!(s.hosts(), "db.example:5433");
        assert!(!format!("{s:?}").contains("s3cret"), "{s:?}");
        assert_eq!(
            hide_password("postgresql://u@h/db?password=x&connect_timeout=3"),
            "postgresql://u@h/db?password=***&connect_timeout=3"
        );
        for (url, want) in [
            ("mysql://u:p@h/db", "must be a PostgreSQL URL"),
            ("h:5432", "must be a PostgreSQL URL"),
            ("postgres://u:s3cret@/db", "names no host"),
            ("postgres://h:5432/db", "names no user"),
            (
                "postgres://u:s3cret@h:notaport/db",
                "is not a PostgreSQL URL",
            ),
            (
                "postgres://u:s3cret@h/db?nosuch=1",
                "is not a PostgreSQL URL",
            ),
            ("postgres://u:s3cret@h/db?sslmode=require", "TLS"),
        ] {
            let e = TracingDbSettings::parse(url, "x").unwrap_err();
            assert!(e.contains(want), "{url}: {e}");
            assert!(!e.contains("s3cret"), "{url}: {e}");
        }
    }

    fn record() -> ExecutionRecord {
        crate::ops::history::tests::one_failed_item()
    }

    #[tokio::test]
    async fn a_full_queue_drops_whole_executions_and_counts_their_rows() {
        let settings = TracingDbSettings::parse("postgres://u:p@127.0.0.1:1/db", "x").unwrap();
        let metrics = Arc::new(Metrics::new());
        let tracker = TaskTracker::new();
        let db = TracingDb::spawn_with_queue(
            &settings,
            Started { connection: None },
            metrics.clone(),
            &tracker,
            1,
        );
        // Nothing listens on port 1: the writer holds the first execution and retries, the
        // queue holds one more, the rest are dropped.
        for _ in 0..5 {
            db.execution_finished(&record());
        }
        let text = metrics.render();
        let dropped = text
            .lines()
            .find(|l| l.starts_with("shardcar_tracing_rows_total{outcome=\"dropped\"}"))
            .unwrap_or_else(|| panic!("{text}"));
        // Each execution is 5 rows (staging, running, 2 items, error): 3 or 4 executions
        // dropped, depending on whether the writer took the first one yet.
        assert!(
            dropped.ends_with(" 15") || dropped.ends_with(" 20"),
            "{dropped}"
        );
        assert!(text.contains("shardcar_tracing_rows_total{outcome=\"written\"} 0\n"));
        // Closing ends the writer by the deadline, counting what it still held as dropped.
        db.close(std::time::Instant::now() + Duration::from_millis(300));
        tracker.close();
        tokio::time::timeout(Duration::from_secs(5), tracker.wait())
            .await
            .expect("the writer ends by its deadline");
        let text = metrics.render();
        assert!(
            text.contains("shardcar_tracing_rows_total{outcome=\"dropped\"} 25\n"),
            "{text}"
        );
    }
}
