//! The sidecar process: connect the registry, serve gRPC, and shut down in order within the
//! grace: health NOT_SERVING, every job drained at once (workers told `Shutdown`, their work
//! answered or their leases run out, instances removed), session closed, exit.
//!
//! Every task the sidecar starts is tracked (a [`TaskTracker`]) and cancelled together (a
//! [`CancellationToken`]), so nothing outlives the shutdown: the job drivers and their child
//! tasks, the servers and their connections (gRPC and HTTP), the followers of `WatchJob` and of
//! the console's live pages, the timer (closed
//! after the drain). The registry tracks its session's own tasks (its loop, the heartbeat,
//! watch forwarders) and waits for them when it is closed.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::service::Routes;
use tracing::{info, warn};

use crate::api::admin::AdminApi;
use crate::api::connection::TrackedIo;
use crate::api::jobfile::DeclaredJob;
use crate::api::serve::Http2Settings;
use crate::api::worker::WorkerApi;
use crate::coordination::{Coordinator, CoordinatorSettings};
use crate::ops::history::{History, HistoryFileError};
use crate::ops::metrics::Metrics;
use crate::ops::OpsObserver;
use crate::proto::admin_service_server::AdminServiceServer;
use crate::proto::worker_service_server::WorkerServiceServer;
use crate::registry::{Registry, SessionState, ZkSettings};
use crate::schedule::{Timer, WarmUp};

mod config;
mod socket;

pub use config::Config;
use socket::clear_stale_socket;

