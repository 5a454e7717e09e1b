//! Prometheus metrics of one sidecar, kept by `prometheus-client` and rendered in the
//! OpenMetrics text format for `GET /metrics` (see [`http`](super::http)).
//!
//! Naming follows Prometheus' conventions: the `shardcar_` prefix, base units (seconds), `_total`
//! for counters. The only labels are `job_name` (bounded by the jobs configured; not `job`, which
//! is Prometheus' own target label), `source`, `outcome`, `state` and `handler` (small fixed
//! sets); never an instance id, execution id or item.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry as MetricRegistry;
use tokio_util::sync::CancellationToken;

use crate::registry::{Registry, SessionState};

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Bucket upper bounds (seconds) of `shardcar_execution_duration_seconds`.
const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];
/// Bucket upper bounds (seconds) of `shardcar_trigger_latency_seconds`.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// The ZooKeeper session as a metric (`shardcar_zookeeper_session_state{state}`).
const SESSION_STATES: [&str; 4] = ["connected", "disconnected", "expired", "closed"];

/// A job name as a label value, escaped as the exposition format wants (backslash, double
/// quote, line feed): job names come from ZooKeeper and may hold any of them.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct JobName(String);

impl EncodeLabelValue for JobName {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        use std::fmt::Write as _;
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    job_name: JobName,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    job_name: JobName,
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    job_name: JobName,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RowOutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

/// An error handler that sends (`EMAIL`, `WECHAT`, `DINGTALK`, `WEBHOOK`), as
/// `jobErrorHandlerType` spells it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandlerLabels {
    handler: &'static str,
}

type HistogramFamily = Family<JobLabels, Histogram, fn() -> Histogram>;

fn job(name: &str) -> JobLabels {
    JobLabels {
        job_name: JobName(name.to_string()),
    }
}

