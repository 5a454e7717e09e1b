//! The `shardcar.v1.AdminService`: operations on the namespace for `shardcar ctl` and any UI.
//! Each call validates its request (errors name the field) and hands it to [`crate::ops::jobs`],
//! which reads and writes ElasticJob's layout; `ListExecutions` reads this sidecar's
//! [`History`]; `WatchJob` follows the job's subtree with one recursive watch.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status};

use crate::api::convert::{from_proto, job_type_from_proto, job_type_to_proto, to_proto};
use crate::coordination::trace::TraceParent;
use crate::coordination::Coordinator;
use crate::elasticjob::paths::{JobNode, JobPaths, ServerStatus};
use crate::ops::history::History;
use crate::ops::jobs::{self, check_job_name, AdminError, JobInfo, JobStatus, JobSummary};
use crate::proto;
use crate::proto::admin_service_server::AdminService;
use crate::registry::{Registry, WatchEvent};

/// Changes arriving within this long of each other are reported in one `WatchJobResponse`.
const WATCH_DEBOUNCE: Duration = Duration::from_millis(100);
/// `WatchJobResponse` messages buffered for a slow watcher before the watch waits for it.
const WATCH_BUFFER: usize = 16;

/// The Admin service of one sidecar.
pub struct AdminApi {
    registry: Registry,
    history: Arc<History>,
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
            tracker,
            coordinator,
        }
    }
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

fn now() -> prost_types::Timestamp {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
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
        if config.job_name.is_empty() {
            return Err(Status::from(AdminError::InvalidArgument {
                field: "config.job_name".into(),
                message: "must name the job".into(),
            }));
        }
        check_job_name("config.job_name", &config.job_name)?;
        let (job_config, extras) = from_proto(&config.job_name, &config, false)?;
        let job_type = job_type_from_proto(&config)?;
        let created = jobs::put_job(&self.registry, job_config, extras, job_type).await?;
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
        let instance_ids = jobs::trigger_job(&self.registry, job).await?;
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
        let executions = self
            .history
            .recent(job, req.limit as usize)
            .iter()
            .map(crate::api::events::execution_info)
            .collect();
        Ok(Response::new(proto::ListExecutionsResponse { executions }))
    }

    async fn watch_job(
        &self,
        request: Request<proto::WatchJobRequest>,
    ) -> Result<Response<Self::WatchJobStream>, Status> {
        let req = request.into_inner();
        let job = job_name(&req.job_name)?.to_string();
        let paths = JobPaths::new(&job);
        // Watch first, then read: no change can fall between the two.
        let watch = self
            .registry
            .watch_recursive(&paths.root())
            .await
            .map_err(AdminError::from)?;
        let first = job_to_wire(&jobs::get_job(&self.registry, &job).await?);
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        self.tracker
            .spawn(follow(self.registry.clone(), paths, watch, first, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Describes a change for a person, relative to the job root; `None` for nodes that change
/// all the time without meaning anything to an operator (latch contenders, the clock node).
fn describe(paths: &JobPaths, event: &WatchEvent) -> Option<String> {
    let (verb, path) = match event {
        WatchEvent::Created(p) => ("created", p),
        WatchEvent::Deleted(p) => ("deleted", p),
        WatchEvent::DataChanged(p) => ("changed", p),
        WatchEvent::Resync => return Some("reconnected to the registry: state re-read".into()),
    };
    match paths.classify(path) {
        JobNode::ElectionLatch | JobNode::FailoverLatch => return None,
        JobNode::Other if path.ends_with("systemTime/current") => return None,
        _ => {}
    }
    let root = paths.root();
    let relative = path
        .strip_prefix(&root)
        .map(|r| r.trim_start_matches('/'))
        .filter(|r| !r.is_empty())
        .unwrap_or("(job root)");
    Some(format!("{verb} {relative}"))
}

/// Sends the first state, then a new state after each batch of changes, until the client goes
/// away or the job is removed.
async fn follow(
    registry: Registry,
    paths: JobPaths,
    mut watch: crate::registry::Watch,
    first: proto::JobDetail,
    tx: mpsc::Sender<Result<proto::WatchJobResponse, Status>>,
) {
    let message = proto::WatchJobResponse {
        at: Some(now()),
        changes: Vec::new(),
        job: Some(first),
        removed: false,
    };
    if tx.send(Ok(message)).await.is_err() {
        return;
    }
    loop {
        let event = tokio::select! {
            _ = tx.closed() => return,
            event = watch.next() => match event {
                Some(event) => event,
                None => return,
            },
        };
        let mut changes: Vec<String> = describe(&paths, &event).into_iter().collect();
        tokio::time::sleep(WATCH_DEBOUNCE).await;
        while let Some(event) = watch.try_next() {
            changes.extend(describe(&paths, &event));
        }
        if changes.is_empty() {
            continue;
        }
        let message = match jobs::get_job(&registry, paths.job_name()).await {
            Ok(job) => proto::WatchJobResponse {
                at: Some(now()),
                changes,
                job: Some(job_to_wire(&job)),
                removed: false,
            },
            Err(AdminError::JobNotFound(_)) => {
                let removed = proto::WatchJobResponse {
                    at: Some(now()),
                    changes,
                    job: None,
                    removed: true,
                };
                let _ = tx.send(Ok(removed)).await;
                return;
            }
            Err(e) => {
                let _ = tx.send(Err(e.into())).await;
                return;
            }
        };
        if tx.send(Ok(message)).await.is_err() {
            return;
        }
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
