//! `/{job}/shardcar`: job settings shardcar has beyond ElasticJob's `config`. Java never reads
//! this sibling node, so `config` keeps exactly ElasticJob's keys (old readers break on new
//! keys, UI#125). YAML with our own camel-case keys; unknown keys are ignored when read.
//!
//! Its children are shardcar's own state of the job: `retries/{i}`, the pending retry of item
//! `i` ([`PendingRetry`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::LayoutError;

/// shardcar's own per-job settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct JobExtras {
    /// An item not answered within this many seconds fails (0: no limit).
    pub execution_timeout_seconds: u32,
    /// How a failed item runs again (`None`: it waits for the next fire, as in ElasticJob).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Each item is held continuously by its owner's worker instead of run at fire instants.
    pub resident: bool,
}

/// How a failed item (answered `ReportFailure`, or not answered within the execution timeout)
/// runs again: after a backoff that grows from `initial_backoff` by `multiplier` up to
/// `max_backoff`, until `max_attempts` runs in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// Runs of an item in all, the first included (3: the first run and two retries).
    pub max_attempts: u32,
    #[serde(rename = "initialBackoffMillis")]
    pub initial_backoff_ms: u64,
    #[serde(rename = "maxBackoffMillis")]
    pub max_backoff_ms: u64,
    /// Each backoff is the one before times this, in thousandths (2000: doubles).
    #[serde(rename = "multiplierPermille")]
    pub multiplier_permille: u32,
}

impl RetryPolicy {
    /// The most runs of an item a policy may ask for.
    pub const MAX_ATTEMPTS: u32 = 100;
    /// The shortest backoff.
    pub const MIN_BACKOFF: Duration = Duration::from_millis(10);
    /// The longest backoff.
    pub const MAX_BACKOFF: Duration = Duration::from_secs(24 * 60 * 60);
    /// The backoff before the first retry when none is given.
    pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_secs(1);
    /// The longest backoff when none is given.
    pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(60);
    /// The multiplier when none is given, in thousandths.
    pub const DEFAULT_MULTIPLIER_PERMILLE: u32 = 2000;

    /// The wait before retry `attempt` (1 for the first retry).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let max = self.max_backoff_ms as f64;
        let mut wait = self.initial_backoff_ms as f64;
        for _ in 1..attempt.max(1) {
            wait = (wait * f64::from(self.multiplier_permille) / 1000.0).min(max);
        }
        Duration::from_millis(wait.min(max) as u64)
    }

    /// The attempt that follows a failed run of attempt `attempt`, if the policy allows one.
    pub fn next_attempt(&self, attempt: u32) -> Option<u32> {
        let next = attempt + 1;
        (next < self.max_attempts).then_some(next)
    }
}

impl JobExtras {
    /// The backoffs between the holds of a resident job's item when its worker ended the last
    /// one itself: the job's retry policy's, else 1 s doubling up to 1 min.
    pub fn restart_policy(&self) -> RetryPolicy {
        self.retry.unwrap_or(RetryPolicy {
            max_attempts: RetryPolicy::MAX_ATTEMPTS,
            initial_backoff_ms: RetryPolicy::DEFAULT_INITIAL_BACKOFF.as_millis() as u64,
            max_backoff_ms: RetryPolicy::DEFAULT_MAX_BACKOFF.as_millis() as u64,
            multiplier_permille: RetryPolicy::DEFAULT_MULTIPLIER_PERMILLE,
        })
    }

    /// The node's data.
    pub fn to_yaml(&self) -> String {
        let mut yaml = format!(
            "executionTimeoutSeconds: {}\n",
            self.execution_timeout_seconds
        );
        if self.resident {
            yaml.push_str("resident: true\n");
        }
        if let Some(r) = &self.retry {
            yaml.push_str(&format!(
                "retry:\n  maxAttempts: {}\n  initialBackoffMillis: {}\n  maxBackoffMillis: {}\n  multiplierPermille: {}\n",
                r.max_attempts, r.initial_backoff_ms, r.max_backoff_ms, r.multiplier_permille
            ));
        }
        yaml
    }

