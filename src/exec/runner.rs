//! One typed job's instance on this sidecar: a worker of the sidecar's own Worker API that keeps
//! the proto's rules like any other worker (leases, declines, revokes, shutdown), and runs each
//! triggered item as a script or an HTTP call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tracing::{debug, info, warn};

use super::action::{self, ItemWork, RunEnd};
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::paths::JobPaths;
use crate::elasticjob::typed::{self, JobType};
use crate::proto;
use crate::proto::subscribe_response::Event;
use crate::proto::worker_service_client::WorkerServiceClient;
use crate::registry::Registry;

/// The longest a stopped script gets between SIGTERM and SIGKILL.
const KILL_AFTER: Duration = Duration::from_secs(2);
/// The longest an error text may be (the Worker API's limit).
const MAX_ERROR: usize = 16384;

/// Why a job's runner ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// For good, until the job is created again or the sidecar restarts: the instance was shut
    /// down, the job was removed, the sidecar is stopping, or the job cannot be joined.
    Stopped(String),
    /// The stream ended for a reason that may pass (the registry was away): join again.
    Retry(String),
}

/// What one typed job's runner needs.
pub struct JobRunner {
    pub client: WorkerServiceClient<Channel>,
    pub registry: Registry,
    pub job_name: String,
    pub job_type: JobType,
    /// The instance id is `{ip}@-@{suffix}`: the sidecar's pid, unless configured.
    pub instance_suffix: String,
    pub stop: CancellationToken,
}

/// The lease as the worker sees it: valid until this instant, if at all.
type LeaseEnd = Arc<Mutex<Option<Instant>>>;

#[allow(
    clippy::disallowed_methods,
    reason = "the typed-job runner is a worker: it times its lease on the host's clock, as every worker does"
)]
fn lease_valid(lease: &LeaseEnd) -> bool {
    lease
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .is_some_and(|end| Instant::now() < end)
}

/// An item running now: its execution, and the token that stops it.
struct Running {
    execution_id: String,
    stop: CancellationToken,
}

impl JobRunner {
    /// Subscribes and runs triggered items until the stream ends or `stop` fires.
    pub async fn run(mut self) -> Ended {
        let request = proto::SubscribeRequest {
            job_name: self.job_name.clone(),
            pid: std::process::id(),
            instance_suffix: self.instance_suffix.clone(),
            labels: [(
                "shardcar.runner".to_string(),
                self.job_type.root_data().to_string(),
            )]
            .into(),
            ..Default::default()
        };
        let mut stream = match self.client.subscribe(request).await {
            Ok(response) => response.into_inner(),
            Err(status) => {
                return match status.code() {
                    tonic::Code::NotFound
                    | tonic::Code::InvalidArgument
                    | tonic::Code::PermissionDenied => {
                        Ended::Stopped(format!("cannot join: {}", status.message()))
                    }
                    _ => Ended::Retry(format!("cannot join: {}", status.message())),
                }
            }
        };
        let lease: LeaseEnd = Arc::new(Mutex::new(None));
        let mut running: HashMap<i32, Running> = HashMap::new();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(i32, String)>();
        let mut instance_id = String::new();
        let mut shutting_down = false;
        let ended = loop {
            let lease_end = *lease.lock().unwrap_or_else(|e| e.into_inner());
            tokio::select! {
                () = self.stop.cancelled() => break Ended::Stopped("the sidecar is stopping".into()),
                () = sleep_until(lease_end) => {
                    // The lease ran out: stop everything at once; each item declines once stopped.
                    *lease.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    if !running.is_empty() {
                        warn!(job = %self.job_name, items = running.len(), "lease ran out: stopping the running items");
                    }
                    for r in running.values() {
                        r.stop.cancel();
                    }
                }
                Some((item, execution_id)) = done_rx.recv() => {
                    if running.get(&item).is_some_and(|r| r.execution_id == execution_id) {
                        running.remove(&item);
                    }
                }
                message = stream.message() => match message {
                    Ok(Some(proto::SubscribeResponse { event: Some(event) })) => match event {
                        Event::Registered(r) => {
                            info!(job = %self.job_name, instance = %r.instance_id, kind = self.job_type.root_data(), "running the job's items on this sidecar");
                            instance_id = r.instance_id;
                        }
                        Event::Lease(l) => {
                            *lease.lock().unwrap_or_else(|e| e.into_inner()) = lease_end_of(&l);
                        }
                        Event::Trigger(t) => {
                            self.trigger(t, &instance_id, shutting_down, &lease, &mut running, &done_tx).await;
                        }
                        Event::Revoke(r) => {
                            debug!(job = %self.job_name, items = ?r.items, reason = %r.reason, "revoked");
                            for item in &r.items {
                                if let Some(run) = running.get(item) {
                                    run.stop.cancel();
                                }
                            }
                        }
                        Event::Shutdown(s) => {
                            info!(job = %self.job_name, reason = %s.reason, "shutdown: taking no new work");
                            shutting_down = true;
                        }
                        Event::Assignment(_) => {}
                    },
                    Ok(Some(_)) => {}
                    Ok(None) if shutting_down => break Ended::Stopped("shut down".into()),
                    Ok(None) => break Ended::Retry("the stream ended".into()),
                    Err(status) if status.code() == tonic::Code::NotFound => {
                        break Ended::Stopped(format!("the job is gone: {}", status.message()))
                    }
                    Err(status) => break Ended::Retry(format!("the stream failed: {}", status.message())),
                },
            }
        };
        // The stream is over: whatever runs is void (its answers would be refused). Stop it.
        *lease.lock().unwrap_or_else(|e| e.into_inner()) = None;
        for r in running.values() {
            r.stop.cancel();
        }
        ended
    }