/// Every metric of the sidecar. Updates are atomic; no await inside.
pub struct Metrics {
    registry: MetricRegistry,
    triggers: Family<SourceLabels, Counter>,
    executions: Family<OutcomeLabels, Counter>,
    completions: Family<JobLabels, Counter>,
    failures: Family<JobLabels, Counter>,
    misfires: Family<JobLabels, Counter>,
    retries: Family<JobLabels, Counter>,
    retries_exhausted: Family<JobLabels, Counter>,
    holds_started: Family<JobLabels, Counter>,
    handoffs: HistogramFamily,
    failovers: Family<JobLabels, Counter>,
    revokes: Family<JobLabels, Counter>,
    durations: HistogramFamily,
    latencies: HistogramFamily,
    workers: Family<JobLabels, Gauge>,
    job_leader: Family<JobLabels, Gauge>,
    leader_jobs: Gauge,
    /// Which jobs this sidecar leads, for `leader_jobs`.
    leading: Mutex<BTreeMap<String, bool>>,
    session_state: Family<StateLabels, Gauge>,
    connected: Gauge,
    reconnects: Counter,
    expirations: Counter,
    tracing_rows: Family<RowOutcomeLabels, Counter>,
    // Alerts sent by the jobs' error handlers (crate::ops::alerts).
    alerts_sent: Family<HandlerLabels, Counter>,
    alerts_failed: Family<HandlerLabels, Counter>,
    alerts_dropped: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = MetricRegistry::default();
        r.register(
            "shardcar_build",
            "The version of this sidecar",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        let m = Metrics {
            triggers: Family::default(),
            executions: Family::default(),
            completions: Family::default(),
            failures: Family::default(),
            misfires: Family::default(),
            retries: Family::default(),
            retries_exhausted: Family::default(),
            holds_started: Family::default(),
            handoffs: Family::new_with_constructor(|| {
                Histogram::new(LATENCY_BUCKETS.iter().copied())
            }),
            failovers: Family::default(),
            revokes: Family::default(),
            durations: Family::new_with_constructor(|| {
                Histogram::new(DURATION_BUCKETS.iter().copied())
            }),
            latencies: Family::new_with_constructor(|| {
                Histogram::new(LATENCY_BUCKETS.iter().copied())
            }),
            workers: Family::default(),
            job_leader: Family::default(),
            leader_jobs: Gauge::default(),
            leading: Mutex::new(BTreeMap::new()),
            session_state: Family::default(),
            connected: Gauge::default(),
            reconnects: Counter::default(),
            expirations: Counter::default(),
            tracing_rows: Family::default(),
            alerts_sent: Family::default(),
            alerts_failed: Family::default(),
            alerts_dropped: Counter::default(),
            registry: MetricRegistry::default(),
        };
        // Counters are registered without `_total`; the encoder adds it.
        r.register(
            "shardcar_triggers",
            "Triggers sent to workers, by job and trigger source",
            m.triggers.clone(),
        );
        r.register(
            "shardcar_executions",
            "Executions ended, by job and outcome (completed, failed, revoked)",
            m.executions.clone(),
        );
        r.register(
            "shardcar_completions",
            "Items reported complete by workers",
            m.completions.clone(),
        );
        r.register(
            "shardcar_failures",
            "Items reported failed by workers",
            m.failures.clone(),
        );
        r.register(
            "shardcar_misfires",
            "Items flagged misfire because they were still running at a fire",
            m.misfires.clone(),
        );
        r.register(
            "shardcar_retries",
            "Failed items scheduled to run again under their job's retry policy",
            m.retries.clone(),
        );
        r.register(
            "shardcar_retries_exhausted",
            "Failed items whose retry attempts ran out: the failure stands",
            m.retries_exhausted.clone(),
        );
        r.register(
            "shardcar_failovers",
            "Failed items this sidecar took over",
            m.failovers.clone(),
        );
        r.register(
            "shardcar_revokes",
            "Items revoked from workers (lease lapse, timeout, fencing, shutdown)",
            m.revokes.clone(),
        );
        r.register(
            "shardcar_execution_duration_seconds",
            "Time from sending a trigger to the end of the execution",
            m.durations.clone(),
        );
        r.register(
            "shardcar_holds_started",
            "Holds of resident items started here (hand-offs and restarts)",
            m.holds_started.clone(),
        );
        r.register(
            "shardcar_handoff_seconds",
            "Time from reading that a resident item is a local instance's to starting its hold",
            m.handoffs.clone(),
        );
        r.register(
            "shardcar_trigger_latency_seconds",
            "Time from a trigger's fire instant to sending it to the worker",
            m.latencies.clone(),
        );
        r.register(
            "shardcar_workers",
            "Worker streams connected to this sidecar, by job",
            m.workers.clone(),
        );
        r.register(
            "shardcar_job_leader",
            "1 when one of this sidecar's instances is the job's leader",
            m.job_leader.clone(),
        );
        r.register(
            "shardcar_leader_jobs",
            "Jobs this sidecar leads",
            m.leader_jobs.clone(),
        );
        r.register(
            "shardcar_zookeeper_session_state",
            "1 for the current state of the registry session (connected, disconnected, expired, closed)",
            m.session_state.clone(),
        );
        r.register(
            "shardcar_zookeeper_connected",
            "1 while the registry session is connected",
            m.connected.clone(),
        );
        r.register(
            "shardcar_zookeeper_reconnects",
            "Reconnections to ZooKeeper within the same session",
            m.reconnects.clone(),
        );
        r.register(
            "shardcar_zookeeper_session_expirations",
            "ZooKeeper sessions that expired (a new one was opened)",
            m.expirations.clone(),
        );
        r.register(
            "shardcar_tracing_rows",
            "Rows for ElasticJob's tracing tables, by outcome (written, dropped, rejected)",
            m.tracing_rows.clone(),
        );
        r.register(
            "shardcar_alerts_sent",
            "Failures sent by the jobs' error handlers, by handler (EMAIL, WECHAT, DINGTALK, WEBHOOK)",
            m.alerts_sent.clone(),
        );
        r.register(
            "shardcar_alerts_failed",
            "Failures the jobs' error handlers could not send (refused, or no answer in time), by handler",
            m.alerts_failed.clone(),
        );
        r.register(
            "shardcar_alerts_dropped",
            "Failures not sent because the queue of alerts was full or the sidecar stopped",
            m.alerts_dropped.clone(),
        );
        for state in SESSION_STATES {
            m.session_state.get_or_create(&StateLabels { state }).set(0);
        }
        Metrics { registry: r, ..m }
    }

    /// A trigger was sent to a worker, `latency` after its fire instant.
    pub fn trigger_sent(&self, job_name: &str, source: &'static str, latency: Duration) {
        self.triggers
            .get_or_create(&SourceLabels {
                job_name: JobName(job_name.to_string()),
                source,
            })
            .inc();
        self.latencies
            .get_or_create(&job(job_name))
            .observe(latency.as_secs_f64());
    }

