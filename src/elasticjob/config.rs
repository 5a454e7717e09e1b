//! The job's `config` node (`docs/elasticjob-compat.md` §2.1): ElasticJob's `JobConfigurationPOJO` as YAML.
//!
//! [`JobConfiguration::to_yaml`] writes exactly the bytes Java's SnakeYAML writes (alphabetical
//! keys, null and empty collections omitted, `''` kept, SnakeYAML's scalar styles), so a job
//! written by shardcar is indistinguishable from one written by Java. [`JobConfiguration::from_yaml`]
//! reads leniently and ignores unknown keys; shardcar never writes a key Java does not know.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use super::yaml::{self, Text, Value};
use super::LayoutError;
use crate::elasticjob::strategy::StrategyType;

const NODE: &str = "config";

/// The largest item count shardcar works with, whoever wrote the config (a larger one from
/// ElasticJob's console or Java is refused for that job, with a logged error).
pub const MAX_SHARDING_TOTAL_COUNT: i32 = 100_000;

/// Which key carries the executor thread-pool type: it was renamed in ElasticJob 3.0.5, and a
/// reader of one version rejects the other's key, so shardcar writes back the one it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutorHandlerKey {
    /// `jobExecutorServiceHandlerType` (ElasticJob ≤ 3.0.4).
    ServiceHandler,
    /// `jobExecutorThreadPoolSizeProviderType` (ElasticJob 3.0.5+).
    ThreadPoolSizeProvider,
}

impl ExecutorHandlerKey {
    pub fn yaml_key(self) -> &'static str {
        match self {
            ExecutorHandlerKey::ServiceHandler => "jobExecutorServiceHandlerType",
            ExecutorHandlerKey::ThreadPoolSizeProvider => "jobExecutorThreadPoolSizeProviderType",
        }
    }
}

/// The executor thread-pool type (`CPU`, `SINGLE_THREAD`) and the key it was stored under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorHandler {
    pub key: ExecutorHandlerKey,
    pub value: String,
}

/// ElasticJob's job configuration, field for field (`JobConfigurationPOJO`, snake case).
///
/// `job_parameter`, `sharding_item_parameters` and `description` are plain strings: Java's
/// builder turns null into `''`, so a missing key reads as `""` and is written back as `''`.
#[derive(Debug, Clone)]
pub struct JobConfiguration {
    pub job_name: String,
    /// `None` (or empty) for a one-off job.
    pub cron: Option<String>,
    pub time_zone: Option<String>,
    pub job_parameter: String,
    pub sharding_total_count: i32,
    pub sharding_item_parameters: String,
    pub monitor_execution: bool,
    pub failover: bool,
    pub misfire: bool,
    pub max_time_diff_seconds: i32,
    pub reconcile_interval_minutes: i32,
    pub job_sharding_strategy_type: Option<String>,
    pub job_executor_handler: Option<ExecutorHandler>,
    pub job_error_handler_type: Option<String>,
    pub job_listener_types: Vec<String>,
    /// The whole `jobExtraConfigurations:` block as read (key line included, ending with a line
    /// break), written back verbatim; shardcar does not interpret it (tracing settings).
    pub job_extra_configurations: Option<String>,
    pub description: String,
    pub props: BTreeMap<String, String>,
    pub disabled: bool,
    pub overwrite: bool,
    pub label: Option<String>,
    pub static_sharding: bool,
    /// The order `props` keys were read in, so a rewrite keeps Java's order (see `props_order`).
    props_read_order: Vec<String>,
}

impl PartialEq for JobConfiguration {
    /// Compares the settings; the order `props` were read in does not matter.
    fn eq(&self, o: &Self) -> bool {
        self.job_name == o.job_name
            && self.cron == o.cron
            && self.time_zone == o.time_zone
            && self.job_parameter == o.job_parameter
            && self.sharding_total_count == o.sharding_total_count
            && self.sharding_item_parameters == o.sharding_item_parameters
            && self.monitor_execution == o.monitor_execution
            && self.failover == o.failover
            && self.misfire == o.misfire
            && self.max_time_diff_seconds == o.max_time_diff_seconds
            && self.reconcile_interval_minutes == o.reconcile_interval_minutes
            && self.job_sharding_strategy_type == o.job_sharding_strategy_type
            && self.job_executor_handler == o.job_executor_handler
            && self.job_error_handler_type == o.job_error_handler_type
            && self.job_listener_types == o.job_listener_types
            && self.job_extra_configurations == o.job_extra_configurations
            && self.description == o.description
            && self.props == o.props
            && self.disabled == o.disabled
            && self.overwrite == o.overwrite
            && self.label == o.label
            && self.static_sharding == o.static_sharding
    }
}