    async fn trigger(
        &self,
        t: proto::Trigger,
        instance_id: &str,
        shutting_down: bool,
        lease: &LeaseEnd,
        running: &mut HashMap<i32, Running>,
        done: &mpsc::UnboundedSender<(i32, String)>,
    ) {
        let items: Vec<i32> = t.items.iter().map(|i| i.item).collect();
        let refuse = if shutting_down {
            Some("shutting down".to_string())
        } else if !lease_valid(lease) {
            Some("no valid lease".to_string())
        } else {
            None
        };
        if let Some(reason) = refuse {
            // Not run at all: given back, to run again elsewhere or at the next fire.
            debug!(job = %self.job_name, items = ?items, %reason, "declining a trigger");
            let decline = proto::DeclineRequest {
                instance_id: instance_id.to_string(),
                execution_id: t.execution_id.clone(),
                items,
                reason,
            };
            let mut client = self.client.clone();
            if let Err(e) = client.decline(decline).await {
                debug!(job = %self.job_name, error = %e, "decline not delivered");
            }
            return;
        }
        // The props are read at every trigger, as ElasticJob's executors read the job's config.
        let action = match self.action().await {
            Ok(action) => Arc::new(action),
            Err(error) => {
                // A job that cannot run as configured fails, where its history shows why.
                warn!(job = %self.job_name, items = ?items, %error, "the job cannot run as configured");
                for item in items {
                    let mut client = self.client.clone();
                    let failure = proto::ReportFailureRequest {
                        instance_id: instance_id.to_string(),
                        execution_id: t.execution_id.clone(),
                        item,
                        error: cut(&error, MAX_ERROR),
                    };
                    if let Err(e) = client.report_failure(failure).await {
                        debug!(job = %self.job_name, error = %e, "failure not delivered");
                    }
                }
                return;
            }
        };
        for shard in &t.items {
            let parameter = Some(shard.parameter.as_str()).filter(|p| !p.is_empty());
            let work = ItemWork {
                job_name: self.job_name.clone(),
                execution_id: t.execution_id.clone(),
                item: shard.item,
                fencing_token: t
                    .fencing_tokens
                    .get(&shard.item)
                    .copied()
                    .unwrap_or_default(),
                context: typed::sharding_context_json(
                    &self.job_name,
                    &t.task_id,
                    t.sharding_total_count,
                    &t.job_parameter,
                    shard.item,
                    parameter,
                ),
            };
            let stop = self.stop.child_token();
            if let Some(previous) = running.insert(
                shard.item,
                Running {
                    execution_id: t.execution_id.clone(),
                    stop: stop.clone(),
                },
            ) {
                // A new execution of the item supersedes what still ran of it.
                previous.stop.cancel();
            }
            tokio::spawn(run_item(
                self.client.clone(),
                instance_id.to_string(),
                action.clone(),
                work,
                stop,
                lease.clone(),
                done.clone(),
            ));
        }
    }

