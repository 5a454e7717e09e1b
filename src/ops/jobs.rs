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
//! item's owner / running / misfire / disabled / failover). The gRPC layer converts these to
//! and from the wire; nothing here knows about it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::coordination::CoordError;
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::elasticjob::instance::{ip_of, parse_instance_yaml};
use crate::elasticjob::paths::{validate_job_name, JobNode, JobPaths, ServerStatus};
use crate::elasticjob::typed::JobType;
use crate::registry::{self, CreateMode, Node, Registry};

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
    /// A shardcar sidecar on its server (`shardcar/sidecars/{ip}`) runs it and grants its worker
    /// leases; otherwise it is a JVM of ElasticJob's own.
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

/// The namespace root: its children are the jobs (as ElasticJob's lifecycle API reads them).
const NAMESPACE_ROOT: &str = "/";
/// How long `remove` waits for the job's instances to be gone before removing the rest.
const REMOVE_WAIT: Duration = Duration::from_secs(5);

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

/// The full state of a job.
///
/// # Errors
/// `JobNotFound` without a `config` node, `Corrupt` when it cannot be parsed.
pub async fn get_job(reg: &Registry, job: &str) -> Result<JobInfo, AdminError> {
    let paths = JobPaths::new(job);
    let tree = reg.read_tree(&paths.root()).await?;
    snapshot(job, &paths, &tree)
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
            | JobNode::FailoverItem(i) => items.get_mut(i),
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
            _ => {}
        }
    }
    for info in items.values() {
        if let Some(owner) = instances.get_mut(&info.owner) {
            owner.items.push(info.item);
        }
    }
    for instance in instances.values_mut() {
        instance.leader = instance.instance_id == leader;
        instance.via_sidecar = tree.contains_key(&paths.sidecar(&instance.server_ip));
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

/// Creates `path` with `data`, or replaces its data when it exists (ElasticJob's `persist`).
async fn persist(reg: &Registry, path: &str, data: &[u8]) -> Result<(), AdminError> {
    match reg.create(path, data, CreateMode::Persistent).await {
        Ok(_) => Ok(()),
        Err(registry::Error::NodeExists(_)) => {
            reg.set(path, data, None).await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Creates the job or replaces its configuration. Settings shardcar does not model (executor
/// and error handler types, listeners, extra configurations, label, static sharding) are kept
/// from the configuration being replaced. A `job_type` is written as the job root's data when
/// the root is new or empty, as ElasticJob writes its job type there; a root that names
/// something else (a Java class, the other type) is never rewritten. Returns whether the job
/// is new.
///
/// `config` has been validated (the gRPC layer checks every field of the wire form).
///
/// # Errors
/// `InvalidArgument` for a job name ElasticJob cannot use; `FailedPrecondition` for a type the
/// job's root contradicts; `Registry`.
pub async fn put_job(
    reg: &Registry,
    mut config: JobConfiguration,
    extras: JobExtras,
    job_type: Option<JobType>,
) -> Result<bool, AdminError> {
    check_job_name("config.job_name", &config.job_name)?;
    let paths = JobPaths::new(&config.job_name);
    let existing = reg.get(&paths.config()).await?;
    if let Some(node) = &existing {
        if let Ok(old) = JobConfiguration::from_yaml(&node.data) {
            config.job_executor_handler = old.job_executor_handler;
            config.job_error_handler_type = old.job_error_handler_type;
            config.job_listener_types = old.job_listener_types;
            config.job_extra_configurations = old.job_extra_configurations;
            config.label = old.label;
            config.static_sharding = old.static_sharding;
        }
    }
    // A worker job's root keeps empty data (`docs/elasticjob-compat.md` §1: any Java class may
    // share the job); a typed job's names its type.
    let root_data = job_type.map(JobType::root_data).unwrap_or_default();
    match reg
        .create(&paths.root(), root_data.as_bytes(), CreateMode::Persistent)
        .await
    {
        Ok(_) => {}
        Err(registry::Error::NodeExists(_)) => {
            if let Some(job_type) = job_type {
                let root = reg
                    .get(&paths.root())
                    .await?
                    .map(|n| n.data)
                    .unwrap_or_default();
                let current = String::from_utf8_lossy(&root).trim().to_string();
                if current.is_empty() {
                    reg.set(&paths.root(), root_data.as_bytes(), None).await?;
                } else if JobType::from_root_data(&root) != Some(job_type) {
                    return Err(AdminError::FailedPrecondition(format!(
                        "job {:?} is run as {current:?} (its root's data), not as a {} job; remove it first to change its type",
                        config.job_name,
                        job_type.root_data()
                    )));
                }
            }
        }
        Err(e) => return Err(e.into()),
    }
    persist(reg, &paths.shardcar(), extras.to_yaml().as_bytes()).await?;
    persist(reg, &paths.config(), config.to_yaml().as_bytes()).await?;
    Ok(existing.is_none())
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

/// Shuts down every instance of the job, then removes its servers and the whole job.
/// Returns the instances shut down.
///
/// # Errors
/// `JobNotFound` when the job root does not exist.
#[allow(
    clippy::disallowed_methods,
    reason = "an Admin API call's own deadline: an I/O edge"
)]
pub async fn remove_job(reg: &Registry, job: &str) -> Result<Vec<String>, AdminError> {
    let paths = JobPaths::new(job);
    if reg.exists(&paths.root()).await?.is_none() {
        return Err(AdminError::JobNotFound(job.to_string()));
    }
    let instances = children_or_empty(reg, &paths.instances()).await?;
    for id in &instances {
        delete_if_present(reg, &paths.instance(id)).await?;
    }
    // Let the owners of the instances see their shutdown before the rest goes.
    let deadline = tokio::time::Instant::now() + REMOVE_WAIT;
    while !children_or_empty(reg, &paths.instances()).await?.is_empty()
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for ip in children_or_empty(reg, &paths.servers()).await? {
        delete_if_present(reg, &paths.server(&ip)).await?;
    }
    // A coordinator that was finishing may still write a node or two: retry a few times.
    for _ in 0..5 {
        reg.delete_recursive(&paths.root()).await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        if reg.exists(&paths.root()).await?.is_none() {
            break;
        }
    }
    Ok(instances)
}

/// Asks every live instance of the job to run it once now. Returns those instances.
///
/// # Errors
/// `JobNotFound`, or `FailedPrecondition` when no instance is online.
pub async fn trigger_job(reg: &Registry, job: &str) -> Result<Vec<String>, AdminError> {
    let paths = JobPaths::new(job);
    require_job(reg, &paths).await?;
    let instances = children_or_empty(reg, &paths.instances()).await?;
    if instances.is_empty() {
        return Err(AdminError::FailedPrecondition(format!(
            "job {job:?} has no live instance to run it; start a worker first"
        )));
    }
    reg.delete_recursive(&paths.triggers()).await?;
    reg.ensure_path(&paths.triggers()).await?;
    for id in &instances {
        match reg
            .create(&paths.trigger(id), b"", CreateMode::Persistent)
            .await
        {
            Ok(_) | Err(registry::Error::NodeExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(instances)
}

/// Sets every server of the job to `status`. Returns the servers changed.
///
/// # Errors
/// `JobNotFound`.
pub async fn set_job_servers(
    reg: &Registry,
    job: &str,
    status: ServerStatus,
) -> Result<Vec<String>, AdminError> {
    let paths = JobPaths::new(job);
    require_job(reg, &paths).await?;
    let servers = children_or_empty(reg, &paths.servers()).await?;
    for ip in &servers {
        reg.set(&paths.server(ip), status.as_str().as_bytes(), None)
            .await?;
    }
    Ok(servers)
}

/// Disables (`disabled`) or enables items of the job.
///
/// # Errors
/// `JobNotFound`; `InvalidArgument` naming `items` when empty or out of `0..total`.
pub async fn set_items_disabled(
    reg: &Registry,
    job: &str,
    items: &[i32],
    disabled: bool,
) -> Result<(), AdminError> {
    let paths = JobPaths::new(job);
    let job_state = get_job(reg, job).await?;
    let total = job_state.config.sharding_total_count;
    if items.is_empty() {
        return Err(invalid("items", "name at least one item"));
    }
    if let Some(bad) = items.iter().find(|i| !(0..total).contains(*i)) {
        return Err(invalid(
            "items",
            format!("item {bad} is outside 0..{total} (the job has {total} items)"),
        ));
    }
    for item in items.iter().collect::<BTreeSet<_>>() {
        if disabled {
            reg.ensure_path(&paths.item_disabled(*item)).await?;
        } else {
            delete_if_present(reg, &paths.item_disabled(*item)).await?;
        }
    }
    Ok(())
}

/// Sets server `ip` to `status` in `job`, or in every job where it is registered when `job`
/// is `None`. Returns the jobs changed.
///
/// # Errors
/// `InvalidArgument` for an empty ip; `NotFound` when the server is registered nowhere asked.
pub async fn set_server(
    reg: &Registry,
    job: Option<&str>,
    ip: &str,
    status: ServerStatus,
) -> Result<Vec<String>, AdminError> {
    if ip.is_empty() || ip.contains('/') {
        return Err(invalid("server_ip", format!("{ip:?} is not a server ip")));
    }
    let jobs = match job {
        Some(job) => {
            require_job(reg, &JobPaths::new(job)).await?;
            vec![job.to_string()]
        }
        None => job_names(reg).await?,
    };
    let mut changed = Vec::new();
    for job in jobs {
        let path = JobPaths::new(&job).server(ip);
        match reg.set(&path, status.as_str().as_bytes(), None).await {
            Ok(_) => changed.push(job),
            Err(registry::Error::NoNode(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if changed.is_empty() {
        return Err(AdminError::NotFound(match job {
            Some(job) => format!("server {ip} is not registered in job {job:?}"),
            None => format!("server {ip} is not registered in any job"),
        }));
    }
    Ok(changed)
}

/// Remote shutdown: deletes `instances/{id}` in `job`, or in every job when `None`.
/// Returns the jobs it was removed from.
///
/// # Errors
/// `InvalidArgument` for an empty id; `NotFound` when the instance is not online.
pub async fn shutdown_instance(
    reg: &Registry,
    job: Option<&str>,
    id: &str,
) -> Result<Vec<String>, AdminError> {
    if id.is_empty() || id.contains('/') {
        return Err(invalid(
            "instance_id",
            format!("{id:?} is not an instance id (like 10.0.0.1@-@4242)"),
        ));
    }
    let jobs = match job {
        Some(job) => {
            require_job(reg, &JobPaths::new(job)).await?;
            vec![job.to_string()]
        }
        None => job_names(reg).await?,
    };
    let mut changed = Vec::new();
    for job in jobs {
        if delete_if_present(reg, &JobPaths::new(&job).instance(id)).await? {
            changed.push(job);
        }
    }
    if changed.is_empty() {
        return Err(AdminError::NotFound(match job {
            Some(job) => format!("instance {id} is not online in job {job:?}"),
            None => format!("instance {id} is not online in any job"),
        }));
    }
    Ok(changed)
}

#[cfg(test)]
#[path = "jobs_tests.rs"]
mod tests;
