//! The driver's own futures, polled by its loop beside its queues (not spawned tasks reporting
//! over a channel, which would cost every job a queue): the job's setup, latch waits, the watch
//! and the ends of worker streams ([`Child`]); and the registry calls of the setup and its waits
//! on the watch and the clock.

use std::collections::BTreeMap;
use std::time::Instant;

use super::Driver;
use crate::coordination::events::StreamEnd;
use crate::coordination::job::instances::ConfigSetup;
use crate::coordination::job::{Input, IoResult, OpId, StreamKey};
use crate::coordination::CoordError;
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::elasticjob::paths::{JobPaths, ServerStatus};
use crate::registry::{CreateMode, Error as RegError, Latch, Node, Registry, Watch};

/// The first local instance of a job: write its config if it has none (or `overwrite`), mark
/// this sidecar's server, watch the subtree, then read it (watch first: nothing is missed).
pub(super) async fn set_up(
    registry: &Registry,
    paths: &JobPaths,
    ip: &str,
    config: Option<Box<(JobConfiguration, JobExtras)>>,
    overwrite: bool,
) -> Result<(Watch, BTreeMap<String, Node>), CoordError> {
    let existing = registry.get(&paths.config()).await?;
    let existing = existing.as_ref().map(|n| n.data.as_ref());
    let decided = ConfigSetup::decide(paths.job_name(), existing, config.is_some(), overwrite)?;
    let disabled = match (decided, &config) {
        (ConfigSetup::Keep { disabled }, _) => disabled,
        (ConfigSetup::Write, Some(c)) => write_config(registry, paths, c).await?,
        (ConfigSetup::Write, None) => false, // never decided: a write needs a config brought
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

/// What the driver's own futures report (`Driver::children`): a request that is not in the
/// ordered queue (a setup, a watch, a latch), or the end of a worker stream.
pub(super) enum Child {
    SetUp(OpId, Result<(Watch, BTreeMap<String, Node>), CoordError>),
    Latched(OpId, Result<Latch, RegError>),
    Watching(OpId, Result<Watch, RegError>),
    /// A worker stream ended (`None`: the driver ended it itself).
    Ended(Option<(StreamKey, StreamEnd)>),
}

impl Driver {
    pub(super) fn on_child(&mut self, child: Child) -> Option<Input> {
        Some(match child {
            Child::Ended(end) => {
                let (stream, end) = end?;
                Input::StreamEnded { stream, end }
            }
            Child::SetUp(op, result) => {
                let result = result.map(|(watch, nodes)| {
                    self.watch = Some(watch);
                    nodes
                });
                Input::Done {
                    op,
                    result: IoResult::SetUp(result),
                }
            }
            Child::Latched(op, result) => {
                let result = result.map(|latch| {
                    self.next_latch += 1;
                    self.latches.insert(self.next_latch, latch);
                    self.next_latch
                });
                Input::Done {
                    op,
                    result: IoResult::Latched(result),
                }
            }
            Child::Watching(op, result) => {
                let result = result.map(|watch| {
                    self.watch = Some(watch);
                });
                Input::Done {
                    op,
                    result: IoResult::Watching(result),
                }
            }
        })
    }
}