impl Eq for JobConfiguration {}

impl JobConfiguration {
    /// ElasticJob's `JobConfiguration.newBuilder(job_name, total)` defaults: misfire and
    /// monitorExecution on, maxTimeDiffSeconds -1, reconcileIntervalMinutes 10, `''` strings,
    /// everything else off or unset.
    pub fn new(job_name: impl Into<String>, total: i32) -> Self {
        JobConfiguration {
            job_name: job_name.into(),
            cron: None,
            time_zone: None,
            job_parameter: String::new(),
            sharding_total_count: total,
            sharding_item_parameters: String::new(),
            monitor_execution: true,
            failover: false,
            misfire: true,
            max_time_diff_seconds: -1,
            reconcile_interval_minutes: 10,
            job_sharding_strategy_type: None,
            job_executor_handler: None,
            job_error_handler_type: None,
            job_listener_types: Vec::new(),
            job_extra_configurations: None,
            description: String::new(),
            props: BTreeMap::new(),
            disabled: false,
            overwrite: false,
            label: None,
            static_sharding: false,
            props_read_order: Vec::new(),
        }
    }

    /// The cron expression, or `None` for a one-off job (no cron, or a blank one).
    pub fn cron_expression(&self) -> Option<&str> {
        self.cron.as_deref().filter(|c| !c.trim().is_empty())
    }

    /// The sharding strategy; unset means AVG_ALLOCATION, as in ElasticJob.
    ///
    /// # Errors
    /// [`LayoutError::UnknownStrategy`] for a strategy shardcar does not implement (including
    /// SINGLE_SHARDING_BALANCE), so a job is never silently sharded differently than Java would.
    pub fn strategy(&self) -> Result<StrategyType, LayoutError> {
        match self.job_sharding_strategy_type.as_deref() {
            None | Some("") => Ok(StrategyType::AvgAllocation),
            Some(name) => Ok(StrategyType::parse(name)?),
        }
    }

    /// `shardingItemParameters` parsed by ElasticJob's rules: split on `,` (trailing empty
    /// entries dropped, as Java's `split` does), trim, split each entry on `=` into exactly two
    /// parts, key an `int`, both sides trimmed. A repeated item keeps the last value.
    ///
    /// # Errors
    /// [`LayoutError::ItemParameters`] naming the bad entry.
    pub fn item_parameters(&self) -> Result<BTreeMap<i32, String>, LayoutError> {
        let mut out = BTreeMap::new();
        if self.sharding_item_parameters.is_empty() {
            return Ok(out);
        }
        for entry in java_split(&self.sharding_item_parameters, ',') {
            let pair = java_split(java_trim(entry), '=');
            let [key, value] = pair.as_slice() else {
                return Err(LayoutError::ItemParameters {
                    entry: entry.to_owned(),
                    reason: "it does not have exactly one '=' with text on both sides",
                });
            };
            let item: i32 = java_trim(key)
                .parse()
                .map_err(|_| LayoutError::ItemParameters {
                    entry: entry.to_owned(),
                    reason: "the item before '=' is not an integer",
                })?;
            out.insert(item, java_trim(value).to_owned());
        }
        Ok(out)
    }

