//! Job files for `shardcar ctl job put FILE` (and the `[[jobs]]` of the sidecar's settings
//! file): YAML or JSON (JSON is YAML), with the wire
//! `JobConfig`'s field names (`sharding_total_count`) or ElasticJob's (`shardingTotalCount`), so
//! a `config` node copied from ZooKeeper or the ElasticJob console can be put as it is.
//! ElasticJob keys shardcar does not model are ignored (and kept in the registry); any other
//! unknown key is an error, so a typo never passes silently.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::api::convert;
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::elasticjob::strategy::StrategyType;
use crate::elasticjob::typed::JobType;
use crate::proto;

/// ElasticJob `config` keys that shardcar accepts in a job file but does not set: `PutJob`
/// keeps the values already in the registry.
const ELASTICJOB_ONLY: &[&str] = &[
    "overwrite",
    "staticSharding",
    "jobExecutorServiceHandlerType",
    "jobExecutorThreadPoolSizeProviderType",
    "jobListenerTypes",
    "jobExtraConfigurations",
    "label",
];

/// A job file that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JobFileError {
    #[error("{0} is not YAML or JSON job configuration: {1}")]
    Syntax(String, String),
    #[error("{file}: unknown key {key:?} (see `shardcar ctl job put --help` for the keys)")]
    UnknownKey { file: String, key: String },
    #[error("{file}: {key}: {message}")]
    Value {
        file: String,
        key: &'static str,
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ItemParameters {
    Map(BTreeMap<i32, serde_yaml_ng::Value>),
    /// ElasticJob's `0=a,1=b`.
    Text(String),
}

#[derive(Deserialize)]
struct RawJob {
    #[serde(alias = "jobName")]
    job_name: Option<String>,
    cron: Option<String>,
    #[serde(alias = "timeZone")]
    time_zone: Option<String>,
    #[serde(alias = "shardingTotalCount")]
    sharding_total_count: Option<i32>,
    #[serde(alias = "shardingItemParameters")]
    sharding_item_parameters: Option<ItemParameters>,
    #[serde(alias = "jobParameter")]
    job_parameter: Option<String>,
    failover: Option<bool>,
    misfire: Option<bool>,
    #[serde(alias = "monitorExecution")]
    monitor_execution: Option<bool>,
    #[serde(alias = "shardingStrategy", alias = "jobShardingStrategyType")]
    sharding_strategy: Option<String>,
    #[serde(alias = "maxTimeDiffSeconds")]
    max_time_diff_seconds: Option<i32>,
    #[serde(alias = "reconcileIntervalMinutes")]
    reconcile_interval_minutes: Option<i32>,
    description: Option<String>,
    disabled: Option<bool>,
    props: Option<BTreeMap<String, serde_yaml_ng::Value>>,
    #[serde(alias = "executionTimeoutSeconds")]
    execution_timeout_seconds: Option<u32>,
    /// SCRIPT or HTTP: the sidecars run the job themselves.
    #[serde(rename = "type", alias = "job_type", alias = "jobType")]
    job_type: Option<String>,
    #[serde(alias = "jobErrorHandlerType")]
    job_error_handler_type: Option<String>,
    retry: Option<RawRetry>,
    /// Items held continuously by their owners' workers (no cron).
    resident: Option<bool>,
    #[serde(flatten)]
    other: BTreeMap<String, serde_yaml_ng::Value>,
}

/// `retry:`: `max_attempts` (runs in all), and the backoffs as durations (`200ms`, `1s`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    #[serde(alias = "maxAttempts")]
    max_attempts: u32,
    #[serde(alias = "initialBackoff")]
    initial_backoff: Option<String>,
    #[serde(alias = "maxBackoff")]
    max_backoff: Option<String>,
    multiplier: Option<f64>,
}