    /// What the job runs, from its config's props as the registry has them now.
    async fn action(&self) -> Result<typed::Action, String> {
        let paths = JobPaths::new(&self.job_name);
        let node = self
            .registry
            .get(&paths.config())
            .await
            .map_err(|e| format!("cannot read the job's config: {e}"))?
            .ok_or_else(|| "the job's config is gone".to_string())?;
        let config = JobConfiguration::from_yaml(&node.data)
            .map_err(|e| format!("cannot read the job's config: {e}"))?;
        let props = config.props.into_iter().collect();
        typed::action(self.job_type, &props).map_err(|e| e.to_string())
    }
}

/// Runs one item and answers for it: `Complete` or `ReportFailure` while the lease is valid,
/// else (stopped, or the lease ran out meanwhile) `Decline`.
#[allow(
    clippy::disallowed_methods,
    reason = "the typed-job runner is a worker: it times its lease on the host's clock, as every worker does"
)]
async fn run_item(
    mut client: WorkerServiceClient<Channel>,
    instance_id: String,
    action: Arc<typed::Action>,
    work: ItemWork,
    stop: CancellationToken,
    lease: LeaseEnd,
    done: mpsc::UnboundedSender<(i32, String)>,
) {
    let kill_after = {
        let end = *lease.lock().unwrap_or_else(|e| e.into_inner());
        end.map_or(KILL_AFTER, |end| {
            end.saturating_duration_since(Instant::now()) / 2
        })
        .min(KILL_AFTER)
    };
    let end = action::run(&action, &work, &stop, kill_after).await;
    let valid = !stop.is_cancelled() && lease_valid(&lease);
    let (execution_id, item) = (work.execution_id.clone(), work.item);
    let answer = match (&end, valid) {
        (RunEnd::Completed, true) => {
            client
                .complete(proto::CompleteRequest {
                    instance_id,
                    execution_id: execution_id.clone(),
                    items: vec![item],
                })
                .await
        }
        (RunEnd::Failed(error), true) => {
            warn!(job = %work.job_name, item, %error, "item failed");
            client
                .report_failure(proto::ReportFailureRequest {
                    instance_id,
                    execution_id: execution_id.clone(),
                    item,
                    error: cut(error, MAX_ERROR),
                })
                .await
                .map(|r| r.map(|_| proto::CompleteResponse {}))
        }
        _ => client
            .decline(proto::DeclineRequest {
                instance_id,
                execution_id: execution_id.clone(),
                items: vec![item],
                reason: "stopped: revoked, lease ran out or the stream ended".into(),
            })
            .await
            .map(|r| r.map(|_| proto::CompleteResponse {})),
    };
    if let Err(status) = answer {
        debug!(job = %work.job_name, item, end = ?end, error = %status.message(), "answer not accepted");
    }
    let _ = done.send((item, execution_id));
}

/// The end of a lease: the earlier of `valid_for` from now and `expires_at` (host clock); a
/// renewal read after its `expires_at` is void.
#[allow(
    clippy::disallowed_methods,
    reason = "the typed-job runner is a worker: it times its lease on the host's clock, as every worker does"
)]
fn lease_end_of(l: &proto::Lease) -> Option<Instant> {
    let valid_for = l
        .valid_for
        .as_ref()
        .and_then(|d| Duration::try_from(*d).ok())?;
    let mut end = Instant::now() + valid_for;
    if let Some(at) = &l.expires_at {
        let at = SystemTime::UNIX_EPOCH
            + Duration::new(at.seconds.max(0) as u64, at.nanos.max(0) as u32);
        match at.duration_since(SystemTime::now()) {
            Ok(left) => end = end.min(Instant::now() + left),
            Err(_) => return None,
        }
    }
    Some(end)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}
