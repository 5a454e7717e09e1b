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

use std::sync::Arc;
use std::time::Duration;

use crate::coordination::Source;
use crate::coordination::{ExecutionRecord, ItemFailure, ItemOutcome, Observer};
use history::History;
use metrics::Metrics;

/// Records what the coordinator reports into the history and the metrics.
pub struct OpsObserver {
    pub history: Arc<History>,
    pub metrics: Arc<Metrics>,
    /// Execution spans, when an OTLP endpoint is configured.
    pub telemetry: Option<telemetry::Telemetry>,
    /// Rows for ElasticJob's tracing tables, when a database is configured.
    pub tracing_db: Option<Arc<tracing_db::TracingDb>>,
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

    fn item_failed(&self, failure: &ItemFailure) {
        if failure.retrying {
            self.metrics.retry(&failure.job, failure.retry.is_some());
        }
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
}
