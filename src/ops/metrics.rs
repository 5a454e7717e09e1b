//! Prometheus metrics of one sidecar, kept in memory and rendered in the text exposition format
//! (version 0.0.4) for `GET /metrics` (see [`http`](super::http)).
//!
//! Naming follows Prometheus' conventions: the `shardcar_` prefix, base units (seconds), `_total`
//! for counters. The only labels are `job` (bounded by the jobs configured), `source`, `outcome`
//! and `state` (small fixed sets); never an instance id, execution id or item.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::registry::{Registry, SessionState};

/// Bucket upper bounds (seconds) of `shardcar_execution_duration_seconds`.
const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];
/// Bucket upper bounds (seconds) of `shardcar_trigger_latency_seconds`.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// A cumulative histogram.
#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    /// Count per bucket (not cumulative); the last one is `+Inf`.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, value: f64) {
        let slot = self
            .bounds
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[slot] += 1;
        self.sum += value;
        self.count += 1;
    }
}

/// The ZooKeeper session as a metric (`shardcar_zookeeper_session_state{state}`).
const SESSION_STATES: [&str; 4] = ["connected", "disconnected", "expired", "closed"];

#[derive(Debug, Default, Clone)]
struct Inner {
    triggers: BTreeMap<(String, &'static str), u64>,
    executions: BTreeMap<(String, &'static str), u64>,
    completions: BTreeMap<String, u64>,
    failures: BTreeMap<String, u64>,
    misfires: BTreeMap<String, u64>,
    failovers: BTreeMap<String, u64>,
    revokes: BTreeMap<String, u64>,
    durations: BTreeMap<String, Histogram>,
    latencies: BTreeMap<String, Histogram>,
    workers: BTreeMap<String, i64>,
    leader: BTreeMap<String, bool>,
    session_state: Option<&'static str>,
    reconnects: u64,
    expirations: u64,
}

/// Every metric of the sidecar. Updates take a short lock with no await inside.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

fn bump(map: &mut BTreeMap<String, u64>, job: &str, by: u64) {
    *map.entry(job.to_string()).or_default() += by;
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        // Short critical section: counters only, no await.
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut inner)
    }

    /// A trigger was sent to a worker, `latency` after its fire instant.
    pub fn trigger_sent(&self, job: &str, source: &'static str, latency: Duration) {
        self.with(|m| {
            *m.triggers.entry((job.to_string(), source)).or_default() += 1;
            m.latencies
                .entry(job.to_string())
                .or_insert_with(|| Histogram::new(LATENCY_BUCKETS))
                .observe(latency.as_secs_f64());
        });
    }

    /// An execution ended with `outcome`, after `duration`; `completed`/`failed` items.
    pub fn execution_finished(
        &self,
        job: &str,
        outcome: &'static str,
        duration: Duration,
        completed: u64,
        failed: u64,
    ) {
        self.with(|m| {
            *m.executions.entry((job.to_string(), outcome)).or_default() += 1;
            bump(&mut m.completions, job, completed);
            bump(&mut m.failures, job, failed);
            m.durations
                .entry(job.to_string())
                .or_insert_with(|| Histogram::new(DURATION_BUCKETS))
                .observe(duration.as_secs_f64());
        });
    }

    pub fn misfired(&self, job: &str, items: usize) {
        self.with(|m| bump(&mut m.misfires, job, items as u64));
    }

    pub fn failover_taken(&self, job: &str) {
        self.with(|m| bump(&mut m.failovers, job, 1));
    }

    pub fn revoked(&self, job: &str, items: usize) {
        self.with(|m| bump(&mut m.revokes, job, items as u64));
    }

    /// A worker joined (`+1`) or left (`-1`) a job.
    pub fn worker(&self, job: &str, joined: bool) {
        self.with(|m| {
            let n = m.workers.entry(job.to_string()).or_default();
            *n = if joined { *n + 1 } else { (*n - 1).max(0) };
        });
    }

    pub fn leadership(&self, job: &str, leader: bool) {
        self.with(|m| {
            m.leader.insert(job.to_string(), leader);
        });
    }

