//! Conversion and validation between the wire `JobConfig` and ElasticJob's
//! [`JobConfiguration`]. Unset optional fields take ElasticJob's builder defaults, so a
//! config built by a Python worker means what the same config built in Java means.

use std::collections::BTreeMap;

use crate::coordination::CoordError;
use crate::elasticjob::config::{format_item_parameters, JobConfiguration};
use std::time::Duration;

use crate::elasticjob::extras::{JobExtras, RetryPolicy};
use crate::elasticjob::paths::validate_job_name;
use crate::elasticjob::strategy::StrategyType;
use crate::elasticjob::typed::JobType;
use crate::proto;
use crate::schedule::{validate_time_zone, CronSchedule};

pub use crate::elasticjob::config::MAX_SHARDING_TOTAL_COUNT;

fn invalid(field: &str, message: impl Into<String>) -> CoordError {
    CoordError::InvalidArgument {
        field: field.to_string(),
        message: message.into(),
    }
}

/// Checks a job name.
///
/// # Errors
/// `InvalidArgument` naming `field`.
pub fn check_job_name(field: &str, name: &str) -> Result<(), CoordError> {
    validate_job_name(name).map_err(|m| invalid(field, m))
}

/// Validates a wire config for job `job_name` and converts it.
///
/// # Errors
/// `InvalidArgument` naming the first bad field (`config.cron`, `config.sharding_total_count`, ...).
pub fn from_proto(
    job_name: &str,
    c: &proto::JobConfig,
    overwrite: bool,
) -> Result<(JobConfiguration, JobExtras), CoordError> {
    if !c.job_name.is_empty() && c.job_name != job_name {
        return Err(invalid(
            "config.job_name",
            format!("'{}' differs from the subscribed job '{job_name}'; leave it empty or make them equal", c.job_name),
        ));
    }
    let total = c.sharding_total_count;
    if !(1..=MAX_SHARDING_TOTAL_COUNT).contains(&total) {
        return Err(invalid(
            "config.sharding_total_count",
            format!("must be between 1 and {MAX_SHARDING_TOTAL_COUNT}, got {total}"),
        ));
    }
    if !c.time_zone.is_empty() {
        validate_time_zone(&c.time_zone).map_err(|e| invalid("config.time_zone", e.to_string()))?;
    }
    if !c.cron.trim().is_empty() {
        CronSchedule::parse(&c.cron, &c.time_zone)
            .map_err(|e| invalid("config.cron", e.to_string()))?;
    }
    let mut params = BTreeMap::new();
    for (item, value) in &c.sharding_item_parameters {
        if !(0..total).contains(item) {
            return Err(invalid(
                "config.sharding_item_parameters",
                format!("item {item} is outside 0..{total} (sharding_total_count is {total})"),
            ));
        }
        if value.is_empty() || value.contains([',', '=']) || value.trim() != value {
            return Err(invalid(
                "config.sharding_item_parameters",
                format!(
                    "the parameter of item {item} ({value:?}) must be non-empty, without ',' or '=' and without surrounding spaces (ElasticJob stores them as '0=a,1=b')"
                ),
            ));
        }
        params.insert(*item, value.clone());
    }
    let strategy = match strategy_from_proto(c.sharding_strategy) {
        // ElasticJob's default is written as an absent `jobShardingStrategyType`.
        Some(StrategyType::AvgAllocation) => None,
        Some(other) => Some(other),
        None => {
            return Err(invalid(
                "config.sharding_strategy",
                format!(
                    "{} is not a known strategy (AVG_ALLOCATION, ODEVITY, ROUND_ROBIN)",
                    c.sharding_strategy
                ),
            ))
        }
    };
    if let Some(v) = c.max_time_diff_seconds.filter(|v| *v < -1) {
        return Err(invalid(
            "config.max_time_diff_seconds",
            format!("must be -1 (off) or at least 0, got {v}"),
        ));
    }
    if let Some(key) = c.props.keys().find(|k| k.trim().is_empty()) {
        return Err(invalid(
            "config.props",
            format!("property names must not be empty (got {key:?})"),
        ));
    }
    let mut props = BTreeMap::new();
    for (k, v) in &c.props {
        props.insert(k.clone(), v.clone());
    }
    if let Some(job_type) = job_type_from_proto(c)? {
        crate::elasticjob::typed::action(job_type, &props)
            .map_err(|e| invalid("config.props", e.to_string()))?;
    }
    let mut config = JobConfiguration::new(job_name, total);
    config.cron = Some(c.cron.trim().to_string()).filter(|s| !s.is_empty());
    config.time_zone = Some(c.time_zone.clone()).filter(|s| !s.is_empty());
    config.sharding_item_parameters = format_item_parameters(&params);
    config.job_parameter = c.job_parameter.clone();
    config.failover = c.failover;
    config.misfire = c.misfire.unwrap_or(true);
    config.monitor_execution = c.monitor_execution.unwrap_or(true);
    config.job_sharding_strategy_type = strategy.map(|s| s.as_str().to_string());
    config.max_time_diff_seconds = c.max_time_diff_seconds.unwrap_or(-1);
    config.reconcile_interval_minutes = c.reconcile_interval_minutes.unwrap_or(10);
    config.description = c.description.clone();
    config.disabled = c.disabled;
    config.props = c
        .props
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    config.overwrite = overwrite;
    config.job_error_handler_type = error_handler_from_proto(&c.job_error_handler_type, &props)?;
    let extras = JobExtras {
        execution_timeout_seconds: c.execution_timeout_seconds,
        retry: c
            .retry
            .as_ref()
            .map(retry_from_proto)
            .transpose()?
            .flatten(),
        resident: c.resident,
    };
    if c.resident {
        check_resident(c)?;
    }
    Ok((config, extras))
}