    /// The YAML Java writes for this configuration, byte for byte.
    pub fn to_yaml(&self) -> String {
        let mut entries: Vec<(&str, Value<'_>)> = Vec::new();
        if let Some(c) = &self.cron {
            entries.push(("cron", Value::Str(c)));
        }
        entries.push(("description", Value::Str(&self.description)));
        entries.push(("disabled", Value::Bool(self.disabled)));
        entries.push(("failover", Value::Bool(self.failover)));
        if let Some(t) = &self.job_error_handler_type {
            entries.push(("jobErrorHandlerType", Value::Str(t)));
        }
        if let Some(h) = &self.job_executor_handler {
            entries.push((h.key.yaml_key(), Value::Str(&h.value)));
        }
        let extra;
        if let Some(raw) = &self.job_extra_configurations {
            extra = if raw.ends_with('\n') {
                raw.clone()
            } else {
                format!("{raw}\n")
            };
            entries.push(("jobExtraConfigurations", Value::Raw(&extra)));
        }
        if !self.job_listener_types.is_empty() {
            let items = self.job_listener_types.iter().map(String::as_str).collect();
            entries.push(("jobListenerTypes", Value::Seq(items)));
        }
        entries.push(("jobName", Value::Str(&self.job_name)));
        entries.push(("jobParameter", Value::Str(&self.job_parameter)));
        if let Some(t) = &self.job_sharding_strategy_type {
            entries.push(("jobShardingStrategyType", Value::Str(t)));
        }
        if let Some(l) = &self.label {
            entries.push(("label", Value::Str(l)));
        }
        entries.push((
            "maxTimeDiffSeconds",
            Value::Int(self.max_time_diff_seconds.into()),
        ));
        entries.push(("misfire", Value::Bool(self.misfire)));
        entries.push(("monitorExecution", Value::Bool(self.monitor_execution)));
        entries.push(("overwrite", Value::Bool(self.overwrite)));
        if !self.props.is_empty() {
            let pairs = self
                .props_order()
                .into_iter()
                .map(|k| (k, self.props[k].as_str()))
                .collect();
            entries.push(("props", Value::Map(pairs)));
        }
        entries.push((
            "reconcileIntervalMinutes",
            Value::Int(self.reconcile_interval_minutes.into()),
        ));
        entries.push((
            "shardingItemParameters",
            Value::Str(&self.sharding_item_parameters),
        ));
        entries.push((
            "shardingTotalCount",
            Value::Int(self.sharding_total_count.into()),
        ));
        entries.push(("staticSharding", Value::Bool(self.static_sharding)));
        if let Some(t) = &self.time_zone {
            entries.push(("timeZone", Value::Str(t)));
        }
        // Java sorts bean properties by name; the handler key's position depends on its name.
        entries.sort_by(|a, b| a.0.cmp(b.0));
        yaml::dump_map(&entries)
    }

    /// The order Java iterates `props` in: a `java.util.Properties` is backed by a
    /// `ConcurrentHashMap` (JDK 9+), iterated by hash bucket. Keys are inserted in the order
    /// they were read, then new keys in sorted order, so re-emitting a Java-written document
    /// keeps its order. (Bins of 8+ colliding keys, which Java would treeify, are not modelled.)
    fn props_order(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self
            .props_read_order
            .iter()
            .map(String::as_str)
            .filter(|k| self.props.contains_key(*k))
            .collect();
        for k in self.props.keys() {
            if !keys.contains(&k.as_str()) {
                keys.push(k);
            }
        }
        concurrent_hash_map_order(&keys)
    }

    /// Reads `config` data leniently: unknown keys are ignored; missing keys take the
    /// read-side defaults of Java's POJO (booleans false, `reconcileIntervalMinutes` 0,
    /// `maxTimeDiffSeconds` -1, `shardingTotalCount` 0); `''` in a `*Type` key means unset.
    ///
    /// # Errors
    /// [`LayoutError::Yaml`] if the data is not a YAML mapping, [`LayoutError::MissingKey`]
    /// without `jobName`, [`LayoutError::InvalidValue`] for a non-boolean or non-integer value
    /// where one is required.
    pub fn from_yaml(data: &[u8]) -> Result<JobConfiguration, LayoutError> {
        let yaml_err = |message: String| LayoutError::Yaml {
            node: NODE,
            message,
        };
        let text = std::str::from_utf8(data).map_err(|e| yaml_err(e.to_string()))?;
        let raw: RawConfig = serde_yaml_ng::from_str(text).map_err(|e| yaml_err(e.to_string()))?;
        let job_name = raw.job_name.ok_or(LayoutError::MissingKey {
            node: NODE,
            key: "jobName",
        })?;
        let s = |t: Option<Text>| t.map(|t| t.0);
        let ty = |t: Option<Text>| t.map(|t| t.0).filter(|v| !v.is_empty());
        let handler = match (
            ty(raw.job_executor_service_handler_type),
            ty(raw.job_executor_thread_pool_size_provider_type),
        ) {
            (Some(value), _) => Some(ExecutorHandler {
                key: ExecutorHandlerKey::ServiceHandler,
                value,
            }),
            (None, Some(value)) => Some(ExecutorHandler {
                key: ExecutorHandlerKey::ThreadPoolSizeProvider,
                value,
            }),
            (None, None) => None,
        };
        let extra = match raw.job_extra_configurations {
            None | Some(serde_yaml_ng::Value::Null) => None,
            Some(serde_yaml_ng::Value::Sequence(s)) if s.is_empty() => None,
            Some(value) => Some(
                raw_block(text, "jobExtraConfigurations").unwrap_or_else(|| {
                    // Not in block layout: re-render it (loses only formatting).
                    let mut m = serde_yaml_ng::Mapping::new();
                    m.insert("jobExtraConfigurations".into(), value);
                    serde_yaml_ng::to_string(&m).unwrap_or_default()
                }),
            ),
        };
        let props_pairs = raw.props.map(|p| p.0).unwrap_or_default();
        Ok(JobConfiguration {
            job_name: job_name.0,
            cron: s(raw.cron),
            time_zone: s(raw.time_zone),
            job_parameter: s(raw.job_parameter).unwrap_or_default(),
            sharding_total_count: int(raw.sharding_total_count, "shardingTotalCount", 0)?,
            sharding_item_parameters: s(raw.sharding_item_parameters).unwrap_or_default(),
            monitor_execution: boolean(raw.monitor_execution, "monitorExecution")?,
            failover: boolean(raw.failover, "failover")?,
            misfire: boolean(raw.misfire, "misfire")?,
            max_time_diff_seconds: int(raw.max_time_diff_seconds, "maxTimeDiffSeconds", -1)?,
            reconcile_interval_minutes: int(
                raw.reconcile_interval_minutes,
                "reconcileIntervalMinutes",
                0,
            )?,
            job_sharding_strategy_type: ty(raw.job_sharding_strategy_type),
            job_executor_handler: handler,
            job_error_handler_type: ty(raw.job_error_handler_type),
            job_listener_types: raw
                .job_listener_types
                .unwrap_or_default()
                .into_iter()
                .map(|t| t.0)
                .collect(),
            job_extra_configurations: extra,
            description: s(raw.description).unwrap_or_default(),
            props_read_order: props_pairs.iter().map(|(k, _)| k.clone()).collect(),
            props: props_pairs.into_iter().collect(),
            disabled: boolean(raw.disabled, "disabled")?,
            overwrite: boolean(raw.overwrite, "overwrite")?,
            label: s(raw.label),
            static_sharding: boolean(raw.static_sharding, "staticSharding")?,
        })
    }
}

impl fmt::Display for JobConfiguration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_yaml())
    }
}

