//! SCRIPT and HTTP jobs, run by the sidecar itself: ElasticJob's typed jobs, which need no
//! worker code. The sidecar finds them in the namespace (their job root names the type), and
//! for each one runs a worker of its own Worker API ([`runner`]), over a real connection, so
//! the items run under exactly the leases, fencing, revokes, timeouts and drain of every
//! other worker. Each item is a child process or an HTTP call ([`action`]).
//!
//! Which typed jobs a sidecar runs is its `typed_jobs` setting: every one in the namespace
//! (`all`), only those its settings file declares (`declared`), or none.

pub mod action;
pub mod runner;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::elasticjob::paths::JobPaths;
use crate::elasticjob::typed::JobType;
use crate::proto::worker_service_client::WorkerServiceClient;
use crate::registry::Registry;
use runner::{Ended, JobRunner};

/// How often the namespace is looked at for typed jobs, and how long a runner that could not
/// join waits before it tries again.
const POLL: Duration = Duration::from_secs(1);
/// Every how many looks the roots of worker jobs are read again.
const RECHECK_EVERY: u64 = 5;

/// Which typed jobs this sidecar runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypedJobs {
    /// Every SCRIPT and HTTP job of the namespace.
    All,
    /// Those named (the settings file's `[[jobs]]`).
    Declared(BTreeSet<String>),
    None,
}

impl TypedJobs {
    fn runs(&self, job: &str) -> bool {
        match self {
            TypedJobs::All => true,
            TypedJobs::Declared(names) => names.contains(job),
            TypedJobs::None => false,
        }
    }
}

/// Runs the typed jobs this sidecar should run until `cancel` fires. `target` is the sidecar's
/// own Worker API (`host:port` or `unix:///path`), bound already.
pub async fn supervise(
    registry: Registry,
    target: String,
    which: TypedJobs,
    cancel: CancellationToken,
    tracker: TaskTracker,
) {
    if which == TypedJobs::None {
        return;
    }
    let channel = match channel(&target) {
        Ok(channel) => channel,
        Err(e) => {
            warn!(target = %target, error = %e, "cannot run SCRIPT and HTTP jobs: no channel to the sidecar's own Worker API");
            return;
        }
    };
    let client = WorkerServiceClient::new(channel);
    // Jobs by name: the type their root names (read once: ElasticJob never rewrites it).
    let mut types: HashMap<String, Option<JobType>> = HashMap::new();
    // Typed jobs with a runner, and those whose runner stopped for good.
    let mut running: HashMap<String, CancellationToken> = HashMap::new();
    let mut stopped: BTreeSet<String> = BTreeSet::new();
    let (ended_tx, mut ended_rx) = tokio::sync::mpsc::unbounded_channel::<(String, Ended)>();
    let mut retry_at: HashMap<String, tokio::time::Instant> = HashMap::new();
    let mut polls: u64 = 0;
    loop {
        // A failed look changes nothing (what was learnt, and the jobs whose instance was shut
        // down, are kept): the next look tries again.
        let listed: Option<BTreeSet<String>> = match registry.children("/").await {
            Ok(children) => Some(children.into_iter().filter(|j| which.runs(j)).collect()),
            Err(e) => {
                debug!(error = %e, "cannot list the namespace's jobs");
                None
            }
        };
        if let Some(jobs) = listed {
            // A job that is gone is forgotten (its runner ends by itself), so that a job created
            // again under the same name is looked at afresh.
            types.retain(|job, _| jobs.contains(job));
            stopped.retain(|job| jobs.contains(job));
            // The roots of jobs not seen before, and now and then those of worker jobs again (a
            // `ctl job put` of a typed job may give an empty root its type), in one multi-read.
            polls += 1;
            let recheck = polls.is_multiple_of(RECHECK_EVERY);
            let unread: Vec<String> = jobs
                .iter()
                .filter(|j| match types.get(*j) {
                    None => true,
                    Some(None) => recheck,
                    Some(Some(_)) => false,
                })
                .cloned()
                .collect();
            if !unread.is_empty() {
                let roots: Vec<String> = unread.iter().map(|j| JobPaths::new(j).root()).collect();
                match registry.get_many(&roots).await {
                    Ok(nodes) => {
                        for (job, node) in unread.into_iter().zip(nodes) {
                            if let Some(node) = node {
                                types.insert(job, JobType::from_root_data(&node.data));
                            }
                        }
                    }
                    Err(e) => debug!(error = %e, "cannot read the job roots"),
                }
            }
            for job in &jobs {
                let Some(Some(job_type)) = types.get(job) else {
                    continue;
                };
                let due = retry_at.get(job).is_none_or(|at| *at <= clock_now());
                if running.contains_key(job) || stopped.contains(job) || !due {
                    continue;
                }
                // The job needs its config before it can be joined.
                match registry.exists(&JobPaths::new(job).config()).await {
                    Ok(Some(_)) => {}
                    _ => continue,
                }
                let stop = cancel.child_token();
                running.insert(job.clone(), stop.clone());
                let job_runner = JobRunner {
                    client: client.clone(),
                    registry: registry.clone(),
                    job_name: job.clone(),
                    job_type: *job_type,
                    instance_suffix: std::process::id().to_string(),
                    stop,
                };
                let (job, ended_tx) = (job.clone(), ended_tx.clone());
                tracker.spawn(async move {
                    let ended = job_runner.run().await;
                    let _ = ended_tx.send((job, ended));
                });
            }
        }
        tokio::select! {
            () = cancel.cancelled() => break,
            () = tokio::time::sleep(POLL) => {}
            Some((job, ended)) = ended_rx.recv() => {
                running.remove(&job);
                match ended {
                    Ended::Stopped(reason) => {
                        info!(job = %job, %reason, "no longer running the job on this sidecar");
                        stopped.insert(job);
                    }
                    Ended::Retry(reason) => {
                        warn!(job = %job, %reason, "joining the job again");
                        retry_at.insert(job, clock_now() + POLL);
                    }
                }
            }
        }
    }
    for stop in running.values() {
        stop.cancel();
    }
}

/// A channel to the sidecar's own Worker API, connected on first use.
fn channel(target: &str) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    use tonic::transport::Endpoint;
    if let Some(path) = target.strip_prefix("unix://") {
        let path = path.to_string();
        let connector = tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        });
        return Ok(Endpoint::from_static("http://localhost").connect_with_connector_lazy(connector));
    }
    Ok(Endpoint::from_shared(format!("http://{target}"))?.connect_lazy())
}

/// The address to reach a listener bound at `bound` from this host (a wildcard address is
/// reached on loopback).
pub fn own_target(bound: std::net::SocketAddr) -> String {
    let ip = match bound.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    std::net::SocketAddr::new(ip, bound.port()).to_string()
}

/// The monotonic clock, read where the typed-job supervisor polls the namespace.
#[allow(
    clippy::disallowed_methods,
    reason = "the typed-job supervisor polls the namespace on the clock: an I/O edge"
)]
fn clock_now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}
