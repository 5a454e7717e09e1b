//! The configuration form of a job: its fields as text, read into the wire `JobConfig` that
//! `PutJob` validates, and drawn again with the reason next to each field that is wrong.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::elasticjob::config::JobConfiguration;
use crate::proto;

use super::html::{esc, job_url};
use super::pages::fire_times;
use super::session::Viewer;

/// How a field is drawn.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Number,
    Check,
    Strategy,
    Lines,
}

/// The form's fields: name (a `JobConfig` field), label, kind, help.
const FIELDS: &[(&str, &str, Kind, &str)] = &[
    (
        "cron",
        "Cron",
        Kind::Text,
        "Quartz, with seconds: \"0/30 * * * * ?\", \"0 0 2 ? * MON-FRI\". Empty: only when triggered.",
    ),
    (
        "time_zone",
        "Time zone",
        Kind::Text,
        "An IANA name (Asia/Shanghai) or GMT+08:00. Empty: each sidecar's local zone.",
    ),
    (
        "sharding_total_count",
        "Sharding total count",
        Kind::Number,
        "How many items the job is split into.",
    ),
    (
        "sharding_item_parameters",
        "Item parameters",
        Kind::Text,
        "ElasticJob's form: 0=Beijing,1=Shanghai.",
    ),
    (
        "job_parameter",
        "Job parameter",
        Kind::Text,
        "Given to every item.",
    ),
    ("description", "Description", Kind::Text, ""),
    (
        "sharding_strategy",
        "Sharding strategy",
        Kind::Strategy,
        "How the leader spreads items over instances.",
    ),
    (
        "failover",
        "Failover",
        Kind::Check,
        "Items of a crashed instance run again elsewhere at once.",
    ),
    (
        "misfire",
        "Misfire",
        Kind::Check,
        "A fire missed while busy runs once when the instance is free.",
    ),
    (
        "monitor_execution",
        "Monitor execution",
        Kind::Check,
        "Record running items in ZooKeeper (needed for failover and misfire).",
    ),
    (
        "max_time_diff_seconds",
        "Max time diff (s)",
        Kind::Number,
        "-1: off.",
    ),
    (
        "reconcile_interval_minutes",
        "Reconcile interval (min)",
        Kind::Number,
        "",
    ),
    (
        "execution_timeout_seconds",
        "Execution timeout (s)",
        Kind::Number,
        "0: none. A run still going then is revoked.",
    ),
    (
        "retry_max_attempts",
        "Retry: attempts",
        Kind::Number,
        "Runs of a failed item in all, the first included (3: two retries). 0 or 1: none.",
    ),
    (
        "retry_initial_backoff",
        "Retry: first wait",
        Kind::Text,
        "Before the first retry: 200ms, 1s. Empty: 1s.",
    ),
    (
        "retry_max_backoff",
        "Retry: longest wait",
        Kind::Text,
        "Empty: 1m.",
    ),
    (
        "retry_multiplier",
        "Retry: multiplier",
        Kind::Text,
        "Each wait is the one before times this. Empty: 2.",
    ),
    (
        "job_error_handler_type",
        "Error handler",
        Kind::Text,
        "How a failure that stands is reported: LOG (empty), IGNORE, THROW, EMAIL, WECHAT, DINGTALK or WEBHOOK, with its settings in Properties (dingtalk.webhook, email.host, webhook.url, …).",
    ),
    (
        "resident",
        "Resident",
        Kind::Check,
        "Each item is held by its owner's worker until it moves (no cron, failover off, no execution timeout).",
    ),
    (
        "disabled",
        "Disabled at start",
        Kind::Check,
        "ElasticJob's disabled flag: new servers start disabled.",
    ),
    (
        "props",
        "Properties",
        Kind::Lines,
        "One key=value per line (script.command.line, http.uri, …).",
    ),
];

/// The form's values as typed (a checked box is `on`, an unchecked one absent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigForm {
    values: BTreeMap<String, String>,
}

/// Field → why it is wrong; `_` for what belongs to no field.
pub type FieldErrors = BTreeMap<String, String>;

const STRATEGIES: &[(proto::ShardingStrategy, &str)] = &[
    (proto::ShardingStrategy::AvgAllocation, "AVG_ALLOCATION"),
    (proto::ShardingStrategy::Odevity, "ODEVITY"),
    (proto::ShardingStrategy::RoundRobin, "ROUND_ROBIN"),
];

