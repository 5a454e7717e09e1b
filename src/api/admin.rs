//! The `shardcar.v1.AdminService`: operations on the namespace for `shardcar ctl` and any UI.
//! Each call validates its request (errors name the field) and hands it to [`crate::ops::jobs`],
//! which reads and writes ElasticJob's layout; `ListExecutions` reads the cluster-wide history
//! from ElasticJob's tracing tables when `tracing_db` is set (executions this sidecar still
//! keeps are answered from its [`History`], which has more about them), else, or when the
//! database is unavailable, this sidecar's [`History`]; the response's `shardcar-history`
//! header says which ([`HISTORY_HEADER`]). `WatchJob` follows the job's subtree
//! ([`crate::ops::watch`]). The service sits behind the admin token's interceptor
//! ([`super::auth`]).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status};

use crate::api::convert::{from_proto, job_type_from_proto, job_type_to_proto, to_proto};
use crate::coordination::trace::TraceParent;
use crate::coordination::Coordinator;
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::elasticjob::paths::ServerStatus;
use crate::elasticjob::typed::JobType;
use crate::ops::history::History;
use crate::ops::jobs::{self, check_job_name, AdminError, JobInfo, JobStatus, JobSummary};
use crate::ops::tracing_db::reader::{instant, Reader, TracedExecution};
use crate::ops::watch;
use crate::proto;
use crate::proto::admin_service_server::AdminService;
use crate::registry::Registry;

/// The response header of `ListExecutions` that says where the executions came from:
/// [`HISTORY_TRACING_DB`], [`HISTORY_LOCAL`] or [`HISTORY_LOCAL_FALLBACK`].
pub const HISTORY_HEADER: &str = "shardcar-history";
/// Read from the tracing database: every sidecar's executions and ElasticJob's.
pub const HISTORY_TRACING_DB: &str = "tracing-db";
/// This sidecar's own history (no `tracing_db` set).
pub const HISTORY_LOCAL: &str = "local";
/// This sidecar's own history, because the tracing database could not be read.
pub const HISTORY_LOCAL_FALLBACK: &str = "local-fallback";

/// The Admin service of one sidecar.
pub struct AdminApi {
    registry: Registry,
    history: Arc<History>,
    /// Set with `tracing_db`: `ListExecutions` reads the cluster-wide history there.
    tracing_db: Option<Arc<Reader>>,
    /// `WatchJob` followers run here, so a shutdown waits for them.
    tracker: TaskTracker,
    /// For `TriggerJob` calls that carry a trace to continue.
    coordinator: Coordinator,
}

impl AdminApi {
    pub fn new(
        registry: Registry,
        history: Arc<History>,
        tracker: TaskTracker,
        coordinator: Coordinator,
    ) -> AdminApi {
        AdminApi {
            registry,
            history,
            tracing_db: None,
            tracker,
            coordinator,
        }
    }

    /// `ListExecutions` reads the cluster-wide history from the tracing database.
    pub fn with_tracing_db(mut self, reader: Arc<Reader>) -> AdminApi {
        self.tracing_db = Some(reader);
        self
    }
}

/// The newest `limit` executions (all kept when 0), of `job` or of every job, as `ListExecutions`
/// and the console show them: from ElasticJob's tracing tables when `tracing_db` is set, else
/// (or while the database cannot be read) from this sidecar's history; and where they came from
/// ([`HISTORY_TRACING_DB`], [`HISTORY_LOCAL`] or [`HISTORY_LOCAL_FALLBACK`]).
pub async fn recent_executions(
    history: &History,
    tracing_db: Option<&Reader>,
    job: Option<&str>,
    limit: usize,
) -> (Vec<proto::ExecutionInfo>, &'static str) {
    match tracing_db {
        None => (local_executions(history, job, limit), HISTORY_LOCAL),
        // A database that cannot be read is logged by the reader.
        Some(reader) => match reader.recent(job, limit).await {
            Ok(traced) => (traced_executions(history, &traced), HISTORY_TRACING_DB),
            Err(_) => (
                local_executions(history, job, limit),
                HISTORY_LOCAL_FALLBACK,
            ),
        },
    }
}

/// The newest `limit` executions of this sidecar's history (all kept when 0).
fn local_executions(
    history: &History,
    job: Option<&str>,
    limit: usize,
) -> Vec<proto::ExecutionInfo> {
    history
        .recent(job, limit)
        .iter()
        .map(crate::api::events::execution_info)
        .collect()
}