/// `0=a,1=b`: the inverse of [`JobConfiguration::item_parameters`].
pub fn format_item_parameters(params: &BTreeMap<i32, String>) -> String {
    let parts: Vec<String> = params.iter().map(|(i, p)| format!("{i}={p}")).collect();
    parts.join(",")
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConfig {
    job_name: Option<Text>,
    cron: Option<Text>,
    time_zone: Option<Text>,
    sharding_total_count: Option<Text>,
    sharding_item_parameters: Option<Text>,
    job_parameter: Option<Text>,
    monitor_execution: Option<Text>,
    failover: Option<Text>,
    misfire: Option<Text>,
    max_time_diff_seconds: Option<Text>,
    reconcile_interval_minutes: Option<Text>,
    job_sharding_strategy_type: Option<Text>,
    job_executor_service_handler_type: Option<Text>,
    job_executor_thread_pool_size_provider_type: Option<Text>,
    job_error_handler_type: Option<Text>,
    job_listener_types: Option<Vec<Text>>,
    job_extra_configurations: Option<serde_yaml_ng::Value>,
    description: Option<Text>,
    props: Option<Pairs>,
    disabled: Option<Text>,
    overwrite: Option<Text>,
    label: Option<Text>,
    static_sharding: Option<Text>,
}

/// A mapping of scalars, in document order.
struct Pairs(Vec<(String, String)>);

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Pairs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of scalars")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Pairs, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = m.next_entry::<Text, Option<Text>>()? {
                    out.push((k.0, v.map(|v| v.0).unwrap_or_default()));
                }
                Ok(Pairs(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A YAML 1.1 boolean, as SnakeYAML reads it; missing means false.
fn boolean(v: Option<Text>, key: &'static str) -> Result<bool, LayoutError> {
    let Some(Text(v)) = v else { return Ok(false) };
    match v.as_str() {
        "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Ok(true),
        "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Ok(false),
        _ => Err(LayoutError::InvalidValue {
            node: NODE,
            key,
            value: v,
            expected: "expected true or false",
        }),
    }
}

/// A YAML 1.1 integer (`_` separators, `0x`, `0b`, leading-zero octal), as SnakeYAML reads it.
fn int(v: Option<Text>, key: &'static str, default: i32) -> Result<i32, LayoutError> {
    let Some(Text(v)) = v else { return Ok(default) };
    let bad = || LayoutError::InvalidValue {
        node: NODE,
        key,
        value: v.clone(),
        expected: "expected a 32-bit integer",
    };
    let clean: String = v.chars().filter(|&c| c != '_').collect();
    let (neg, digits) = match clean.as_bytes().first() {
        Some(b'-') => (true, &clean[1..]),
        Some(b'+') => (false, &clean[1..]),
        _ => (false, clean.as_str()),
    };
    let magnitude = if let Some(h) = digits.strip_prefix("0x") {
        i64::from_str_radix(h, 16)
    } else if let Some(b) = digits.strip_prefix("0b") {
        i64::from_str_radix(b, 2)
    } else if digits.len() > 1 && digits.starts_with('0') {
        i64::from_str_radix(&digits[1..], 8)
    } else {
        digits.parse::<i64>()
    }
    .map_err(|_| bad())?;
    let n = if neg { -magnitude } else { magnitude };
    i32::try_from(n).map_err(|_| bad())
}

/// Java's `String.trim`: strips characters up to U+0020 at both ends.
fn java_trim(s: &str) -> &str {
    s.trim_matches(|c: char| c <= ' ')
}

/// Java's `String.split` with a one-character literal: trailing empty strings are removed.
fn java_split(s: &str, sep: char) -> Vec<&str> {
    let mut parts: Vec<&str> = s.split(sep).collect();
    while parts.last() == Some(&"") {
        parts.pop();
    }
    parts
}

/// The lines of top-level key `key` (its line and the indented or `-` lines after it).
fn raw_block(text: &str, key: &str) -> Option<String> {
    let mut out = String::new();
    let mut inside = false;
    for line in text.split_inclusive('\n') {
        if inside {
            let continues = line.starts_with([' ', '-', '#', '\t'])
                || line.trim_end_matches(['\r', '\n']).is_empty();
            if !continues {
                break;
            }
            out.push_str(line);
        } else if line
            .strip_prefix(key)
            .is_some_and(|rest| rest.trim_start().starts_with(':'))
        {
            inside = true;
            out.push_str(line);
        }
    }
    if !inside {
        return None;
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    Some(out)
}

/// Iteration order of a JDK 9+ `ConcurrentHashMap` (initial table 16, as in `Properties`)
/// after inserting `keys` in order: bins by index; within a bin insertion order, except that
/// a resize moves the nodes before a bin's "last run" in reverse, as `transfer` does.
fn concurrent_hash_map_order<'a>(keys: &[&'a str]) -> Vec<&'a str> {
    let spread = |k: &str| {
        let h = super::java_string_hash(k) as u32;
        ((h ^ (h >> 16)) & 0x7fff_ffff) as usize
    };
    let mut n = 16usize;
    let mut table: Vec<Vec<(usize, &'a str)>> = vec![Vec::new(); n];
    let mut count = 0usize;
    let mut size_ctl = n - (n >> 2);
    for &k in keys {
        let h = spread(k);
        let bin = &mut table[h & (n - 1)];
        if bin.iter().any(|(_, x)| *x == k) {
            continue;
        }
        bin.push((h, k));
        count += 1;
        while count >= size_ctl {
            let mut next: Vec<Vec<(usize, &'a str)>> = vec![Vec::new(); n * 2];
            for (i, bin) in table.iter().enumerate() {
                let Some(first) = bin.first() else { continue };
                let mut run_bit = first.0 & n;
                let mut last_run = 0;
                for (j, node) in bin.iter().enumerate().skip(1) {
                    if node.0 & n != run_bit {
                        run_bit = node.0 & n;
                        last_run = j;
                    }
                }
                let (mut lo, mut hi) = if run_bit == 0 {
                    (bin[last_run..].to_vec(), Vec::new())
                } else {
                    (Vec::new(), bin[last_run..].to_vec())
                };
                for node in &bin[..last_run] {
                    if node.0 & n == 0 {
                        lo.insert(0, *node);
                    } else {
                        hi.insert(0, *node);
                    }
                }
                next[i] = lo;
                next[i + n] = hi;
            }
            size_ctl = (n << 1) - (n >> 1);
            n *= 2;
            table = next;
        }
    }
    table.into_iter().flatten().map(|(_, k)| k).collect()
}

#[cfg(test)]
mod tests;
