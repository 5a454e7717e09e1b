//! The HTTP listener (`http_listen`): the web console at `/`, Prometheus metrics at `/metrics`,
//! and the probes `/healthz` (the process serves) and `/readyz` (ZooKeeper connected and not
//! draining), served by axum on hyper's HTTP/1.1 server.
//!
//! The console is server-rendered HTML with one small script and no build step: the jobs list
//! ([`pages`]), a job with its items, instances, servers and recent executions ([`job`]), updated live by
//! server-sent events from [`crate::ops::watch`] and the history ([`live`]), the servers of the
//! namespace, and the actions of ElasticJob's console ([`actions`]: trigger, disable and enable,
//! shut down, edit the configuration, remove), each confirmed first. Every action goes through
//! the code of the Admin API — [`crate::ops::jobs`], and for a configuration the validation of
//! `PutJob` ([`crate::api::admin::put_job`]) — so ElasticJob's JVMs and the other sidecars see
//! it as they see the Admin API's. Who may read and act is [`session`]'s.
//!
//! This layer comes after `api`: it knows HTTP and HTML, and reaches the namespace only through
//! `ops` and the Admin API's validation.

pub mod actions;
pub mod form;
pub mod html;
pub mod job;
pub mod live;
pub mod pages;
pub mod retries;
pub mod session;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

use crate::access::Access;
use crate::ops::history::History;
use crate::ops::metrics::Metrics;
use crate::registry::{Registry, SessionState};

/// A client must send its request head within this long.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// At shutdown, connections get this long to finish the response they are writing.
const CLOSE_GRACE: Duration = Duration::from_millis(500);

/// What the HTTP listener serves from.
pub struct Web {
    pub registry: Registry,
    pub history: Arc<History>,
    /// Set with `tracing_db`: the job page's recent executions come from ElasticJob's tracing
    /// tables (every sidecar's and ElasticJob's), as `ListExecutions` answers.
    pub tracing_db: Option<Arc<crate::ops::tracing_db::reader::Reader>>,
    pub metrics: Arc<Metrics>,
    pub access: Arc<Access>,
    pub sessions: session::Sessions,
    pub namespace: String,
    /// The ZooKeeper connect string (`None`: standalone).
    pub zk: Option<String>,
    /// This sidecar's advertised IP.
    pub ip: String,
    /// Cancelled when the drain starts: `/readyz` answers 503 from then on.
    pub draining: CancellationToken,
    /// Cancelled when the sidecar stops: the listener and every live page end.
    pub cancel: CancellationToken,
    /// Connections and live pages run here, so a shutdown waits for them.
    pub tracker: TaskTracker,
}

impl Web {
    /// The header every page shows.
    pub fn header(&self) -> html::Header {
        html::Header {
            namespace: self.namespace.clone(),
            zk: html::zk_state(&self.registry.session().borrow(), self.zk.is_none()),
            zk_connect: self.zk.clone(),
            ip: self.ip.clone(),
        }
    }
}

/// The routes of the listener.
pub fn router(web: Arc<Web>) -> Router {
    Router::new()
        .route("/", get(pages::jobs))
        .route("/servers", get(pages::servers))
        .route("/jobs/{job}", get(job::page))
        .route("/jobs/{job}/live", get(live::job))
        .route(
            "/jobs/{job}/edit",
            get(actions::edit_form).post(actions::edit),
        )
        .route("/jobs/{job}/trigger", post(actions::trigger))
        .route("/jobs/{job}/disable", post(actions::disable_job))
        .route("/jobs/{job}/enable", post(actions::enable_job))
        .route("/jobs/{job}/remove", post(actions::remove))
        .route(
            "/jobs/{job}/items/{item}/disable",
            post(actions::disable_item),
        )
        .route(
            "/jobs/{job}/items/{item}/enable",
            post(actions::enable_item),
        )
        .route(
            "/jobs/{job}/servers/{ip}/disable",
            post(actions::disable_job_server),
        )
        .route(
            "/jobs/{job}/servers/{ip}/enable",
            post(actions::enable_job_server),
        )
        .route(
            "/jobs/{job}/instances/{id}/shutdown",
            post(actions::shutdown_job_instance),
        )
        .route("/servers/{ip}/disable", post(actions::disable_server))
        .route("/servers/{ip}/enable", post(actions::enable_server))
        .route("/instances/{id}/shutdown", post(actions::shutdown_instance))
        .route("/cron/preview", get(pages::cron_preview))
        .route("/login", get(session::login_form).post(session::login))
        .route("/logout", post(session::logout))
        .route("/static/console.css", get(css))
        .route("/static/console.js", get(js))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .layer(axum::middleware::map_response(security_headers))
        .with_state(web)
}

/// Serves `web` on `listener` until `web.cancel`; each connection runs on `web.tracker`.
///
/// # Cancellation safety
/// Stops accepting at once; open connections finish their response (live pages end) within
/// [`CLOSE_GRACE`].
pub async fn serve(listener: TcpListener, web: Arc<Web>) {
    let app = router(web.clone());
    loop {
        let accepted = tokio::select! {
            _ = web.cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                debug!(error = %e, "the HTTP listener cannot accept");
                tokio::select! {
                    _ = web.cancel.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let service = TowerToHyperService::new(app.clone());
        let cancel = web.cancel.clone();
        web.tracker.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                _ = cancel.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    tokio::time::timeout(CLOSE_GRACE, connection)
                        .await
                        .unwrap_or(Ok(()))
                }
            };
            if let Err(e) = result {
                debug!(peer = %peer, error = %e, "HTTP connection ended with an error");
            }
        });
    }
}

/// Headers on every response: no framing, no sniffing, no referrer, and a content policy that
/// lets the pages load only their own style sheet and script.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

async fn css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        html::CSS,
    )
        .into_response()
}

async fn js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        html::JS,
    )
        .into_response()
}

/// `GET /metrics`: OpenMetrics text. Open like the probes: Prometheus scrapes it.
async fn metrics(axum::extract::State(web): axum::extract::State<Arc<Web>>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::ops::metrics::CONTENT_TYPE)],
        web.metrics.render(),
    )
        .into_response()
}

/// `GET /healthz`: the process serves.
async fn healthz() -> Response {
    (StatusCode::OK, "ok\n").into_response()
}

/// `GET /readyz`: 200 while ZooKeeper is connected and the sidecar is not draining, else 503
/// saying which.
async fn readyz(axum::extract::State(web): axum::extract::State<Arc<Web>>) -> Response {
    if web.draining.is_cancelled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready: draining\n").into_response();
    }
    let state = web.registry.session().borrow().clone();
    match state {
        SessionState::Connected { .. } => (StatusCode::OK, "ready\n").into_response(),
        other => {
            let (text, _) = html::zk_state(&other, false);
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: ZooKeeper {text}\n"),
            )
                .into_response()
        }
    }
}

async fn not_found(uri: axum::http::Uri) -> Response {
    (
        StatusCode::NOT_FOUND,
        format!(
            "{} not found: the console is at /, metrics at /metrics, probes at /healthz and /readyz\n",
            uri.path()
        ),
    )
        .into_response()
}

#[cfg(test)]
mod tests;