/// The wire form of executions read from the tracing tables; those this sidecar still keeps in
/// its history (the same task id, items and start) are answered from there, with their
/// execution id, fire time, fencing tokens and events.
fn traced_executions(history: &History, traced: &[TracedExecution]) -> Vec<proto::ExecutionInfo> {
    let millis = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
    let started: Vec<SystemTime> = traced.iter().map(|e| instant(e.started())).collect();
    let mut wanted: HashMap<(&str, u128), usize> = HashMap::new();
    for (i, (e, at)) in traced.iter().zip(&started).enumerate() {
        wanted.insert((e.rows[0].task_id.as_str(), millis(*at)), i);
    }
    let mut local: Vec<Option<proto::ExecutionInfo>> = vec![None; traced.len()];
    if let Some(oldest) = started.iter().min() {
        // Records are kept in the order they finished: once one finished before the oldest
        // start (with a margin), every one after it did too.
        let horizon = oldest
            .checked_sub(Duration::from_secs(60))
            .unwrap_or(UNIX_EPOCH);
        history.visit_newest_first(|r| {
            if r.started_at + r.duration < horizon {
                return false;
            }
            let sent = crate::ops::tracing_db::rows::sent(r);
            if let Some(&i) = wanted.get(&(r.task_id.as_str(), millis(sent))) {
                let items = traced[i].rows.iter().map(|row| row.sharding_item);
                if r.items.keys().copied().eq(items) {
                    local[i] = Some(crate::api::events::execution_info(r));
                }
            }
            true
        });
    }
    let mut executions: Vec<proto::ExecutionInfo> = traced
        .iter()
        .zip(local)
        .map(|(e, local)| local.unwrap_or_else(|| crate::api::events::traced_execution_info(e)))
        .collect();
    // Newest first by the start shown: a local record starts when its fire was acted on, a
    // few milliseconds before its rows' start (the trigger sent).
    let start = |e: &proto::ExecutionInfo| e.started_at.map(|t| (t.seconds, t.nanos));
    executions.sort_by_key(|e| std::cmp::Reverse(start(e)));
    executions
}

/// Validates a wire config as `PutJob` does: every error names its field (`config.cron`, ...).
/// The console's configuration form checks with it too, before asking for a confirmation.
///
/// # Errors
/// `InvalidArgument` naming the first bad field.
pub fn validate_config(
    config: &proto::JobConfig,
) -> Result<(JobConfiguration, JobExtras, Option<JobType>), AdminError> {
    if config.job_name.is_empty() {
        return Err(AdminError::InvalidArgument {
            field: "config.job_name".into(),
            message: "must name the job".into(),
        });
    }
    check_job_name("config.job_name", &config.job_name)?;
    let (job_config, extras) = from_proto(&config.job_name, config, false)?;
    let job_type = job_type_from_proto(config)?;
    Ok((job_config, extras, job_type))
}

/// Validates a wire config ([`validate_config`]) and creates the job or replaces its
/// configuration: the one path of `PutJob` and of the console's configuration form. Returns
/// whether the job is new.
///
/// # Errors
/// `InvalidArgument` naming the field; as [`jobs::put_job`].
pub async fn put_job(registry: &Registry, config: &proto::JobConfig) -> Result<bool, AdminError> {
    let (job_config, extras, job_type) = validate_config(config)?;
    jobs::put_job(registry, job_config, extras, job_type).await
}

/// How long after a traced `TriggerJob` call the MANUAL executions it starts here continue its
/// trace: ample for the trigger nodes to reach this sidecar's watch.
const TRACE_WINDOW: Duration = Duration::from_secs(30);

/// The W3C trace context in a call's metadata, if a valid one is there.
fn trace_parent<T>(request: &Request<T>) -> Option<TraceParent> {
    let md = request.metadata();
    let parent = md.get("traceparent")?.to_str().ok()?;
    let state = md.get("tracestate").and_then(|v| v.to_str().ok());
    TraceParent::parse(parent, state)
}

fn job_name(name: &str) -> Result<&str, Status> {
    check_job_name("job_name", name)?;
    Ok(name)
}

/// An optional job name: empty means every job.
fn optional_job(name: &str) -> Result<Option<&str>, Status> {
    if name.is_empty() {
        Ok(None)
    } else {
        job_name(name).map(Some)
    }
}