impl ConfigForm {
    /// The form filled with a job's configuration.
    pub fn from_config(c: &proto::JobConfig) -> ConfigForm {
        let mut v = BTreeMap::new();
        let mut put = |k: &str, value: String| {
            v.insert(k.to_string(), value);
        };
        put("cron", c.cron.clone());
        put("time_zone", c.time_zone.clone());
        put("sharding_total_count", c.sharding_total_count.to_string());
        let params: Vec<String> = c
            .sharding_item_parameters
            .iter()
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .map(|(i, p)| format!("{i}={p}"))
            .collect();
        put("sharding_item_parameters", params.join(","));
        put("job_parameter", c.job_parameter.clone());
        put("description", c.description.clone());
        let strategy = STRATEGIES
            .iter()
            .find(|(s, _)| *s as i32 == c.sharding_strategy)
            .map_or("AVG_ALLOCATION", |(_, n)| n);
        put("sharding_strategy", strategy.to_string());
        for (k, on) in [
            ("failover", c.failover),
            ("misfire", c.misfire.unwrap_or(true)),
            ("monitor_execution", c.monitor_execution.unwrap_or(true)),
            ("disabled", c.disabled),
            ("resident", c.resident),
        ] {
            if on {
                put(k, "on".into());
            }
        }
        put(
            "max_time_diff_seconds",
            c.max_time_diff_seconds.unwrap_or(-1).to_string(),
        );
        put(
            "reconcile_interval_minutes",
            c.reconcile_interval_minutes.unwrap_or(10).to_string(),
        );
        put(
            "execution_timeout_seconds",
            c.execution_timeout_seconds.to_string(),
        );
        let duration = |d: &Option<prost_types::Duration>| {
            d.and_then(|d| std::time::Duration::try_from(d).ok())
                .map(|d| humantime::format_duration(d).to_string())
                .unwrap_or_default()
        };
        let retry = c.retry.unwrap_or_default();
        put("retry_max_attempts", retry.max_attempts.to_string());
        put("retry_initial_backoff", duration(&retry.initial_backoff));
        put("retry_max_backoff", duration(&retry.max_backoff));
        let multiplier = if retry.multiplier == 0.0 {
            String::new()
        } else {
            retry.multiplier.to_string()
        };
        put("retry_multiplier", multiplier);
        put("job_error_handler_type", c.job_error_handler_type.clone());
        let props: Vec<String> = c
            .props
            .iter()
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        put("props", props.join("\n"));
        ConfigForm { values: v }
    }