/// What a resident job cannot have: its items are held, not fired, and move only with the
/// sharding, each hold guarded by its `running` node.
fn check_resident(c: &proto::JobConfig) -> Result<(), CoordError> {
    let refuse = |field: &str, what: &str| {
        Err(invalid(
            field,
            format!("a resident job {what} (or make the job not resident)"),
        ))
    };
    if !c.cron.trim().is_empty() {
        return refuse(
            "config.cron",
            "has no cron: its items are held, not fired; leave the cron empty",
        );
    }
    if c.failover {
        return refuse(
            "config.failover",
            "moves its items with the sharding, not by failover; turn failover off",
        );
    }
    if c.monitor_execution == Some(false) {
        return refuse(
            "config.monitor_execution",
            "needs monitorExecution: each hold is guarded by the item's running node; turn it on",
        );
    }
    if c.execution_timeout_seconds != 0 {
        return refuse(
            "config.execution_timeout_seconds",
            "holds its items until they are revoked; leave the execution timeout at 0",
        );
    }
    if c.job_type != proto::JobType::Unspecified as i32 {
        return refuse(
            "config.job_type",
            "is held by workers; SCRIPT and HTTP jobs cannot be resident",
        );
    }
    Ok(())
}

/// `jobErrorHandlerType` as ElasticJob writes it (empty: unset, LOG), checked with the props
/// its handler reads (`ops::alerts::ErrorHandler::parse`).
fn error_handler_from_proto(
    kind: &str,
    props: &BTreeMap<String, String>,
) -> Result<Option<String>, CoordError> {
    let kind = Some(kind.trim()).filter(|k| !k.is_empty());
    check_error_handler(kind, props)?;
    Ok(kind.map(str::to_string))
}

/// Whether `kind` and `props` make an error handler; the error names the config's field.
fn check_error_handler(
    kind: Option<&str>,
    props: &BTreeMap<String, String>,
) -> Result<(), CoordError> {
    crate::ops::alerts::ErrorHandler::parse(kind, props)
        .map(|_| ())
        .map_err(|e| invalid(&e.config_field(), e.message))
}

/// A wire retry policy, validated (`None`: no retries, as `max_attempts` 0 or 1 says).
pub fn retry_from_proto(r: &proto::RetryPolicy) -> Result<Option<RetryPolicy>, CoordError> {
    if r.max_attempts > RetryPolicy::MAX_ATTEMPTS {
        return Err(invalid(
            "config.retry.max_attempts",
            format!(
                "must be at most {} (runs in all, the first included), got {}",
                RetryPolicy::MAX_ATTEMPTS,
                r.max_attempts
            ),
        ));
    }
    let backoff = |field: &str, d: &Option<prost_types::Duration>, default: Duration| {
        let Some(d) = d else { return Ok(default) };
        let d = Duration::try_from(*d).map_err(|_| invalid(field, "must not be negative"))?;
        if !(RetryPolicy::MIN_BACKOFF..=RetryPolicy::MAX_BACKOFF).contains(&d) {
            return Err(invalid(
                field,
                format!(
                    "must be between 10ms and 1 day, got {}",
                    humantime::format_duration(d)
                ),
            ));
        }
        Ok(d)
    };
    let initial = backoff(
        "config.retry.initial_backoff",
        &r.initial_backoff,
        RetryPolicy::DEFAULT_INITIAL_BACKOFF,
    )?;
    let max = backoff(
        "config.retry.max_backoff",
        &r.max_backoff,
        RetryPolicy::DEFAULT_MAX_BACKOFF.max(initial),
    )?;
    if max < initial {
        return Err(invalid(
            "config.retry.max_backoff",
            "must not be below initial_backoff",
        ));
    }
    let multiplier = if r.multiplier == 0.0 {
        2.0
    } else {
        r.multiplier
    };
    if !(1.0..=10.0).contains(&multiplier) {
        return Err(invalid(
            "config.retry.multiplier",
            format!("must be between 1 and 10, got {}", r.multiplier),
        ));
    }
    Ok((r.max_attempts > 1).then(|| RetryPolicy {
        max_attempts: r.max_attempts,
        initial_backoff_ms: initial.as_millis() as u64,
        max_backoff_ms: max.as_millis() as u64,
        multiplier_permille: (multiplier * 1000.0).round() as u32,
    }))
}