    /// Records a session state change: a return to `Connected` within the same session counts
    /// as a reconnect, a new generation as an expiry.
    pub fn session(&self, previous: Option<&SessionState>, now: &SessionState) {
        self.with(|m| {
            m.session_state = Some(match now {
                SessionState::Connected { .. } => "connected",
                SessionState::Disconnected { .. } => "disconnected",
                SessionState::Expired { .. } => "expired",
                SessionState::Closed => "closed",
            });
            match (previous, now) {
                (
                    Some(SessionState::Disconnected { generation: g, .. }),
                    SessionState::Connected { generation, .. },
                ) if g == generation => m.reconnects += 1,
                (Some(SessionState::Connected { .. }), SessionState::Expired { .. })
                | (Some(SessionState::Disconnected { .. }), SessionState::Expired { .. }) => {
                    m.expirations += 1
                }
                _ => {}
            }
        });
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        // Copy, so rendering happens outside the lock.
        let m = self.with(|m| m.clone());
        let mut out = String::with_capacity(4096);
        let v = env!("CARGO_PKG_VERSION");
        header(
            &mut out,
            "shardcar_build_info",
            "gauge",
            "Always 1; the version of this sidecar.",
        );
        let _ = writeln!(out, "shardcar_build_info{{version=\"{}\"}} 1", escape(v));

        header(
            &mut out,
            "shardcar_triggers_total",
            "counter",
            "Triggers sent to workers, by job and trigger source.",
        );
        for ((job, source), n) in &m.triggers {
            let _ = writeln!(
                out,
                "shardcar_triggers_total{{job=\"{}\",source=\"{source}\"}} {n}",
                escape(job)
            );
        }
        header(
            &mut out,
            "shardcar_executions_total",
            "counter",
            "Executions ended, by job and outcome (completed, failed, revoked).",
        );
        for ((job, outcome), n) in &m.executions {
            let _ = writeln!(
                out,
                "shardcar_executions_total{{job=\"{}\",outcome=\"{outcome}\"}} {n}",
                escape(job)
            );
        }
        let per_job: [(&str, &str, &BTreeMap<String, u64>); 5] = [
            (
                "shardcar_completions_total",
                "Items reported complete by workers.",
                &m.completions,
            ),
            (
                "shardcar_failures_total",
                "Items reported failed by workers.",
                &m.failures,
            ),
            (
                "shardcar_misfires_total",
                "Items flagged misfire because they were still running at a fire.",
                &m.misfires,
            ),
            (
                "shardcar_failovers_total",
                "Failed items this sidecar took over.",
                &m.failovers,
            ),
            (
                "shardcar_revokes_total",
                "Items revoked from workers (lease lapse, timeout, fencing, shutdown).",
                &m.revokes,
            ),
        ];
        for (name, help, map) in per_job {
            header(&mut out, name, "counter", help);
            for (job, n) in map {
                let _ = writeln!(out, "{name}{{job=\"{}\"}} {n}", escape(job));
            }
        }
        header(
            &mut out,
            "shardcar_execution_duration_seconds",
            "histogram",
            "Time from sending a trigger to the end of the execution.",
        );
        for (job, h) in &m.durations {
            histogram(&mut out, "shardcar_execution_duration_seconds", job, h);
        }
        header(
            &mut out,
            "shardcar_trigger_latency_seconds",
            "histogram",
            "Time from a trigger's fire instant to sending it to the worker.",
        );
        for (job, h) in &m.latencies {
            histogram(&mut out, "shardcar_trigger_latency_seconds", job, h);
        }
        header(
            &mut out,
            "shardcar_workers",
            "gauge",
            "Worker streams connected to this sidecar, by job.",
        );
        for (job, n) in &m.workers {
            let _ = writeln!(out, "shardcar_workers{{job=\"{}\"}} {n}", escape(job));
        }
        header(
            &mut out,
            "shardcar_job_leader",
            "gauge",
            "1 when one of this sidecar's instances is the job's leader.",
        );
        for (job, leader) in &m.leader {
            let _ = writeln!(
                out,
                "shardcar_job_leader{{job=\"{}\"}} {}",
                escape(job),
                u8::from(*leader)
            );
        }
        header(
            &mut out,
            "shardcar_leader_jobs",
            "gauge",
            "Jobs this sidecar leads.",
        );
        let _ = writeln!(
            out,
            "shardcar_leader_jobs {}",
            m.leader.values().filter(|l| **l).count()
        );
        header(&mut out, "shardcar_zookeeper_session_state", "gauge",
               "1 for the current state of the registry session (connected, disconnected, expired, closed).");
        for state in SESSION_STATES {
            let on = u8::from(m.session_state == Some(state));
            let _ = writeln!(
                out,
                "shardcar_zookeeper_session_state{{state=\"{state}\"}} {on}"
            );
        }
        header(
            &mut out,
            "shardcar_zookeeper_connected",
            "gauge",
            "1 while the registry session is connected.",
        );
        let _ = writeln!(
            out,
            "shardcar_zookeeper_connected {}",
            u8::from(m.session_state == Some("connected"))
        );
        header(
            &mut out,
            "shardcar_zookeeper_reconnects_total",
            "counter",
            "Reconnections to ZooKeeper within the same session.",
        );
        let _ = writeln!(out, "shardcar_zookeeper_reconnects_total {}", m.reconnects);
        header(
            &mut out,
            "shardcar_zookeeper_session_expirations_total",
            "counter",
            "ZooKeeper sessions that expired (a new one was opened).",
        );
        let _ = writeln!(
            out,
            "shardcar_zookeeper_session_expirations_total {}",
            m.expirations
        );
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn histogram(out: &mut String, name: &str, job: &str, h: &Histogram) {
    let job = escape(job);
    let mut cumulative = 0;
    for (i, bound) in h.bounds.iter().enumerate() {
        cumulative += h.counts[i];
        let _ = writeln!(
            out,
            "{name}_bucket{{job=\"{job}\",le=\"{bound}\"}} {cumulative}"
        );
    }
    let _ = writeln!(
        out,
        "{name}_bucket{{job=\"{job}\",le=\"+Inf\"}} {}",
        h.count
    );
    let _ = writeln!(out, "{name}_sum{{job=\"{job}\"}} {}", h.sum);
    let _ = writeln!(out, "{name}_count{{job=\"{job}\"}} {}", h.count);
}

/// Escapes a label value (backslash, double quote, line feed).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
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
mod tests {
    use super::*;
    use std::time::Instant;

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

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
        let t = m.render();
        assert_eq!(
            line(
                &t,
                "shardcar_triggers_total{job=\"orders\",source=\"CRON\"}"
            ),
            Some("shardcar_triggers_total{job=\"orders\",source=\"CRON\"} 2")
        );
        assert!(t.contains("shardcar_executions_total{job=\"orders\",outcome=\"failed\"} 1\n"));
        assert!(t.contains("shardcar_completions_total{job=\"orders\"} 3\n"));
        assert!(t.contains("shardcar_failures_total{job=\"orders\"} 1\n"));
        assert!(t.contains("shardcar_misfires_total{job=\"orders\"} 2\n"));
        assert!(t.contains("shardcar_revokes_total{job=\"a\\\"b\"} 1\n"));
        assert!(t.contains("shardcar_workers{job=\"orders\"} 1\n"));
        assert!(t.contains("shardcar_leader_jobs 1\n"));
        assert!(
            t.contains("shardcar_trigger_latency_seconds_bucket{job=\"orders\",le=\"0.005\"} 1\n")
        );
        assert!(t.contains("shardcar_trigger_latency_seconds_bucket{job=\"orders\",le=\"5\"} 2\n"));
        assert!(
            t.contains("shardcar_trigger_latency_seconds_bucket{job=\"orders\",le=\"+Inf\"} 3\n")
        );
        assert!(t.contains(
            "shardcar_execution_duration_seconds_bucket{job=\"orders\",le=\"3600\"} 1\n"
        ));
        assert!(t.contains("shardcar_execution_duration_seconds_count{job=\"orders\"} 2\n"));
        assert!(t.contains("# TYPE shardcar_execution_duration_seconds histogram\n"));
        // Every sample line belongs to a declared metric family.
        let families: Vec<&str> = t
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            let base = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(families.contains(&name) || families.contains(&base), "{l}");
        }
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
        assert!(t.contains("shardcar_zookeeper_connected 0\n"));
        assert!(t.contains("shardcar_zookeeper_session_state{state=\"disconnected\"} 1\n"));
        m.session(Some(&d1), &c1);
        m.session(Some(&c1), &d1);
        m.session(Some(&d1), &e1);
        m.session(Some(&e1), &c2);
        let t = m.render();
        assert!(t.contains("shardcar_zookeeper_reconnects_total 1\n"));
        assert!(t.contains("shardcar_zookeeper_session_expirations_total 1\n"));
        assert!(t.contains("shardcar_zookeeper_connected 1\n"));
        assert!(t.contains("shardcar_zookeeper_session_state{state=\"connected\"} 1\n"));
    }
}
