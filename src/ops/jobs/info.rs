//! A job's state as its nodes say ([`JobInfo`]), read the way ElasticJob's console reads it.

use std::collections::BTreeMap;

use super::{job_names, text, AdminError};
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::{JobExtras, PendingRetry};
use crate::elasticjob::instance::{ip_of, parse_instance_yaml};
use crate::elasticjob::paths::{JobNode, JobPaths, ServerStatus};
use crate::elasticjob::typed::JobType;
use crate::registry::{Node, Registry};

/// ElasticJob console's job status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobStatus {
    Ok,
    /// No live instance.
    Crashed,
    /// Every server is disabled.
    Disabled,
    /// A resharding is pending (flag set, or an item is owned by an instance that is gone).
    ShardingFlag,
}

/// One server (`servers/{ip}`) of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    pub ip: String,
    pub disabled: bool,
    pub instance_count: u32,
}

/// One live instance of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceInfo {
    pub instance_id: String,
    pub server_ip: String,
    pub items: Vec<i32>,
    pub leader: bool,
    /// The ZooKeeper session that holds its (ephemeral) node: the instance lives as long as it.
    pub session_id: i64,
    /// A shardcar sidecar runs it and grants its worker leases (its node is on the session of a
    /// `shardcar/sidecars/{ip}` node); otherwise it is a JVM of ElasticJob's own.
    pub via_sidecar: bool,
}

/// One item of a job, as its nodes say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemInfo {
    pub item: i32,
    pub parameter: String,
    /// The owner's instance id (empty: none).
    pub owner: String,
    pub running: bool,
    /// Who the `running` node names.
    pub running_instance: String,
    pub misfire: bool,
    pub disabled: bool,
    /// Who took the item over (`failovering`), if anyone.
    pub failover_instance: String,
    /// Flagged under `leader/failover/items`.
    pub failover_pending: bool,
    /// A resident item held by an instance that no longer owns it: its hand-off is going on.
    pub handoff: bool,
    /// shardcar's pending retry of the item (`shardcar/retries/{i}`): the next attempt of a
    /// failed item, or a resident item's restart after its backoff.
    pub pending_retry: Option<PendingRetry>,
}

/// Where a resident item's hold stands, as its nodes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold<'a> {
    /// Nobody owns it (before the first sharding), so nobody may hold it.
    Unowned,
    /// Its owner holds it: its `running` node names the owner.
    Held { by: &'a str },
    /// An instance other than its owner still holds it: the holder has been told to let go,
    /// and the item starts on its owner (`to`; empty: nobody, the item was disabled or has
    /// no instance to go to) once it has, or once its lease ran out.
    HandingOff { from: &'a str, to: &'a str },
    /// Owned but disabled: nobody holds it until it is enabled.
    Disabled,
    /// Owned and not held yet: its hold starts on its owner, at once (`restart` `None`), or
    /// once the restart backoff after its last hold has passed.
    Waiting {
        owner: &'a str,
        restart: Option<&'a PendingRetry>,
    },
}

impl ItemInfo {
    /// Where the item's hold stands (for a resident job's item).
    pub fn hold(&self) -> Hold<'_> {
        if self.running {
            let by = if self.running_instance.is_empty() {
                self.owner.as_str()
            } else {
                self.running_instance.as_str()
            };
            return if by == self.owner {
                Hold::Held { by }
            } else {
                Hold::HandingOff {
                    from: by,
                    to: &self.owner,
                }
            };
        }
        if self.owner.is_empty() {
            return Hold::Unowned;
        }
        if self.disabled {
            return Hold::Disabled;
        }
        Hold::Waiting {
            owner: &self.owner,
            restart: self.pending_retry.as_ref(),
        }
    }
}

/// The state of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobInfo {
    pub config: JobConfiguration,
    /// SCRIPT or HTTP when the job root names one (the sidecars run it); `None`: workers do.
    pub job_type: Option<JobType>,
    pub extras: JobExtras,
    pub status: JobStatus,
    /// The leader's instance id (empty: none).
    pub leader: String,
    pub servers: Vec<ServerInfo>,
    pub instances: Vec<InstanceInfo>,
    pub items: Vec<ItemInfo>,
    pub sharding_necessary: bool,
}

/// A one-line summary of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSummary {
    pub job_name: String,
    pub config: JobConfiguration,
    pub status: JobStatus,
    pub instance_count: u32,
    pub server_count: u32,
    pub leader: String,
}

/// The full state of a job.
///
/// # Errors
/// `JobNotFound` without a `config` node, `Corrupt` when it cannot be parsed.
pub async fn get_job(reg: &Registry, job: &str) -> Result<JobInfo, AdminError> {
    let paths = JobPaths::new(job);
    let tree = reg.read_tree(&paths.root()).await?;
    snapshot(job, &paths, &tree)
}