/// Errors that stop the sidecar from starting.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot connect to ZooKeeper at {connect}: {source}")]
    Registry {
        connect: String,
        source: crate::registry::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    History(#[from] HistoryFileError),
    #[error("cannot build the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("invalid setting otlp_endpoint: {0}")]
    Telemetry(String),
    #[error("cannot create job {job} declared in the settings file: {message}")]
    DeclaredJob { job: String, message: String },
    #[error(transparent)]
    TracingDb(#[from] crate::ops::tracing_db::TracingDbError),
    /// A setting that proved unusable only once applied (a Unix socket others can use): the
    /// process exits with status 64 like for any bad setting.
    #[error(transparent)]
    Setting(#[from] crate::config::SettingsError),
}

impl RunError {
    /// The process's exit status: 64 (EX_USAGE) for a setting found unusable at start (the
    /// tracing database refused the login, a Unix socket others can use), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::TracingDb(_) | RunError::Setting(_) => 64,
            _ => 1,
        }
    }
}

/// Runs a sidecar until `shutdown` resolves, then drains: health NOT_SERVING, `Shutdown` to
/// every worker, instances removed, session closed.
///
/// # Errors
/// When the registry cannot be reached or the listen address cannot be bound.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let Config {
        settings,
        telemetry: telemetry_settings,
        tracing_db: tracing_db_settings,
        typed_jobs,
        jobs,
    } = config;
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    // The shutdown is watched from the start: one that comes while the sidecar still connects
    // ends it there, with nothing joined and nothing to drain.
    let stop = CancellationToken::new();
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            shutdown.await;
            stop.cancel();
        });
    }
    let stopped_while_starting = || {
        info!("shutting down before the sidecar started: nothing to drain");
    };
    // The tracing database first: a login it refuses stops the sidecar before it joins anything.
    let tracing_db_started = match &tracing_db_settings {
        Some(db) => {
            let connected = tokio::select! {
                c = crate::ops::tracing_db::connect_at_start(db, &tracker) => c?,
                () = stop.cancelled() => {
                    stopped_while_starting();
                    return Ok(());
                }
            };
            Some((db, connected))
        }
        None => None,
    };
    let registry = match &settings.zk {
        Some(connect) => {
            let zk = ZkSettings {
                connect: connect.clone(),
                namespace: settings.namespace.clone(),
                session_timeout: settings.session_timeout,
                connection_timeout: settings.connection_timeout,
                digest: settings.digest.clone(),
                // Well inside the self-fencing window (2/3 of the session timeout).
                op_timeout: settings.session_timeout / 4,
            };
            info!(zk = %connect, namespace = %settings.namespace, "connecting to ZooKeeper");
            let registry = tokio::select! {
                r = Registry::zookeeper(zk) => r.map_err(|source| RunError::Registry {
                    connect: connect.clone(),
                    source,
                })?,
                () = stop.cancelled() => {
                    stopped_while_starting();
                    return Ok(());
                }
            };
            info!(zk = %connect, namespace = %settings.namespace, "connected to ZooKeeper");
            registry
        }
        None => {
            warn!(
                "standalone mode: in-memory registry, single host only, all state is lost at exit; \
                 pass --zk HOSTS (or SHARDCAR_ZK) to coordinate with other hosts"
            );
            Registry::standalone()
        }
    };
    put_declared_jobs(&registry, jobs).await?;
    let history = Arc::new(match &settings.history_file {
        Some(path) => History::with_file(settings.history_size, path)?,
        None => History::new(settings.history_size),
    });
    let metrics = Arc::new(Metrics::new());
    let http_listener = match settings.http_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| RunError::Listen {
                    addr: addr.to_string(),
                    source,
                })?,
        ),
        None => None,
    };
    let access = Arc::new(settings.access.clone());
    tracker.spawn(crate::ops::metrics::track_session(
        registry.clone(),
        metrics.clone(),
        cancel.clone(),
    ));
    // Execution spans go out until the drain is over (the export task flushes on `cancel`).
    let telemetry = match &telemetry_settings {
        Some(t) => Some(
            crate::ops::telemetry::Telemetry::start(t, &tracker, cancel.clone())
                .map_err(RunError::Telemetry)?,
        ),
        None => None,
    };
    // Rows for the tracing tables are written until the drain is over (`close`, below).
    let tracing_db = tracing_db_started.map(|(db, started)| {
        Arc::new(crate::ops::tracing_db::TracingDb::spawn(
            db,
            started,
            metrics.clone(),
            &tracker,
        ))
    });
    let warm_up = registry
        .warm_up_hook()
        .filter(|_| !settings.zk_warm_up.is_zero())
        .map(|hook| WarmUp {
            lead: settings.zk_warm_up,
            hook: Box::new(hook),
        });
    let timer = Timer::spawn_with(
        &tracker,
        match settings.claim_lead {
            Some(lead) => crate::schedule::ClaimLead::fixed(lead),
            None => crate::schedule::ClaimLead::new(settings.claim_ahead),
        },
        warm_up,
    );
    let coordinator = Coordinator::new(
        registry.clone(),
        timer.clone(),
        CoordinatorSettings {
            ip: settings.advertise_ip.clone(),
            lease: settings.lease,
            session_timeout: settings.session_timeout,
        },
        Arc::new(OpsObserver {
            history: history.clone(),
            metrics: metrics.clone(),
            telemetry,
            tracing_db: tracing_db.clone(),
            alerts: crate::ops::alerts::Alerts::spawn(metrics.clone(), &tracker, cancel.clone()),
            handlers: Default::default(),
        }),
        tracker.clone(),
    );

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<WorkerServiceServer<WorkerApi>>().await;
    health.set_serving::<AdminServiceServer<AdminApi>>().await;
    let draining = CancellationToken::new();
    if let Some(listener) = http_listener {
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        info!(
            http = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            admin_token = access.token_required(),
            "serving the console at /, metrics at /metrics, probes at /healthz and /readyz"
        );
        let web = Arc::new(crate::web::Web {
            registry: registry.clone(),
            history: history.clone(),
            tracing_db: tracing_db_settings
                .as_ref()
                .map(|db| Arc::new(crate::ops::tracing_db::reader::Reader::new(db.clone()))),
            metrics: metrics.clone(),
            access: access.clone(),
            sessions: crate::web::session::Sessions::new(port),
            namespace: settings.namespace.clone(),
            zk: settings.zk.clone(),
            ip: settings.advertise_ip.clone(),
            draining: draining.clone(),
            cancel: cancel.clone(),
            tracker: tracker.clone(),
        });
        tracker.spawn(crate::web::serve(listener, web));
    }
    tracker.spawn(track_health(
        registry.clone(),
        health.clone(),
        draining.clone(),
        cancel.clone(),
    ));
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    let http2 = Http2Settings {
        keepalive_interval: settings.keepalive_interval,
        keepalive_timeout: settings.keepalive_timeout,
    };
    let routes = Routes::new(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(WorkerServiceServer::new(WorkerApi::new(
            coordinator.clone(),
        )))
        .add_service(AdminServiceServer::with_interceptor(
            {
                let admin = AdminApi::new(
                    registry.clone(),
                    history.clone(),
                    tracker.clone(),
                    coordinator.clone(),
                );
                match &tracing_db_settings {
                    Some(db) => admin.with_tracing_db(Arc::new(
                        crate::ops::tracing_db::reader::Reader::new(db.clone()),
                    )),
                    None => admin,
                }
            },
            crate::api::auth::admin_interceptor(access.clone()),
        ));

    let drained = CancellationToken::new();
    // Whether the drain ended with every local instance gone (each job's driver retires a
    // moment after it says so).
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let grace = settings.shutdown_grace;
    let (hard_deadline_tx, hard_deadline_rx) = tokio::sync::watch::channel(None);
    let signal = {
        let (coordinator, health, drained) = (coordinator.clone(), health.clone(), drained.clone());
        let released = released.clone();
        let draining = draining.clone();
        async move {
            stop.cancelled().await;
            let started = clock_now();
            let _ = hard_deadline_tx.send(Some(started));
            info!(
                grace_ms = grace.as_millis() as u64,
                "shutting down: draining workers"
            );
            draining.cancel();
            health
                .set_not_serving::<AdminServiceServer<AdminApi>>()
                .await;
            health
                .set_not_serving::<WorkerServiceServer<WorkerApi>>()
                .await;
            health
                .set_service_status("", tonic_health::ServingStatus::NotServing)
                .await;
            // Leave room within the grace to close the session and the listener.
            let margin = (grace / 10).min(Duration::from_secs(1));
            let all = coordinator.drain(started + grace - margin).await;
            released.store(all, std::sync::atomic::Ordering::SeqCst);
            drained.cancel();
        }
    };
    let listen = settings.listen.clone();
    // The SCRIPT and HTTP jobs run as workers of this very listener, once it is bound.
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel::<String>();
    {
        let (registry, which, cancel, tasks) = (
            registry.clone(),
            typed_jobs,
            cancel.clone(),
            tracker.clone(),
        );
        tracker.spawn(async move {
            if let Ok(target) = bound_rx.await {
                crate::exec::supervise(registry, target, which, cancel, tasks).await;
            }
        });
    }
    let serve = async {
        if let Some(path) = listen.strip_prefix("unix://") {
            clear_stale_socket(path.as_ref()).map_err(|source| RunError::Listen {
                addr: listen.clone(),
                source,
            })?;
            let listener =
                tokio::net::UnixListener::bind(path).map_err(|source| RunError::Listen {
                    addr: listen.clone(),
                    source,
                })?;
            if let Err(e) = crate::config::check_unix_socket(&listen, path.as_ref(), &access) {
                let _ = std::fs::remove_file(path);
                return Err(e.into());
            }
            info!(listen = %listen, ip = %settings.advertise_ip, "shardcar listening");
            let _ = bound_tx.send(listen.clone());
            let incoming = UnixListenerStream::new(listener).map(|c| c.map(TrackedIo::new));
            crate::api::serve::serve(routes, incoming, signal, http2).await;
        } else {
            let listener = tokio::net::TcpListener::bind(&listen)
                .await
                .map_err(|source| RunError::Listen {
                    addr: listen.clone(),
                    source,
                })?;
            info!(listen = %listen, ip = %settings.advertise_ip, "shardcar listening");
            if let Ok(bound) = listener.local_addr() {
                let _ = bound_tx.send(crate::exec::own_target(bound));
            }
            let incoming = TcpListenerStream::new(listener).map(|c| {
                c.inspect(|s| {
                    let _ = s.set_nodelay(true);
                })
                .map(TrackedIo::new)
            });
            crate::api::serve::serve(routes, incoming, signal, http2).await;
        }
        Ok::<(), RunError>(())
    };
    // The listener closes once the drain is over and its connections are done; a connection
    // that lingers does not hold the process past the grace. What follows the serving (the
    // session's close, the tasks' end) is bounded to fit in the grace too.
    let cleanup = (grace / 8).min(Duration::from_millis(400));
    let shutdown_started = std::sync::Arc::new(std::sync::Mutex::new(None));
    let hard_deadline = {
        let shutdown_started = shutdown_started.clone();
        async move {
            let mut rx = hard_deadline_rx;
            let started = loop {
                if let Some(at) = *rx.borrow_and_update() {
                    break at;
                }
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            *shutdown_started.lock().unwrap_or_else(|e| e.into_inner()) = Some(started);
            tokio::time::sleep_until((started + grace - cleanup).into()).await;
        }
    };
    let result = tokio::select! {
        result = serve => result,
        _ = hard_deadline => {
            warn!("the shutdown grace is over; exiting anyway");
            Ok(())
        }
    };
    let _ = drained;
    cancel.cancel();
    timer.close();
    tracker.close();
    let end = shutdown_started
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .map_or_else(|| clock_now() + cleanup, |s| s + grace);
    let left = || end.saturating_duration_since(clock_now());
    if let Some(db) = &tracing_db {
        // What is still queued goes out while the session closes, within the grace.
        db.close(end.checked_sub(Duration::from_millis(100)).unwrap_or(end));
    }
    if released.load(std::sync::atomic::Ordering::SeqCst) {
        // Every job answered its drain with no instance left; each driver retires a moment
        // later. Wait for that, briefly: a job still in the table then (a worker that
        // subscribed after its drain) keeps the session open to expire, as below.
        let until = clock_now() + (left() / 4).min(Duration::from_secs(1));
        while !coordinator.is_empty() && clock_now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    if coordinator.is_empty() {
        // Every instance left: close the session, so its ephemeral nodes go at once.
        let _ = tokio::time::timeout(left() / 2, registry.close()).await;
    } else {
        // Some worker may still hold a lease: leave the session to expire on its own (it
        // outlives every lease), so no peer takes their items before they have stopped.
        warn!("not every worker was released within the grace: the ZooKeeper session is left to expire");
    }
    let _ = tokio::time::timeout(
        left().saturating_sub(Duration::from_millis(50)),
        tracker.wait(),
    )
    .await;
    info!("shardcar stopped");
    result
}

/// NOT_SERVING while the registry session is not connected, and for good once draining.
async fn track_health(
    registry: Registry,
    health: tonic_health::server::HealthReporter,
    draining: CancellationToken,
    cancel: CancellationToken,
) {
    let mut session = registry.session();
    loop {
        let connected = matches!(*session.borrow_and_update(), SessionState::Connected { .. });
        let status = if connected && !draining.is_cancelled() {
            tonic_health::ServingStatus::Serving
        } else {
            tonic_health::ServingStatus::NotServing
        };
        health.set_service_status("", status).await;
        for service in [
            crate::proto::worker_service_server::SERVICE_NAME,
            crate::proto::admin_service_server::SERVICE_NAME,
        ] {
            health.set_service_status(service, status).await;
        }
        if draining.is_cancelled() {
            return;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = draining.cancelled() => {}
            changed = session.changed() => if changed.is_err() { return },
        }
    }
}

/// Creates the jobs the settings file declares, or replaces their config when they say
/// `overwrite = true`; an existing job otherwise keeps the registry's config (ElasticJob's rule).
async fn put_declared_jobs(registry: &Registry, jobs: Vec<DeclaredJob>) -> Result<(), RunError> {
    for job in jobs {
        let name = job.config.job_name.clone();
        let failed = |message: String| RunError::DeclaredJob {
            job: name.clone(),
            message,
        };
        let paths = crate::elasticjob::paths::JobPaths::new(&name);
        let exists = registry
            .exists(&paths.config())
            .await
            .map_err(|e| failed(e.to_string()))?
            .is_some();
        if exists && !job.config.overwrite {
            info!(job = %name, "declared job exists: the registry's config stands (overwrite = true replaces it)");
            continue;
        }
        crate::ops::jobs::put_job(registry, job.config, job.extras, job.job_type)
            .await
            .map_err(|e| failed(e.to_string()))?;
        info!(job = %name, "declared job written");
    }
    Ok(())
}

/// The monotonic clock, read where the process times its shutdown against its grace.
#[allow(
    clippy::disallowed_methods,
    reason = "the process's shutdown is timed against its grace on the clock: an I/O edge"
)]
fn clock_now() -> std::time::Instant {
    std::time::Instant::now()
}
