//! The driver's registry calls for a job's setup, and its waits on the watch and the clock.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::coordination::CoordError;
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::elasticjob::paths::{JobPaths, ServerStatus};
use crate::registry::{CreateMode, Error as RegError, Node, Registry, Watch};

/// The first local instance of a job: write its config if it has none (or `overwrite`), mark
/// this sidecar's server, watch the subtree, then read it (watch first: nothing is missed).
pub(super) async fn set_up(
    registry: &Registry,
    paths: &JobPaths,
    ip: &str,
    config: Option<Box<(JobConfiguration, JobExtras)>>,
    overwrite: bool,
) -> Result<(Watch, BTreeMap<String, Node>), CoordError> {
    let job = paths.job_name();
    let existing = registry.get(&paths.config()).await?;
    let disabled = match (existing, config) {
        (None, None) => {
            return Err(CoordError::NotFound(format!(
                "job {job} does not exist; subscribe with a config to create it"
            )))
        }
        (None, Some(c)) => write_config(registry, paths, &c).await?,
        (Some(_), Some(c)) if overwrite => write_config(registry, paths, &c).await?,
        (Some(node), _) => {
            let config = JobConfiguration::from_yaml(&node.data).map_err(|e| {
                CoordError::FailedPrecondition(format!(
                    "the config of job {job} in the registry is unreadable: {e}"
                ))
            })?;
            config.disabled
        }
    };
    let status = if disabled {
        ServerStatus::Disabled
    } else {
        ServerStatus::Enabled
    };
    registry
        .persist(&paths.server(ip), status.as_str().as_bytes())
        .await?;
    registry.ensure_path(&paths.instances()).await?;
    let watch = registry.watch_recursive(&paths.root()).await?;
    let nodes = registry.read_tree(&paths.root()).await?;
    Ok((watch, nodes))
}

/// Writes `config` (and an empty job root if there is none), as ElasticJob's
/// `ConfigurationService.setUpJobConfiguration` does; the root data is never rewritten.
/// Returns whether the job is configured disabled.
async fn write_config(
    registry: &Registry,
    paths: &JobPaths,
    config: &(JobConfiguration, JobExtras),
) -> Result<bool, CoordError> {
    match registry
        .create(&paths.root(), b"", CreateMode::Persistent)
        .await
    {
        Ok(_) | Err(RegError::NodeExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let (config, extras) = config;
    registry
        .persist(&paths.config(), config.to_yaml().as_bytes())
        .await?;
    registry
        .persist(&paths.shardcar(), extras.to_yaml().as_bytes())
        .await?;
    Ok(config.disabled)
}

pub(super) async fn next_event(watch: &mut Option<Watch>) -> Option<crate::registry::WatchEvent> {
    match watch {
        Some(w) => w.next().await,
        None => std::future::pending().await,
    }
}

pub(super) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