    /// Reads the node's data; missing keys take their defaults.
    ///
    /// # Errors
    /// [`LayoutError::Yaml`] when the data is not a YAML mapping of known value types.
    pub fn from_yaml(data: &[u8]) -> Result<JobExtras, LayoutError> {
        if data.iter().all(u8::is_ascii_whitespace) {
            return Ok(JobExtras::default());
        }
        serde_yaml_ng::from_slice(data).map_err(|e| LayoutError::Yaml {
            node: "shardcar",
            message: e.to_string(),
        })
    }
}

/// A failed item's next run, kept in `shardcar/retries/{i}` so that it outlives the sidecar
/// that decided it: the attempt it is, when it is due on the wall clock, and the job parameter
/// the failed run carried when its trigger named one (a `TriggerJob` with a parameter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingRetry {
    pub attempt: u32,
    /// Milliseconds since the Unix epoch.
    #[serde(rename = "dueAt")]
    pub due_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameter: Option<String>,
}

impl PendingRetry {
    /// The node's data: YAML with `attempt`, `dueAt` (milliseconds) and, when the run had
    /// one of its own, `parameter`.
    pub fn to_data(&self) -> Vec<u8> {
        serde_yaml_ng::to_string(self)
            .unwrap_or_else(|_| format!("attempt: {}\ndueAt: {}\n", self.attempt, self.due_ms))
            .into_bytes()
    }

    /// Reads the node's data (`None` when it is not what [`PendingRetry::to_data`] writes).
    pub fn from_data(data: &[u8]) -> Option<PendingRetry> {
        serde_yaml_ng::from_slice(data).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            initial_backoff_ms: 200,
            max_backoff_ms: 1000,
            multiplier_permille: 3000,
        }
    }

    #[test]
    fn round_trip_and_leniency() {
        let extras = JobExtras {
            execution_timeout_seconds: 30,
            retry: None,
            resident: false,
        };
        assert_eq!(extras.to_yaml(), "executionTimeoutSeconds: 30\n");
        assert_eq!(
            JobExtras::from_yaml(extras.to_yaml().as_bytes()).unwrap(),
            extras
        );
        assert_eq!(JobExtras::from_yaml(b"").unwrap(), JobExtras::default());
        assert_eq!(
            JobExtras::from_yaml(b"future: 1\n").unwrap(),
            JobExtras::default()
        );
        assert!(JobExtras::from_yaml(b"executionTimeoutSeconds: many\n").is_err());
        let with_retry = JobExtras {
            execution_timeout_seconds: 0,
            retry: Some(policy()),
            resident: true,
        };
        assert_eq!(
            JobExtras::from_yaml(with_retry.to_yaml().as_bytes()).unwrap(),
            with_retry
        );
    }

    #[test]
    fn backoffs_grow_by_the_multiplier_up_to_the_maximum_and_attempts_run_out() {
        let p = policy();
        let waits: Vec<u64> = (1..=4).map(|a| p.backoff(a).as_millis() as u64).collect();
        assert_eq!(waits, [200, 600, 1000, 1000]);
        assert_eq!(p.next_attempt(0), Some(1), "the first run fails: retry 1");
        assert_eq!(p.next_attempt(3), Some(4));
        assert_eq!(p.next_attempt(4), None, "5 runs in all");
    }

    #[test]
    fn a_pending_retry_reads_back_what_it_writes() {
        let r = PendingRetry {
            attempt: 2,
            due_ms: 1_764_388_800_123,
            parameter: None,
        };
        assert_eq!(
            String::from_utf8(r.to_data()).unwrap(),
            "attempt: 2\ndueAt: 1764388800123\n"
        );
        assert_eq!(PendingRetry::from_data(&r.to_data()), Some(r));
        let odd = PendingRetry {
            parameter: Some("a: b\n'c' #d".into()),
            ..PendingRetry::from_data(b"attempt: 1\ndueAt: 5\n").unwrap()
        };
        assert_eq!(PendingRetry::from_data(&odd.to_data()), Some(odd));
        assert_eq!(PendingRetry::from_data(b"garbage"), None);
    }
}
