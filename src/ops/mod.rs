//! Operating a sidecar: the execution [`history`], Prometheus [`metrics`], OpenTelemetry
//! execution spans ([`telemetry`]), ElasticJob's tracing tables on PostgreSQL ([`tracing_db`]),
//! the [`OpsObserver`] that feeds them from the coordinator, the namespace operations behind the
//! Admin API and the console ([`jobs`]), following a job as it changes ([`watch`]) and the jobs'
//! error handlers, ElasticJob's and a webhook, that report failed items ([`alerts`]). Who may
//! do all that is [`crate::access`] (the admin token), below both this and the settings.

pub mod alerts;
pub mod history;
pub mod jobs;
pub mod metrics;
pub mod telemetry;
pub mod tracing_db;
pub mod watch;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::warn;

use crate::coordination::Source;
use crate::coordination::{ExecutionRecord, ItemFailure, ItemOutcome, Observer};
use history::History;
use metrics::Metrics;

/// Records what the coordinator reports into the history and the metrics, and reports failed
/// items through their job's error handler.
pub struct OpsObserver {
    pub history: Arc<History>,
    pub metrics: Arc<Metrics>,
    /// Execution spans, when an OTLP endpoint is configured.
    pub telemetry: Option<telemetry::Telemetry>,
    /// Rows for ElasticJob's tracing tables, when a database is configured.
    pub tracing_db: Option<Arc<tracing_db::TracingDb>>,
    /// Sends the failures the jobs' error handlers report.
    pub alerts: alerts::Alerts,
    /// Each job's error handler, as last read from its config.
    pub handlers: Handlers,
}

/// The error handler of each job, read again only when its type or props change.
#[derive(Default)]
pub struct Handlers {
    by_job: Mutex<HashMap<String, Handler>>,
}

struct Handler {
    kind: Option<String>,
    props: BTreeMap<String, String>,
    handler: Arc<alerts::ErrorHandler>,
}

impl Handlers {
    /// The handler of `failure`'s job. A config that does not make one (written by a process
    /// that did not check it) is reported once, and its failures are logged as LOG logs them.
    fn of(&self, failure: &ItemFailure) -> Arc<alerts::ErrorHandler> {
        let mut by_job = self.by_job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = by_job.get(&failure.job) {
            if h.kind == failure.error_handler && h.props == failure.props {
                return h.handler.clone();
            }
        }
        let handler = alerts::ErrorHandler::parse(failure.error_handler.as_deref(), &failure.props)
            .unwrap_or_else(|e| {
                warn!(job = %failure.job, error = %e,
                      "the job's error handler cannot be set up: its failures are logged instead (fix the job's config)");
                alerts::ErrorHandler::Log
            });
        let handler = Arc::new(handler);
        by_job.insert(
            failure.job.clone(),
            Handler {
                kind: failure.error_handler.clone(),
                props: failure.props.clone(),
                handler: handler.clone(),
            },
        );
        handler
    }
}

impl Observer for OpsObserver {
    fn trigger_sent(&self, job: &str, source: Source, _items: &[i32], latency: Duration) {
        self.metrics.trigger_sent(job, source.as_str(), latency);
    }

    fn execution_finished(&self, record: &ExecutionRecord) {
        let count = |want: fn(&ItemOutcome) -> bool| {
            record.items.values().filter(|o| want(o)).count() as u64
        };
        self.metrics.execution_finished(
            &record.job,
            record.outcome(),
            record.duration,
            count(|o| matches!(o, ItemOutcome::Completed)),
            count(|o| matches!(o, ItemOutcome::Failed(_))),
        );
        self.history.record(record);
        if let Some(t) = &self.telemetry {
            t.execution_finished(record);
        }
        if let Some(db) = &self.tracing_db {
            db.execution_finished(record);
        }
    }

    fn misfired(&self, job: &str, items: &[i32]) {
        self.metrics.misfired(job, items.len());
    }

    /// A failure is reported through the job's error handler once it stands: at once without
    /// a retry policy, else once its attempts have run out (not for each attempt that will be
    /// retried). The sidecar that recorded the failure reports it, once.
    fn item_failed(&self, failure: &ItemFailure) {
        if failure.retrying {
            self.metrics.retry(&failure.job, failure.retry.is_some());
        }
        if failure.retry.is_some() {
            return;
        }
        let report = alerts::Failure {
            job: failure.job.clone(),
            item: failure.item,
            execution_id: failure.execution_id.clone(),
            task_id: failure.task_id.clone(),
            instance_id: failure.instance_id.clone(),
            attempt: failure.attempt,
            error: failure.error.clone(),
            time: failure.at,
        };
        self.alerts.report(self.handlers.of(failure), report);
    }

    fn failover_taken(&self, job: &str, _item: i32) {
        self.metrics.failover_taken(job);
    }

    fn revoked(&self, job: &str, items: &[i32], _reason: &str) {
        self.metrics.revoked(job, items.len());
    }

    fn worker(&self, job: &str, joined: bool) {
        self.metrics.worker(job, joined);
    }

    fn leadership(&self, job: &str, leader: bool) {
        self.metrics.leadership(job, leader);
    }

    fn hold_started(&self, job: &str, _item: i32, waited: Option<Duration>) {
        self.metrics.hold_started(job, waited);
    }
}