/// A retry policy on the wire.
pub fn retry_to_proto(r: &RetryPolicy) -> proto::RetryPolicy {
    let duration = |ms: u64| prost_types::Duration::try_from(Duration::from_millis(ms)).ok();
    proto::RetryPolicy {
        max_attempts: r.max_attempts,
        initial_backoff: duration(r.initial_backoff_ms),
        max_backoff: duration(r.max_backoff_ms),
        multiplier: f64::from(r.multiplier_permille) / 1000.0,
    }
}

/// The typed job a wire config asks for: `None` for a job run by workers.
///
/// # Errors
/// `InvalidArgument` on `config.job_type` for a number this build does not know.
pub fn job_type_from_proto(c: &proto::JobConfig) -> Result<Option<JobType>, CoordError> {
    match proto::JobType::try_from(c.job_type) {
        Ok(proto::JobType::Unspecified) => Ok(None),
        Ok(proto::JobType::Script) => Ok(Some(JobType::Script)),
        Ok(proto::JobType::Http) => Ok(Some(JobType::Http)),
        Err(_) => Err(invalid(
            "config.job_type",
            format!("{} is not a known job type (SCRIPT, HTTP)", c.job_type),
        )),
    }
}

/// The wire value of a job's type.
pub fn job_type_to_proto(job_type: Option<JobType>) -> proto::JobType {
    match job_type {
        None => proto::JobType::Unspecified,
        Some(JobType::Script) => proto::JobType::Script,
        Some(JobType::Http) => proto::JobType::Http,
    }
}

/// ElasticJob's strategy for a wire value: unset means its default, AVG_ALLOCATION; `None` for a
/// number this build does not know.
pub fn strategy_from_proto(value: i32) -> Option<StrategyType> {
    match proto::ShardingStrategy::try_from(value).ok()? {
        proto::ShardingStrategy::Unspecified | proto::ShardingStrategy::AvgAllocation => {
            Some(StrategyType::AvgAllocation)
        }
        proto::ShardingStrategy::Odevity => Some(StrategyType::Odevity),
        proto::ShardingStrategy::RoundRobin => Some(StrategyType::RoundRobin),
    }
}

/// The wire value of an ElasticJob strategy.
pub fn strategy_to_proto(strategy: StrategyType) -> proto::ShardingStrategy {
    match strategy {
        StrategyType::AvgAllocation => proto::ShardingStrategy::AvgAllocation,
        StrategyType::Odevity => proto::ShardingStrategy::Odevity,
        StrategyType::RoundRobin => proto::ShardingStrategy::RoundRobin,
    }
}

/// The wire form of an effective configuration (optional fields always set).
pub fn to_proto(c: &JobConfiguration, extras: &JobExtras) -> proto::JobConfig {
    let strategy = strategy_to_proto(
        c.job_sharding_strategy_type
            .as_deref()
            .and_then(|s| StrategyType::parse(s).ok())
            .unwrap_or(StrategyType::AvgAllocation),
    );
    proto::JobConfig {
        job_name: c.job_name.clone(),
        cron: c.cron.clone().unwrap_or_default(),
        time_zone: c.time_zone.clone().unwrap_or_default(),
        sharding_total_count: c.sharding_total_count,
        sharding_item_parameters: c
            .item_parameters()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        job_parameter: c.job_parameter.clone(),
        failover: c.failover,
        misfire: Some(c.misfire),
        monitor_execution: Some(c.monitor_execution),
        sharding_strategy: strategy as i32,
        max_time_diff_seconds: Some(c.max_time_diff_seconds),
        reconcile_interval_minutes: Some(c.reconcile_interval_minutes),
        description: c.description.clone(),
        disabled: c.disabled,
        props: c
            .props
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        execution_timeout_seconds: extras.execution_timeout_seconds,
        // The type is the job root's, not the config's: see `job_type_to_proto`.
        job_type: proto::JobType::Unspecified as i32,
        retry: extras.retry.as_ref().map(retry_to_proto),
        job_error_handler_type: c.job_error_handler_type.clone().unwrap_or_default(),
        resident: extras.resident,
    }
}

#[cfg(test)]
mod tests;