fn scalar(v: &serde_yaml_ng::Value) -> Option<String> {
    match v {
        serde_yaml_ng::Value::String(s) => Some(s.clone()),
        serde_yaml_ng::Value::Number(n) => Some(n.to_string()),
        serde_yaml_ng::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Parses a job file's text (`file` names it in messages).
///
/// # Errors
/// Syntax errors, unknown keys, and values of the wrong kind, each naming the key. The values
/// themselves (cron, counts...) are checked by the sidecar, which names the field.
pub fn parse(file: &str, text: &str) -> Result<proto::JobConfig, JobFileError> {
    let raw: RawJob = serde_yaml_ng::from_str(text)
        .map_err(|e| JobFileError::Syntax(file.to_string(), e.to_string()))?;
    from_raw(file, raw)
}

/// [`parse`] for a job already read as a value (a `[[jobs]]` table of the sidecar's settings
/// file); `place` names it in messages.
///
/// # Errors
/// As [`parse`].
pub fn from_value(
    place: &str,
    value: serde_yaml_ng::Value,
) -> Result<proto::JobConfig, JobFileError> {
    let raw: RawJob = serde_yaml_ng::from_value(value)
        .map_err(|e| JobFileError::Syntax(place.to_string(), e.to_string()))?;
    from_raw(place, raw)
}

/// A job the sidecar's settings file declares (`[[jobs]]`), read and validated as `PutJob`
/// would: created at start when absent, its config replaced when `config.overwrite` is set
/// (`overwrite = true` in its table; ElasticJob's rule).
#[derive(Debug, Clone)]
pub struct DeclaredJob {
    pub config: JobConfiguration,
    pub extras: JobExtras,
    /// SCRIPT or HTTP: a job the sidecars run themselves; `None`: one run by workers.
    pub job_type: Option<JobType>,
}

/// Reads a `[[jobs]]` table of the sidecar's settings file (its `overwrite` taken out) with a
/// job file's keys, and validates it as `PutJob` would; `place` names it in messages.
///
/// # Errors
/// What is wrong with it, for the settings to name at `place` (the message does not repeat it).
pub fn declared(
    place: &str,
    table: serde_yaml_ng::Value,
    overwrite: bool,
) -> Result<DeclaredJob, String> {
    let wire = from_value(place, table).map_err(|e| {
        let message = e.to_string();
        message
            .strip_prefix(&format!("{place}: "))
            .unwrap_or(&message)
            .to_string()
    })?;
    let invalid = |e: crate::coordination::CoordError| {
        e.to_string().trim_start_matches("invalid ").to_string()
    };
    let (config, extras) =
        convert::from_proto(&wire.job_name, &wire, overwrite).map_err(invalid)?;
    let job_type = convert::job_type_from_proto(&wire).map_err(invalid)?;
    Ok(DeclaredJob {
        config,
        extras,
        job_type,
    })
}

fn from_raw(file: &str, raw: RawJob) -> Result<proto::JobConfig, JobFileError> {
    if let Some(key) = raw
        .other
        .keys()
        .find(|k| !ELASTICJOB_ONLY.contains(&k.as_str()))
    {
        return Err(JobFileError::UnknownKey {
            file: file.to_string(),
            key: key.clone(),
        });
    }
    let value_error = |key: &'static str, message: String| JobFileError::Value {
        file: file.to_string(),
        key,
        message,
    };
    let job_name = raw
        .job_name
        .filter(|n| !n.is_empty())
        .ok_or_else(|| value_error("job_name", "is required".into()))?;
    let sharding_total_count = raw
        .sharding_total_count
        .ok_or_else(|| value_error("sharding_total_count", "is required".into()))?;
    let sharding_item_parameters = match raw.sharding_item_parameters {
        None => Default::default(),
        Some(ItemParameters::Map(map)) => map
            .into_iter()
            .map(|(i, v)| {
                scalar(&v).map(|s| (i, s)).ok_or_else(|| {
                    value_error(
                        "sharding_item_parameters",
                        format!("item {i} needs a text value"),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
        Some(ItemParameters::Text(text)) => text
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|entry| {
                let (i, v) = entry.split_once('=').ok_or_else(|| {
                    value_error(
                        "sharding_item_parameters",
                        format!("{entry:?} is not item=text"),
                    )
                })?;
                let i = i.trim().parse::<i32>().map_err(|_| {
                    value_error(
                        "sharding_item_parameters",
                        format!("{entry:?} does not start with an item number"),
                    )
                })?;
                Ok((i, v.trim().to_string()))
            })
            .collect::<Result<_, _>>()?,
    };
    let sharding_strategy = match raw.sharding_strategy.as_deref().map(str::trim) {
        None | Some("") => proto::ShardingStrategy::AvgAllocation,
        Some(name) => {
            let upper = name.to_ascii_uppercase();
            let bare = upper.trim_start_matches("SHARDING_STRATEGY_");
            let strategy = StrategyType::parse(bare).map_err(|_| {
                value_error(
                    "sharding_strategy",
                    format!("{name:?} is not AVG_ALLOCATION, ODEVITY or ROUND_ROBIN"),
                )
            })?;
            convert::strategy_to_proto(strategy)
        }
    };
    let props = raw
        .props
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| {
            scalar(&v)
                .map(|s| (k.clone(), s))
                .ok_or_else(|| value_error("props", format!("{k} needs a text value")))
        })
        .collect::<Result<_, _>>()?;
    let job_type = match raw.job_type.as_deref().map(str::trim) {
        None | Some("") => proto::JobType::Unspecified,
        Some(name) => match name.to_ascii_uppercase().trim_start_matches("JOB_TYPE_") {
            "SCRIPT" => proto::JobType::Script,
            "HTTP" => proto::JobType::Http,
            _ => {
                return Err(value_error(
                    "type",
                    format!(
                        "{name:?} is not SCRIPT or HTTP (leave it out for a job run by workers)"
                    ),
                ))
            }
        },
    };
    let duration = |key: &'static str, text: Option<String>| {
        text.map(|t| {
            crate::config::parse_duration(&t)
                .ok()
                .and_then(|d| prost_types::Duration::try_from(d).ok())
                .ok_or_else(|| {
                    value_error(key, format!("{t:?} is not a duration like 200ms or 1s"))
                })
        })
        .transpose()
    };
    let retry = match raw.retry {
        None => None,
        Some(r) => Some(proto::RetryPolicy {
            max_attempts: r.max_attempts,
            initial_backoff: duration("retry.initial_backoff", r.initial_backoff)?,
            max_backoff: duration("retry.max_backoff", r.max_backoff)?,
            multiplier: r.multiplier.unwrap_or(0.0),
        }),
    };
    Ok(proto::JobConfig {
        job_name,
        cron: raw.cron.unwrap_or_default(),
        time_zone: raw.time_zone.unwrap_or_default(),
        sharding_total_count,
        sharding_item_parameters,
        job_parameter: raw.job_parameter.unwrap_or_default(),
        failover: raw.failover.unwrap_or(false),
        misfire: raw.misfire,
        monitor_execution: raw.monitor_execution,
        sharding_strategy: sharding_strategy as i32,
        max_time_diff_seconds: raw.max_time_diff_seconds,
        reconcile_interval_minutes: raw.reconcile_interval_minutes,
        description: raw.description.unwrap_or_default(),
        disabled: raw.disabled.unwrap_or(false),
        props,
        execution_timeout_seconds: raw.execution_timeout_seconds.unwrap_or(0),
        job_type: job_type as i32,
        retry,
        job_error_handler_type: raw.job_error_handler_type.unwrap_or_default(),
        resident: raw.resident.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_in_yaml() {
        let c = parse(
            "job.yaml",
            "job_name: orders\ncron: 0/5 * * * * ?\nsharding_total_count: 3\nsharding_item_parameters: {0: a, 2: 7}\nsharding_strategy: round_robin\nmisfire: false\nprops: {batch: 100}\nexecution_timeout_seconds: 30\n",
        )
        .unwrap();
        assert_eq!(c.job_name, "orders");
        assert_eq!(c.sharding_total_count, 3);
        assert_eq!(c.sharding_item_parameters[&2], "7");
        assert_eq!(
            c.sharding_strategy,
            proto::ShardingStrategy::RoundRobin as i32
        );
        assert_eq!(c.misfire, Some(false));
        assert_eq!(c.monitor_execution, None);
        assert_eq!(c.props["batch"], "100");
        assert_eq!(c.execution_timeout_seconds, 30);
    }

    #[test]
    fn elasticjob_config_node_and_json() {
        let java = "cron: 0/5 * * * * ?\ndescription: ''\ndisabled: false\nfailover: true\njobErrorHandlerType: LOG\njobName: demoJob\njobParameter: ''\nmaxTimeDiffSeconds: -1\nmisfire: true\nmonitorExecution: true\noverwrite: false\nreconcileIntervalMinutes: 10\nshardingItemParameters: 0=Beijing,1=Shanghai\nshardingTotalCount: 2\nstaticSharding: false\n";
        let c = parse("config", java).unwrap();
        assert_eq!(c.job_name, "demoJob");
        assert!(c.failover);
        assert_eq!(c.sharding_item_parameters[&1], "Shanghai");
        assert_eq!(c.max_time_diff_seconds, Some(-1));
        let j = parse(
            "job.json",
            r#"{"jobName": "j", "shardingTotalCount": 1, "cron": ""}"#,
        )
        .unwrap();
        assert_eq!(j.job_name, "j");
        assert_eq!(j.cron, "");
    }

    #[test]
    fn typed_jobs() {
        for (text, want) in [
            ("type: SCRIPT", proto::JobType::Script),
            ("type: http", proto::JobType::Http),
            ("jobType: JOB_TYPE_SCRIPT", proto::JobType::Script),
            ("description: plain", proto::JobType::Unspecified),
        ] {
            let c = parse(
                "f",
                &format!("job_name: j\nsharding_total_count: 1\n{text}\n"),
            )
            .unwrap();
            assert_eq!(c.job_type, want as i32, "{text}");
        }
        assert_eq!(
            parse(
                "f",
                "job_name: j\nsharding_total_count: 1\ntype: DATAFLOW\n"
            )
            .unwrap_err()
            .to_string(),
            "f: type: \"DATAFLOW\" is not SCRIPT or HTTP (leave it out for a job run by workers)"
        );
    }

    #[test]
    fn mistakes_are_named() {
        assert_eq!(
            parse("f", "job_name: j\nsharding_total_cont: 3\n").unwrap_err(),
            JobFileError::UnknownKey {
                file: "f".into(),
                key: "sharding_total_cont".into()
            }
        );
        assert_eq!(
            parse("f", "job_name: j\n").unwrap_err().to_string(),
            "f: sharding_total_count: is required"
        );
        assert_eq!(
            parse("f", "sharding_total_count: 1\n")
                .unwrap_err()
                .to_string(),
            "f: job_name: is required"
        );
        assert!(parse(
            "f",
            "job_name: j\nsharding_total_count: 1\nsharding_strategy: RANDOM\n"
        )
        .unwrap_err()
        .to_string()
        .contains("sharding_strategy"));
        assert!(matches!(
            parse("f", "[1, 2").unwrap_err(),
            JobFileError::Syntax(..)
        ));
        assert!(parse(
            "f",
            "job_name: j\nsharding_total_count: 1\nshardingItemParameters: 0a\n"
        )
        .unwrap_err()
        .to_string()
        .contains("sharding_item_parameters"));
    }
}
