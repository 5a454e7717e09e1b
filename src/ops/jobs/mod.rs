//! The namespace operations behind the Admin API and the web console, done the way ElasticJob's console and
//! lifecycle API do them (`docs/elasticjob-compat.md` §8), so that every coordinator watching the
//! job — shardcar's and Java's — reacts as it would to the console:
//!
//! - trigger: delete `trigger/` recursively, then create `trigger/{id}` per live instance;
//! - disable/enable a job: every `servers/{ip}` set to `DISABLED`/`ENABLED`;
//! - disable/enable an item: create/delete `sharding/{i}/disabled`;
//! - shut down an instance: delete `instances/{id}`;
//! - remove a job: its instances, then its servers, then the job root recursively.
//!
//! Reads turn a job's subtree into a [`JobInfo`] (config, leader, servers, instances, and each
//! item's owner / running / misfire / disabled / failover / pending retry: `info`); the
//! operations write (`operations`); [`shown`] puts a job's retry policy and error handler
//! into words for the console and `ctl`. The gRPC layer converts these to and from the wire;
//! nothing here knows about it.

mod info;
mod operations;
pub mod shown;
#[cfg(test)]
mod tests;

use crate::coordination::CoordError;
use crate::elasticjob::paths::{validate_job_name, JobPaths};
use crate::registry::{self, Node, Registry};

pub use info::{
    get_job, list_jobs, Hold, InstanceInfo, ItemInfo, JobInfo, JobStatus, JobSummary, ServerInfo,
};
pub use operations::{
    put_job, remove_job, set_items_disabled, set_job_servers, set_server, shutdown_instance,
    trigger_job,
};

/// The namespace root: its children are the jobs (as ElasticJob's lifecycle API reads them).
const NAMESPACE_ROOT: &str = "/";

/// Why an Admin operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("job {0:?} does not exist in this namespace")]
    JobNotFound(String),
    #[error("{0}")]
    NotFound(String),
    #[error("invalid {field}: {message}")]
    InvalidArgument { field: String, message: String },
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("job {job:?} has data ElasticJob cannot read: {message}")]
    Corrupt { job: String, message: String },
    #[error("the registry is not available: {0}")]
    Registry(#[from] registry::Error),
}

impl From<CoordError> for AdminError {
    fn from(e: CoordError) -> AdminError {
        match e {
            CoordError::InvalidArgument { field, message } => {
                AdminError::InvalidArgument { field, message }
            }
            CoordError::NotFound(m) => AdminError::NotFound(m),
            CoordError::Registry(e) => AdminError::Registry(e),
            other => AdminError::FailedPrecondition(other.to_string()),
        }
    }
}

fn invalid(field: &str, message: impl Into<String>) -> AdminError {
    AdminError::InvalidArgument {
        field: field.to_string(),
        message: message.into(),
    }
}

/// Checks a job name given in field `field`.
///
/// # Errors
/// `InvalidArgument` naming the field.
pub fn check_job_name(field: &str, name: &str) -> Result<(), AdminError> {
    validate_job_name(name).map_err(|m| invalid(field, m))
}

/// Names of every job in the namespace (children of the root that have a `config`), sorted.
///
/// # Errors
/// `Registry` when the store cannot be read.
pub async fn job_names(reg: &Registry) -> Result<Vec<String>, AdminError> {
    let mut names = Vec::new();
    for child in reg.children(NAMESPACE_ROOT).await? {
        if validate_job_name(&child).is_err() {
            continue;
        }
        if reg.exists(&JobPaths::new(&child).config()).await?.is_some() {
            names.push(child);
        }
    }
    Ok(names)
}

/// Whether the job exists (has a `config` node).
async fn require_job(reg: &Registry, paths: &JobPaths) -> Result<(), AdminError> {
    match reg.exists(&paths.config()).await? {
        Some(_) => Ok(()),
        None => Err(AdminError::JobNotFound(paths.job_name().to_string())),
    }
}

fn text(node: &Node) -> String {
    String::from_utf8_lossy(&node.data).into_owned()
}

async fn children_or_empty(reg: &Registry, path: &str) -> Result<Vec<String>, AdminError> {
    match reg.children(path).await {
        Ok(c) => Ok(c),
        Err(registry::Error::NoNode(_)) => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

async fn delete_if_present(reg: &Registry, path: &str) -> Result<bool, AdminError> {
    match reg.delete(path, None).await {
        Ok(()) => Ok(true),
        Err(registry::Error::NoNode(_)) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
