//! What a job's page says about failures and holds: its retry policy and error handler
//! ([`failure_section`]), each item's pending retry ([`retry_cell`]) and, for a resident job,
//! who holds each item and any hand-off going on ([`hold_cell`]). Read from the job's nodes
//! (`ops::jobs`), put into words as `ctl job show` puts them (`ops::jobs::shown`).

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use crate::elasticjob::extras::PendingRetry;
use crate::ops::jobs::{shown, Hold, ItemInfo, JobInfo};

use super::html::{badge, esc, local_time};

/// When a pending retry is due, as the page shows times.
fn due(r: &PendingRetry) -> String {
    local_time(UNIX_EPOCH + Duration::from_millis(r.due_ms.max(0) as u64))
}

/// The item's pending retry: `attempt 2 at 2025-11-29 12:00:01 +08:00`; empty without one.
pub fn retry_cell(item: &ItemInfo) -> String {
    match &item.pending_retry {
        Some(r) => format!(
            r#"<span class="attempt">attempt {}</span> at {}"#,
            r.attempt,
            esc(&due(r))
        ),
        None => String::new(),
    }
}

/// Who holds a resident item: its holder; the holder letting go and who it is handed to; or,
/// owned and not held yet, whether its hold starts now or after a restart backoff.
pub fn hold_cell(item: &ItemInfo) -> String {
    match item.hold() {
        Hold::Unowned | Hold::Disabled => String::new(),
        Hold::Held { by } => format!("{} {}", badge("held", "ok"), esc(by)),
        Hold::HandingOff { from, to } => {
            let to = if to.is_empty() {
                "nobody".to_string()
            } else {
                esc(to)
            };
            format!(
                r#"{} {} <span class="muted">→ {to}</span>"#,
                badge("handing off", "warn"),
                esc(from)
            )
        }
        Hold::Waiting {
            restart: Some(r), ..
        } => format!(
            r#"{} <span class="muted">restarts at {}</span>"#,
            badge("not held", "off"),
            esc(&due(r))
        ),
        Hold::Waiting { restart: None, .. } => format!(
            r#"{} <span class="muted">starting on its owner</span>"#,
            badge("not held", "off")
        ),
    }
}

/// The job's retry policy and error handler (with the props it reads, secrets hidden).
pub fn failure_section(out: &mut String, job: &JobInfo) {
    let c = &job.config;
    let (handler, settings) = shown::error_handler(c.job_error_handler_type.as_deref(), &c.props);
    let when = match (&job.extras.retry, handler.as_str()) {
        (_, "IGNORE") => "never reported",
        // A hold is restarted, not retried: every failed hold is reported.
        (Some(_), _) if !job.extras.resident => "reported once a failure's attempts have run out",
        _ => "reported as it happens",
    };
    let _ = write!(
        out,
        r#"<h2>Failures</h2><table id="failures" class="kv"><tbody><tr><th>Retry policy</th><td id="retry-policy">{policy}</td></tr><tr><th>Error handler</th><td><span id="error-handler">{handler}</span> <span class="muted">({when})</span></td></tr>"#,
        policy = esc(&shown::retry_policy(job.extras.retry.as_ref())),
        handler = esc(&handler),
        when = esc(when),
    );
    for (key, value) in settings {
        let _ = write!(
            out,
            r#"<tr><th>handler <code>{}</code></th><td>{}</td></tr>"#,
            esc(&key),
            esc(&value)
        );
    }
    out.push_str("</tbody></table>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elasticjob::config::JobConfiguration;
    use crate::elasticjob::extras::{JobExtras, RetryPolicy};
    use crate::ops::jobs::JobStatus;

    fn job(kind: Option<&str>, retry: Option<RetryPolicy>) -> JobInfo {
        let mut config = JobConfiguration::new("payments", 2);
        config.job_error_handler_type = kind.map(str::to_string);
        config.props = [
            ("webhook.url", "http://alerts.example.com/hook"),
            ("webhook.token", "s3cret"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        JobInfo {
            config,
            job_type: None,
            extras: JobExtras {
                retry,
                ..JobExtras::default()
            },
            status: JobStatus::Ok,
            leader: String::new(),
            servers: Vec::new(),
            instances: Vec::new(),
            items: Vec::new(),
            sharding_necessary: false,
        }
    }

    #[test]
    fn the_failure_section_says_the_policy_and_the_handler_without_secrets() {
        let policy = RetryPolicy {
            max_attempts: 3,
            initial_backoff_ms: 200,
            max_backoff_ms: 60_000,
            multiplier_permille: 2000,
        };
        let mut out = String::new();
        failure_section(&mut out, &job(Some("WEBHOOK"), Some(policy)));
        assert!(out.contains(r#"<td id="retry-policy">3 runs in all (2 retries): the first after 200ms, each next wait ×2, up to 1m</td>"#), "{out}");
        assert!(out.contains(r#"<span id="error-handler">WEBHOOK</span> <span class="muted">(reported once a failure&#39;s attempts have run out)</span>"#), "{out}");
        assert!(
            out.contains("<code>webhook.url</code></th><td>http://alerts.example.com/hook</td>"),
            "{out}"
        );
        assert!(!out.contains("s3cret"), "{out}");
        let mut out = String::new();
        failure_section(&mut out, &job(None, None));
        assert!(
            out.contains("none: a failed item waits for the next fire"),
            "{out}"
        );
        assert!(
            out.contains("LOG (the default)") && out.contains("(reported as it happens)"),
            "{out}"
        );
        assert!(!out.contains("webhook.url"), "LOG reads no prop: {out}");
    }

    #[test]
    fn cells_for_retries_and_holds() {
        let retry = PendingRetry {
            attempt: 2,
            due_ms: 1_764_388_800_123,
            parameter: None,
        };
        let at = esc(&due(&retry));
        let item = |owner: &str, running: Option<&str>, pending: Option<PendingRetry>| ItemInfo {
            owner: owner.into(),
            running: running.is_some(),
            running_instance: running.unwrap_or_default().into(),
            pending_retry: pending,
            ..ItemInfo::default()
        };
        assert_eq!(
            retry_cell(&item("a", None, Some(retry.clone()))),
            format!(r#"<span class="attempt">attempt 2</span> at {at}"#)
        );
        assert_eq!(retry_cell(&item("a", None, None)), "");
        assert!(hold_cell(&item("a", Some("a"), None)).ends_with("held</span> a"));
        let handing = hold_cell(&item("b", Some("a"), None));
        assert!(
            handing.contains("handing off")
                && handing.contains("a <span class=\"muted\">→ b</span>"),
            "{handing}"
        );
        let restarting = hold_cell(&item("a", None, Some(retry)));
        assert!(
            restarting.contains("not held") && restarting.contains(&format!("restarts at {at}")),
            "{restarting}"
        );
        assert!(hold_cell(&item("a", None, None)).contains("starting on its owner"));
        assert_eq!(hold_cell(&item("", None, None)), "");
    }
}