    /// An execution ended with `outcome`, after `duration`; `completed`/`failed` items.
    pub fn execution_finished(
        &self,
        job_name: &str,
        outcome: &'static str,
        duration: Duration,
        completed: u64,
        failed: u64,
    ) {
        self.executions
            .get_or_create(&OutcomeLabels {
                job_name: JobName(job_name.to_string()),
                outcome,
            })
            .inc();
        let labels = job(job_name);
        self.completions.get_or_create(&labels).inc_by(completed);
        self.failures.get_or_create(&labels).inc_by(failed);
        self.durations
            .get_or_create(&labels)
            .observe(duration.as_secs_f64());
    }

    pub fn misfired(&self, job_name: &str, items: usize) {
        self.misfires
            .get_or_create(&job(job_name))
            .inc_by(items as u64);
    }

    /// A resident item's hold started: after a hand-off that took `waited`, or a restart.
    pub fn hold_started(&self, job_name: &str, waited: Option<Duration>) {
        let labels = job(job_name);
        self.holds_started.get_or_create(&labels).inc();
        if let Some(w) = waited {
            self.handoffs
                .get_or_create(&labels)
                .observe(w.as_secs_f64());
        }
    }

    /// A failed item's retry was scheduled (`true`), or its attempts ran out (`false`).
    pub fn retry(&self, job_name: &str, scheduled: bool) {
        let family = if scheduled {
            &self.retries
        } else {
            &self.retries_exhausted
        };
        family.get_or_create(&job(job_name)).inc();
    }

    pub fn failover_taken(&self, job_name: &str) {
        self.failovers.get_or_create(&job(job_name)).inc();
    }

    pub fn revoked(&self, job_name: &str, items: usize) {
        self.revokes
            .get_or_create(&job(job_name))
            .inc_by(items as u64);
    }

    /// A worker joined (`+1`) or left (`-1`) a job.
    pub fn worker(&self, job_name: &str, joined: bool) {
        let g = self.workers.get_or_create(&job(job_name));
        if joined {
            g.inc();
        } else if g.get() > 0 {
            g.dec();
        }
    }

    pub fn leadership(&self, job_name: &str, leader: bool) {
        self.job_leader
            .get_or_create(&job(job_name))
            .set(i64::from(leader));
        let mut leading = self.leading.lock().unwrap_or_else(|e| e.into_inner());
        leading.insert(job_name.to_string(), leader);
        self.leader_jobs
            .set(leading.values().filter(|l| **l).count() as i64);
    }

    /// `n` rows for the tracing database were `written`, `dropped` or `rejected`.
    pub fn tracing_rows(&self, outcome: &'static str, n: u64) {
        self.tracing_rows
            .get_or_create(&RowOutcomeLabels { outcome })
            .inc_by(n);
    }

    /// `n` alerts were sent by `handler`.
    pub fn alert_sent(&self, handler: &'static str, n: u64) {
        self.alerts_sent
            .get_or_create(&HandlerLabels { handler })
            .inc_by(n);
    }

    /// `n` alerts of `handler` could not be sent.
    pub fn alert_failed(&self, handler: &'static str, n: u64) {
        self.alerts_failed
            .get_or_create(&HandlerLabels { handler })
            .inc_by(n);
    }

    /// `n` alerts were dropped before being sent.
    pub fn alerts_dropped(&self, n: u64) {
        self.alerts_dropped.inc_by(n);
    }

    /// Records a session state change: a return to `Connected` within the same session counts
    /// as a reconnect, a new generation as an expiry.
    pub fn session(&self, previous: Option<&SessionState>, now: &SessionState) {
        let current = match now {
            SessionState::Connected { .. } => "connected",
            SessionState::Disconnected { .. } => "disconnected",
            SessionState::Expired { .. } => "expired",
            SessionState::Closed => "closed",
        };
        for state in SESSION_STATES {
            self.session_state
                .get_or_create(&StateLabels { state })
                .set(i64::from(state == current));
        }
        self.connected.set(i64::from(current == "connected"));
        match (previous, now) {
            (
                Some(SessionState::Disconnected { generation: g, .. }),
                SessionState::Connected { generation, .. },
            ) if g == generation => {
                self.reconnects.inc();
            }
            (Some(SessionState::Connected { .. }), SessionState::Expired { .. })
            | (Some(SessionState::Disconnected { .. }), SessionState::Expired { .. }) => {
                self.expirations.inc();
            }
            _ => {}
        }
    }