fn timestamp(at: SystemTime) -> prost_types::Timestamp {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    prost_types::Timestamp {
        seconds: since.as_secs() as i64,
        nanos: since.subsec_nanos() as i32,
    }
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    type WatchJobStream =
        Pin<Box<dyn Stream<Item = Result<proto::WatchJobResponse, Status>> + Send>>;

    async fn list_jobs(
        &self,
        _request: Request<proto::ListJobsRequest>,
    ) -> Result<Response<proto::ListJobsResponse>, Status> {
        let jobs = jobs::list_jobs(&self.registry).await?;
        Ok(Response::new(proto::ListJobsResponse {
            jobs: jobs.iter().map(summary_to_wire).collect(),
        }))
    }

    async fn get_job(
        &self,
        request: Request<proto::GetJobRequest>,
    ) -> Result<Response<proto::GetJobResponse>, Status> {
        let req = request.into_inner();
        let job = jobs::get_job(&self.registry, job_name(&req.job_name)?).await?;
        Ok(Response::new(proto::GetJobResponse {
            job: Some(job_to_wire(&job)),
        }))
    }

    async fn put_job(
        &self,
        request: Request<proto::PutJobRequest>,
    ) -> Result<Response<proto::PutJobResponse>, Status> {
        let req = request.into_inner();
        let config = req.config.ok_or_else(|| {
            Status::from(AdminError::InvalidArgument {
                field: "config".into(),
                message: "is required".into(),
            })
        })?;
        let created = put_job(&self.registry, &config).await?;
        tracing::info!(job = %config.job_name, created, "job configuration written");
        Ok(Response::new(proto::PutJobResponse { created }))
    }

    async fn remove_job(
        &self,
        request: Request<proto::RemoveJobRequest>,
    ) -> Result<Response<proto::RemoveJobResponse>, Status> {
        let req = request.into_inner();
        let instance_ids = jobs::remove_job(&self.registry, job_name(&req.job_name)?).await?;
        tracing::info!(job = %req.job_name, instances = ?instance_ids, "job removed");
        Ok(Response::new(proto::RemoveJobResponse { instance_ids }))
    }

    async fn trigger_job(
        &self,
        request: Request<proto::TriggerJobRequest>,
    ) -> Result<Response<proto::TriggerJobResponse>, Status> {
        let parent = trace_parent(&request);
        let req = request.into_inner();
        let job = job_name(&req.job_name)?;
        self.coordinator
            .continue_trace(job, parent, TRACE_WINDOW)
            .await;
        let instance_ids =
            jobs::trigger_job(&self.registry, job, req.job_parameter.as_deref()).await?;
        tracing::info!(job = %req.job_name, instances = ?instance_ids, "job triggered");
        Ok(Response::new(proto::TriggerJobResponse { instance_ids }))
    }

    async fn disable_job(
        &self,
        request: Request<proto::DisableJobRequest>,
    ) -> Result<Response<proto::DisableJobResponse>, Status> {
        let req = request.into_inner();
        let server_ips = jobs::set_job_servers(
            &self.registry,
            job_name(&req.job_name)?,
            ServerStatus::Disabled,
        )
        .await?;
        tracing::info!(job = %req.job_name, servers = ?server_ips, "job disabled");
        Ok(Response::new(proto::DisableJobResponse { server_ips }))
    }

    async fn enable_job(
        &self,
        request: Request<proto::EnableJobRequest>,
    ) -> Result<Response<proto::EnableJobResponse>, Status> {
        let req = request.into_inner();
        let server_ips = jobs::set_job_servers(
            &self.registry,
            job_name(&req.job_name)?,
            ServerStatus::Enabled,
        )
        .await?;
        tracing::info!(job = %req.job_name, servers = ?server_ips, "job enabled");
        Ok(Response::new(proto::EnableJobResponse { server_ips }))
    }

    async fn disable_item(
        &self,
        request: Request<proto::DisableItemRequest>,
    ) -> Result<Response<proto::DisableItemResponse>, Status> {
        let req = request.into_inner();
        jobs::set_items_disabled(&self.registry, job_name(&req.job_name)?, &req.items, true)
            .await?;
        tracing::info!(job = %req.job_name, items = ?req.items, "items disabled");
        Ok(Response::new(proto::DisableItemResponse {}))
    }

    async fn enable_item(
        &self,
        request: Request<proto::EnableItemRequest>,
    ) -> Result<Response<proto::EnableItemResponse>, Status> {
        let req = request.into_inner();
        jobs::set_items_disabled(&self.registry, job_name(&req.job_name)?, &req.items, false)
            .await?;
        tracing::info!(job = %req.job_name, items = ?req.items, "items enabled");
        Ok(Response::new(proto::EnableItemResponse {}))
    }

    async fn disable_server(
        &self,
        request: Request<proto::DisableServerRequest>,
    ) -> Result<Response<proto::DisableServerResponse>, Status> {
        let req = request.into_inner();
        let job_names = jobs::set_server(
            &self.registry,
            optional_job(&req.job_name)?,
            &req.server_ip,
            ServerStatus::Disabled,
        )
        .await?;
        tracing::info!(server = %req.server_ip, jobs = ?job_names, "server disabled");
        Ok(Response::new(proto::DisableServerResponse { job_names }))
    }

    async fn enable_server(
        &self,
        request: Request<proto::EnableServerRequest>,
    ) -> Result<Response<proto::EnableServerResponse>, Status> {
        let req = request.into_inner();
        let job_names = jobs::set_server(
            &self.registry,
            optional_job(&req.job_name)?,
            &req.server_ip,
            ServerStatus::Enabled,
        )
        .await?;
        tracing::info!(server = %req.server_ip, jobs = ?job_names, "server enabled");
        Ok(Response::new(proto::EnableServerResponse { job_names }))
    }

    async fn shutdown_instance(
        &self,
        request: Request<proto::ShutdownInstanceRequest>,
    ) -> Result<Response<proto::ShutdownInstanceResponse>, Status> {
        let req = request.into_inner();
        let job_names = jobs::shutdown_instance(
            &self.registry,
            optional_job(&req.job_name)?,
            &req.instance_id,
        )
        .await?;
        tracing::info!(instance = %req.instance_id, jobs = ?job_names, "instance shut down remotely");
        Ok(Response::new(proto::ShutdownInstanceResponse { job_names }))
    }

    async fn list_executions(
        &self,
        request: Request<proto::ListExecutionsRequest>,
    ) -> Result<Response<proto::ListExecutionsResponse>, Status> {
        let req = request.into_inner();
        let job = optional_job(&req.job_name)?;
        let limit = req.limit as usize;
        let (executions, history) =
            recent_executions(&self.history, self.tracing_db.as_deref(), job, limit).await;
        let mut response = Response::new(proto::ListExecutionsResponse { executions });
        response.metadata_mut().insert(
            HISTORY_HEADER,
            tonic::metadata::MetadataValue::from_static(history),
        );
        Ok(response)
    }

    async fn watch_job(
        &self,
        request: Request<proto::WatchJobRequest>,
    ) -> Result<Response<Self::WatchJobStream>, Status> {
        let req = request.into_inner();
        let job = job_name(&req.job_name)?;
        let updates = watch::follow(&self.registry, job, &self.tracker).await?;
        let stream = ReceiverStream::new(updates).map(|update| {
            update
                .map(|u| proto::WatchJobResponse {
                    at: Some(timestamp(u.at)),
                    changes: u.changes,
                    removed: u.job.is_none(),
                    job: u.job.as_ref().map(job_to_wire),
                })
                .map_err(Status::from)
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

fn status_to_wire(s: JobStatus) -> proto::JobState {
    match s {
        JobStatus::Ok => proto::JobState::Ok,
        JobStatus::Crashed => proto::JobState::Crashed,
        JobStatus::Disabled => proto::JobState::Disabled,
        JobStatus::ShardingFlag => proto::JobState::ShardingFlag,
    }
}

/// The wire form of a job's state.
pub fn job_to_wire(job: &JobInfo) -> proto::JobDetail {
    proto::JobDetail {
        config: Some(proto::JobConfig {
            job_type: job_type_to_proto(job.job_type) as i32,
            ..to_proto(&job.config, &job.extras)
        }),
        state: status_to_wire(job.status) as i32,
        leader: job.leader.clone(),
        servers: job
            .servers
            .iter()
            .map(|s| proto::ServerInfo {
                ip: s.ip.clone(),
                disabled: s.disabled,
                instance_count: s.instance_count,
            })
            .collect(),
        instances: job
            .instances
            .iter()
            .map(|i| proto::InstanceInfo {
                instance_id: i.instance_id.clone(),
                server_ip: i.server_ip.clone(),
                items: i.items.clone(),
                leader: i.leader,
                via_sidecar: i.via_sidecar,
            })
            .collect(),
        items: job
            .items
            .iter()
            .map(|i| proto::ItemInfo {
                item: i.item,
                parameter: i.parameter.clone(),
                owner: i.owner.clone(),
                running: i.running,
                running_instance: i.running_instance.clone(),
                misfire: i.misfire,
                disabled: i.disabled,
                failover_instance: i.failover_instance.clone(),
                failover_pending: i.failover_pending,
                handoff: i.handoff,
            })
            .collect(),
        sharding_necessary: job.sharding_necessary,
    }
}

fn summary_to_wire(s: &JobSummary) -> proto::JobSummary {
    proto::JobSummary {
        job_name: s.job_name.clone(),
        cron: s.config.cron.clone().unwrap_or_default(),
        sharding_total_count: s.config.sharding_total_count,
        description: s.config.description.clone(),
        state: status_to_wire(s.status) as i32,
        instance_count: s.instance_count,
        server_count: s.server_count,
        leader: s.leader.clone(),
    }
}