/// Builds the job's state from its subtree (keyed by path, as [`Registry::read_tree`] gives it).
fn snapshot(
    job: &str,
    paths: &JobPaths,
    tree: &BTreeMap<String, Node>,
) -> Result<JobInfo, AdminError> {
    let corrupt = |message: String| AdminError::Corrupt {
        job: job.to_string(),
        message,
    };
    let config_node = tree
        .get(&paths.config())
        .ok_or_else(|| AdminError::JobNotFound(job.to_string()))?;
    let config =
        JobConfiguration::from_yaml(&config_node.data).map_err(|e| corrupt(e.to_string()))?;
    let extras = tree
        .get(&paths.shardcar())
        .map(|n| JobExtras::from_yaml(&n.data))
        .transpose()
        .map_err(|e| corrupt(e.to_string()))?
        .unwrap_or_default();
    let job_type = tree
        .get(&paths.root())
        .and_then(|n| JobType::from_root_data(&n.data));
    let parameters = config.item_parameters().unwrap_or_default();
    let total = config.sharding_total_count.max(0);
    let mut items: BTreeMap<i32, ItemInfo> = (0..total)
        .map(|i| {
            let info = ItemInfo {
                item: i,
                parameter: parameters.get(&i).cloned().unwrap_or_default(),
                ..Default::default()
            };
            (i, info)
        })
        .collect();
    let mut servers: BTreeMap<String, ServerInfo> = BTreeMap::new();
    let mut instances: BTreeMap<String, InstanceInfo> = BTreeMap::new();
    let mut leader = String::new();
    let mut necessary = false;
    for (path, node) in tree {
        let kind = paths.classify(path);
        let item = match &kind {
            JobNode::ItemInstance(i)
            | JobNode::ItemRunning(i)
            | JobNode::ItemMisfire(i)
            | JobNode::ItemDisabled(i)
            | JobNode::ItemFailovering(i)
            | JobNode::FailoverItem(i)
            | JobNode::Retry(i) => items.get_mut(i),
            _ => None,
        };
        match (kind, item) {
            (JobNode::Server(ip), _) => {
                let disabled = ServerStatus::from_data(&node.data) == ServerStatus::Disabled;
                servers.insert(
                    ip.clone(),
                    ServerInfo {
                        ip,
                        disabled,
                        instance_count: 0,
                    },
                );
            }
            (JobNode::Instance(id), _) => {
                let server_ip = parse_instance_yaml(&node.data)
                    .map(|i| i.server_ip)
                    .unwrap_or_else(|_| ip_of(&id).to_string());
                instances.insert(
                    id.clone(),
                    InstanceInfo {
                        instance_id: id,
                        server_ip,
                        session_id: node.stat.ephemeral_owner,
                        ..Default::default()
                    },
                );
            }
            (JobNode::LeaderInstance, _) => leader = text(node),
            (JobNode::ShardingNecessary, _) => necessary = true,
            (JobNode::ItemInstance(_), Some(info)) => info.owner = text(node),
            (JobNode::ItemRunning(_), Some(info)) => {
                info.running = true;
                info.running_instance = text(node);
            }
            (JobNode::ItemMisfire(_), Some(info)) => info.misfire = true,
            (JobNode::ItemDisabled(_), Some(info)) => info.disabled = true,
            (JobNode::ItemFailovering(_), Some(info)) => info.failover_instance = text(node),
            (JobNode::FailoverItem(_), Some(info)) => info.failover_pending = true,
            (JobNode::Retry(_), Some(info)) => {
                info.pending_retry = PendingRetry::from_data(&node.data)
            }
            _ => {}
        }
    }
    for info in items.values_mut() {
        info.handoff = extras.resident
            && info.running
            && !info.running_instance.is_empty()
            && info.running_instance != info.owner;
        if let Some(owner) = instances.get_mut(&info.owner) {
            owner.items.push(info.item);
        }
    }
    // The sessions of the job's sidecar nodes: an instance is a sidecar's when its node is on
    // one of them (an ElasticJob JVM on a sidecar's host has a session of its own).
    let sidecar_sessions: Vec<i64> = tree
        .iter()
        .filter(|(path, _)| {
            path.strip_prefix(&paths.sidecars())
                .is_some_and(|rest| rest.starts_with('/') && !rest[1..].contains('/'))
        })
        .map(|(_, node)| node.stat.ephemeral_owner)
        .filter(|s| *s != 0)
        .collect();
    for instance in instances.values_mut() {
        instance.leader = instance.instance_id == leader;
        instance.via_sidecar = sidecar_sessions.contains(&instance.session_id);
        if let Some(server) = servers.get_mut(&instance.server_ip) {
            server.instance_count += 1;
        }
    }
    let owner_gone = items
        .values()
        .any(|i| !i.owner.is_empty() && !instances.contains_key(&i.owner));
    let status = if instances.is_empty() {
        JobStatus::Crashed
    } else if !servers.is_empty() && servers.values().all(|s| s.disabled) {
        JobStatus::Disabled
    } else if necessary || owner_gone {
        JobStatus::ShardingFlag
    } else {
        JobStatus::Ok
    };
    Ok(JobInfo {
        job_type,
        config,
        extras,
        status,
        leader,
        servers: servers.into_values().collect(),
        instances: instances.into_values().collect(),
        items: items.into_values().collect(),
        sharding_necessary: necessary,
    })
}

/// A one-line summary of every job.
///
/// # Errors
/// `Registry` when the store cannot be read.
pub async fn list_jobs(reg: &Registry) -> Result<Vec<JobSummary>, AdminError> {
    let mut out = Vec::new();
    for name in job_names(reg).await? {
        let job = match get_job(reg, &name).await {
            Ok(job) => job,
            // Removed meanwhile.
            Err(AdminError::JobNotFound(_)) => continue,
            Err(e) => return Err(e),
        };
        out.push(JobSummary {
            job_name: name,
            config: job.config,
            status: job.status,
            instance_count: job.instances.len() as u32,
            server_count: job.servers.len() as u32,
            leader: job.leader,
        });
    }
    Ok(out)
}