    /// The OpenMetrics text exposition of every metric (content type [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Follows the registry session into `metrics` until `cancel`.
pub async fn track_session(
    registry: Registry,
    metrics: std::sync::Arc<Metrics>,
    cancel: CancellationToken,
) {
    let mut session = registry.session();
    let mut previous: Option<SessionState> = None;
    loop {
        let now = session.borrow_and_update().clone();
        metrics.session(previous.as_ref(), &now);
        previous = Some(now);
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = session.changed() => if changed.is_err() { return },
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
    use std::time::Instant;

    #[test]
    fn counters_and_histograms_render() {
        let m = Metrics::new();
        m.trigger_sent("orders", "CRON", Duration::from_millis(3));
        m.trigger_sent("orders", "CRON", Duration::from_millis(30));
        m.trigger_sent("orders", "MANUAL", Duration::from_secs(10));
        m.execution_finished("orders", "completed", Duration::from_millis(200), 2, 0);
        m.execution_finished("orders", "failed", Duration::from_secs(7200), 1, 1);
        m.misfired("orders", 2);
        m.revoked("a\"b", 1);
        m.worker("orders", true);
        m.worker("orders", true);
        m.worker("orders", false);
        m.leadership("orders", true);
        m.leadership("other", false);
        m.alert_sent("DINGTALK", 2);
        m.alert_failed("EMAIL", 1);
        m.alerts_dropped(3);
        let t = m.render();
        for want in [
            "shardcar_build_info{version=\"",
            "shardcar_triggers_total{job_name=\"orders\",source=\"CRON\"} 2\n",
            "shardcar_executions_total{job_name=\"orders\",outcome=\"failed\"} 1\n",
            "shardcar_completions_total{job_name=\"orders\"} 3\n",
            "shardcar_failures_total{job_name=\"orders\"} 1\n",
            "shardcar_misfires_total{job_name=\"orders\"} 2\n",
            "shardcar_revokes_total{job_name=\"a\\\"b\"} 1\n",
            "shardcar_workers{job_name=\"orders\"} 1\n",
            "shardcar_job_leader{job_name=\"orders\"} 1\n",
            "shardcar_leader_jobs 1\n",
            "shardcar_trigger_latency_seconds_bucket{le=\"0.005\",job_name=\"orders\"} 1\n",
            "shardcar_trigger_latency_seconds_bucket{le=\"5.0\",job_name=\"orders\"} 2\n",
            "shardcar_trigger_latency_seconds_bucket{le=\"+Inf\",job_name=\"orders\"} 3\n",
            "shardcar_execution_duration_seconds_bucket{le=\"3600.0\",job_name=\"orders\"} 1\n",
            "shardcar_execution_duration_seconds_count{job_name=\"orders\"} 2\n",
            "# TYPE shardcar_execution_duration_seconds histogram\n",
            "# TYPE shardcar_triggers counter\n",
            "shardcar_alerts_sent_total{handler=\"DINGTALK\"} 2\n",
            "shardcar_alerts_failed_total{handler=\"EMAIL\"} 1\n",
            "shardcar_alerts_dropped_total 3\n",
        ] {
            assert!(t.contains(want), "{want:?} missing from\n{t}");
        }
        assert!(t.ends_with("# EOF\n"), "{t}");
        assert!(!t.contains("..\n"), "a HELP text ends in two periods:\n{t}");
    }

    #[test]
    fn session_changes_count_reconnects_and_expiries() {
        let m = Metrics::new();
        let c1 = SessionState::Connected {
            generation: 1,
            session_id: 5,
        };
        let d1 = SessionState::Disconnected {
            generation: 1,
            since: Instant::now(),
        };
        let e1 = SessionState::Expired { generation: 1 };
        let c2 = SessionState::Connected {
            generation: 2,
            session_id: 6,
        };
        m.session(None, &c1);
        m.session(Some(&c1), &d1);
        let t = m.render();
        assert!(t.contains("shardcar_zookeeper_connected 0\n"), "{t}");
        assert!(t.contains("shardcar_zookeeper_session_state{state=\"disconnected\"} 1\n"));
        m.session(Some(&d1), &c1);
        m.session(Some(&c1), &d1);
        m.session(Some(&d1), &e1);
        m.session(Some(&e1), &c2);
        let t = m.render();
        assert!(t.contains("shardcar_zookeeper_reconnects_total 1\n"), "{t}");
        assert!(t.contains("shardcar_zookeeper_session_expirations_total 1\n"));
        assert!(t.contains("shardcar_zookeeper_connected 1\n"));
        assert!(t.contains("shardcar_zookeeper_session_state{state=\"connected\"} 1\n"));
    }
}
