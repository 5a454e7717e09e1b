//! The namespace operations that write: put, remove, trigger, disable and enable, shut down;
//! each as ElasticJob's console and lifecycle API does it.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{
    check_job_name, children_or_empty, delete_if_present, get_job, invalid, job_names, require_job,
    AdminError,
};
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::elasticjob::paths::{JobPaths, ServerStatus};
use crate::elasticjob::typed::JobType;
use crate::registry::{self, CreateMode, Registry};

/// How long `remove` waits for the job's instances to be gone before removing the rest.
const REMOVE_WAIT: Duration = Duration::from_secs(5);

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
            // Unset in the request: the handler the job has stays (ElasticJob's console and
            // clients that predate the field leave it out).
            if config.job_error_handler_type.is_none() {
                config.job_error_handler_type = old.job_error_handler_type;
                // The props must still make that handler.
                crate::ops::alerts::ErrorHandler::parse(
                    config.job_error_handler_type.as_deref(),
                    &config.props,
                )
                .map_err(|e| invalid(&e.config_field(), e.message))?;
            }
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

/// Asks every live instance of the job to run it once now, as ElasticJob's console does: a
/// `trigger/{id}` node per instance. With `parameter`, that run's executions carry it instead of
/// the job's own: it is the nodes' data, which ElasticJob's processes ignore (a Java member runs
/// the trigger with the job's parameter). Returns the instances.
///
/// # Errors
/// `JobNotFound`, or `FailedPrecondition` when no instance is online.
pub async fn trigger_job(
    reg: &Registry,
    job: &str,
    parameter: Option<&str>,
) -> Result<Vec<String>, AdminError> {
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
            .create(
                &paths.trigger(id),
                parameter.unwrap_or_default().as_bytes(),
                CreateMode::Persistent,
            )
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
