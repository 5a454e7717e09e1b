//! ElasticJob-Lite 3.x's ZooKeeper namespace layout: typed paths under `/{job}`, the YAML codecs
//! of `config` and `instances/{id}` (byte-for-byte what Java writes), instance ids and task ids,
//! and Java's `String.hashCode`; and the rows of its RDB event-tracing tables
//! ([`tracing_tables`]). Nothing outside this module formats a znode path.
//!
//! Reference: `docs/elasticjob-compat.md` §1–§3; ground truth: `tests/vectors/`.

pub mod config;
pub mod extras;
pub mod hash;
pub mod instance;
pub mod paths;
pub mod strategy;
pub mod tracing_tables;
pub mod typed;
#[cfg(test)]
pub(crate) mod vectors;
mod yaml;

pub use config::{format_item_parameters, ExecutorHandler, ExecutorHandlerKey, JobConfiguration};
pub use hash::java_string_hash;
pub use instance::{
    instance_id, instance_yaml, ip_of, parse_instance_yaml, pid_part, task_id, InstanceInfo,
};
pub use paths::{
    server_enabled, sort_descending, validate_job_name, JobNode, JobPaths, ServerStatus,
};

/// A znode's data does not have the format ElasticJob gives it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The data is not valid YAML, or not a mapping.
    #[error("{node} is not valid ElasticJob YAML: {message}")]
    Yaml { node: &'static str, message: String },
    /// A key ElasticJob cannot do without is absent.
    #[error("{node} has no `{key}` key")]
    MissingKey {
        node: &'static str,
        key: &'static str,
    },
    /// A key has a value of the wrong type.
    #[error("{node} key `{key}` has an invalid value {value:?}: {expected}")]
    InvalidValue {
        node: &'static str,
        key: &'static str,
        value: String,
        expected: &'static str,
    },
    /// `shardingItemParameters` does not follow `int=text,int=text`.
    #[error("shardingItemParameters entry {entry:?} is invalid: {reason} (expected int=text, e.g. 0=A,1=B)")]
    ItemParameters { entry: String, reason: &'static str },
    /// `jobShardingStrategyType` names a strategy shardcar does not implement.
    #[error(transparent)]
    UnknownStrategy(#[from] crate::elasticjob::strategy::UnknownStrategy),
}