    /// The form as posted (fields that are not the form's are ignored).
    pub fn from_fields(fields: &[(String, String)]) -> ConfigForm {
        let values = fields
            .iter()
            .filter(|(k, _)| FIELDS.iter().any(|(name, ..)| name == k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        ConfigForm { values }
    }

    /// The posted fields, to carry them through a confirmation page.
    pub fn fields(&self) -> Vec<(String, String)> {
        self.values
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn text(&self, name: &str) -> &str {
        self.values.get(name).map_or("", String::as_str)
    }

    fn checked(&self, name: &str) -> bool {
        self.values
            .get(name)
            .is_some_and(|v| v == "on" || v == "true")
    }

    /// The wire config of job `job_name` (of `job_type`, which the form does not change), or
    /// the fields that are not even of the right form (a number, `key=value`).
    ///
    /// # Errors
    /// Every field that cannot be read, with the reason.
    pub fn to_proto(&self, job_name: &str, job_type: i32) -> Result<proto::JobConfig, FieldErrors> {
        let mut errors = FieldErrors::new();
        let mut number = |name: &str| -> Option<i64> {
            let text = self.text(name).trim();
            match text.parse::<i64>() {
                Ok(n) => Some(n),
                Err(_) => {
                    errors.insert(name.to_string(), format!("{text:?} is not a whole number"));
                    None
                }
            }
        };
        let total = number("sharding_total_count");
        let max_diff = number("max_time_diff_seconds");
        let reconcile = number("reconcile_interval_minutes");
        let timeout = number("execution_timeout_seconds");
        let in_i32 = |n: Option<i64>, name: &str, errors: &mut FieldErrors| {
            n.and_then(|n| match i32::try_from(n) {
                Ok(v) => Some(v),
                Err(_) => {
                    errors.insert(name.to_string(), format!("{n} is out of range"));
                    None
                }
            })
        };
        let total = in_i32(total, "sharding_total_count", &mut errors);
        let max_diff = in_i32(max_diff, "max_time_diff_seconds", &mut errors);
        let reconcile = in_i32(reconcile, "reconcile_interval_minutes", &mut errors);
        let timeout = timeout.and_then(|n| match u32::try_from(n) {
            Ok(v) => Some(v),
            Err(_) => {
                errors.insert(
                    "execution_timeout_seconds".into(),
                    format!("{n} must be 0 (none) or a positive number of seconds"),
                );
                None
            }
        });
        // ElasticJob's own reading of `0=a,1=b`.
        let mut parsed = JobConfiguration::new(job_name, total.unwrap_or(1).max(1));
        parsed.sharding_item_parameters = self.text("sharding_item_parameters").trim().to_string();
        let params = match parsed.item_parameters() {
            Ok(p) => p,
            Err(e) => {
                errors.insert("sharding_item_parameters".into(), e.to_string());
                BTreeMap::new()
            }
        };
        let mut props = std::collections::HashMap::new();
        for (n, line) in self.text("props").lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            match line.split_once('=') {
                Some((k, v)) => {
                    props.insert(k.trim().to_string(), v.trim().to_string());
                }
                None => {
                    errors.insert(
                        "props".into(),
                        format!("line {} ({line:?}) is not key=value", n + 1),
                    );
                }
            }
        }
        let retry = self.retry(&mut errors);
        let strategy = match STRATEGIES
            .iter()
            .find(|(_, n)| *n == self.text("sharding_strategy"))
        {
            Some((s, _)) => *s as i32,
            None => {
                errors.insert(
                    "sharding_strategy".into(),
                    "choose AVG_ALLOCATION, ODEVITY or ROUND_ROBIN".into(),
                );
                0
            }
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(proto::JobConfig {
            job_name: job_name.to_string(),
            cron: self.text("cron").trim().to_string(),
            time_zone: self.text("time_zone").trim().to_string(),
            sharding_total_count: total.unwrap_or_default(),
            sharding_item_parameters: params.into_iter().collect(),
            job_parameter: self.text("job_parameter").to_string(),
            failover: self.checked("failover"),
            misfire: Some(self.checked("misfire")),
            monitor_execution: Some(self.checked("monitor_execution")),
            sharding_strategy: strategy,
            max_time_diff_seconds: max_diff,
            reconcile_interval_minutes: reconcile,
            description: self.text("description").to_string(),
            disabled: self.checked("disabled"),
            props,
            execution_timeout_seconds: timeout.unwrap_or_default(),
            job_type,
            retry,
            job_error_handler_type: self.text("job_error_handler_type").trim().to_string(),
            resident: self.checked("resident"),
        })
    }

    /// The retry fields as a wire policy (`None` when no attempts are asked for), or their
    /// mistakes in `errors`.
    fn retry(&self, errors: &mut FieldErrors) -> Option<proto::RetryPolicy> {
        let text = self.text("retry_max_attempts").trim();
        let max_attempts = match text {
            "" => 0,
            t => t.parse::<u32>().unwrap_or_else(|_| {
                errors.insert(
                    "retry_max_attempts".into(),
                    format!("{t:?} is not a whole number of runs"),
                );
                0
            }),
        };
        let mut duration = |name: &str| {
            let text = self.text(name).trim();
            if text.is_empty() {
                return None;
            }
            match crate::config::parse_duration(text)
                .ok()
                .and_then(|d| prost_types::Duration::try_from(d).ok())
            {
                Some(d) => Some(d),
                None => {
                    errors.insert(
                        name.into(),
                        format!("{text:?} is not a duration like 200ms or 1s"),
                    );
                    None
                }
            }
        };
        let initial_backoff = duration("retry_initial_backoff");
        let max_backoff = duration("retry_max_backoff");
        let multiplier = match self.text("retry_multiplier").trim() {
            "" => 0.0,
            t => t.parse::<f64>().unwrap_or_else(|_| {
                errors.insert("retry_multiplier".into(), format!("{t:?} is not a number"));
                0.0
            }),
        };
        (max_attempts > 1).then_some(proto::RetryPolicy {
            max_attempts,
            initial_backoff,
            max_backoff,
            multiplier,
        })
    }

    /// The form, with `errors` shown next to their fields.
    pub fn render(&self, job: &str, viewer: &Viewer, errors: &FieldErrors) -> String {
        let url = format!("{}/edit", job_url(job));
        let mut out = String::new();
        if let Some(general) = errors.get("_") {
            let _ = write!(
                out,
                r#"<p class="error" id="error-form">{}</p>"#,
                esc(general)
            );
        }
        let _ = write!(
            out,
            r#"<form method="post" action="{url}" id="config-form" class="config" data-confirm="{question}" novalidate>
<input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="confirmed" value="">"#,
            url = esc(&url),
            question = esc(&format!(
                "Save the new configuration of job {job}? Every sidecar and JVM of the job picks it up."
            )),
            csrf = esc(&viewer.csrf),
        );
        for (name, label, kind, help) in FIELDS {
            let error = errors.get(*name);
            let value = esc(self.text(name));
            let input = match kind {
                Kind::Text if *name == "cron" => format!(
                    r#"<input type="text" id="{name}" name="{name}" value="{value}" data-cron-preview="cron-preview" data-zone-field="time_zone" autocomplete="off" spellcheck="false">"#
                ),
                Kind::Text => format!(
                    r#"<input type="text" id="{name}" name="{name}" value="{value}" autocomplete="off">"#
                ),
                Kind::Number => format!(
                    r#"<input type="text" inputmode="numeric" id="{name}" name="{name}" value="{value}">"#
                ),
                Kind::Check => format!(
                    r#"<input type="checkbox" id="{name}" name="{name}"{}>"#,
                    if self.checked(name) { " checked" } else { "" }
                ),
                Kind::Strategy => {
                    let mut select = format!(r#"<select id="{name}" name="{name}">"#);
                    for (_, s) in STRATEGIES {
                        let selected = if self.text(name) == *s {
                            " selected"
                        } else {
                            ""
                        };
                        let _ = write!(select, r#"<option value="{s}"{selected}>{s}</option>"#);
                    }
                    select.push_str("</select>");
                    select
                }
                Kind::Lines => format!(
                    r#"<textarea id="{name}" name="{name}" rows="3" spellcheck="false">{value}</textarea>"#
                ),
            };
            let _ = write!(
                out,
                r#"<div class="field{invalid}" id="field-{name}"><label for="{name}">{label}</label>{input}{error}{help}</div>"#,
                invalid = if error.is_some() { " invalid" } else { "" },
                label = esc(label),
                error = error
                    .map(|e| format!(r#"<p class="field-error" id="error-{name}">{}</p>"#, esc(e)))
                    .unwrap_or_default(),
                help = if help.is_empty() {
                    String::new()
                } else {
                    format!(r#"<p class="help">{}</p>"#, esc(help))
                },
            );
            if *name == "time_zone" {
                let _ = write!(
                    out,
                    r#"<div class="field preview"><label>Next fire times</label><div id="cron-preview" aria-live="polite">{}</div></div>"#,
                    fire_times(
                        self.text("cron"),
                        self.text("time_zone"),
                        "cron-preview-times"
                    )
                );
            }
        }
        let _ = write!(
            out,
            r#"<div class="buttons"><button type="submit" class="primary" id="save">Save</button> <a href="{}">Cancel</a></div></form>"#,
            esc(&job_url(job))
        );
        out
    }
}

/// Where the form shows an Admin validation error, and what it says there: at the field it
/// names (`config.cron` → `cron`, `config.retry.max_attempts` → `retry_max_attempts`), a prop's
/// at the properties with the prop's key in front (`config.props["email.host"]` → `props`,
/// `email.host: ...`), anything else at the top of the form (`_`).
pub fn field_error(admin_field: &str, message: &str) -> (String, String) {
    let field = admin_field.strip_prefix("config.").unwrap_or(admin_field);
    if let Some(key) = field.strip_prefix("props") {
        let key = key.trim_start_matches("[\"").trim_end_matches("\"]");
        let message = if key.is_empty() {
            message.to_string()
        } else {
            format!("{key}: {message}")
        };
        return ("props".to_string(), message);
    }
    let field = field.replace('.', "_");
    if FIELDS.iter().any(|(name, ..)| *name == field) {
        (field, message.to_string())
    } else {
        ("_".to_string(), message.to_string())
    }
}

#[cfg(test)]
mod tests;
