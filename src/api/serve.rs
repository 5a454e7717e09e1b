//! The gRPC listener's connections: HTTP/2 served by hyper, requests routed by tonic.
//!
//! tonic's own serving loop takes hyper's defaults, and one of them stamps a `Date` header on
//! every response. A sidecar's connections are long-lived and each carries answers every
//! second: every new date goes into that connection's HPACK table (the header compression
//! state each side keeps, up to 4 KiB of entries by default), so each of a thousand
//! connections held ~60 dates it would never send again, ~6 KB of memory apiece, and every
//! response paid to encode one. gRPC has no use for the header; this loop serves the same
//! routes with the same HTTP/2 settings as tonic's (keepalive from the sidecar's settings,
//! the rest left where tonic leaves them), without it.
//!
//! What tonic's loop adds per request is kept: each request carries its connection's
//! [`ConnState`] (the worker service reads who closed a stream), and a `grpc-timeout` the
//! caller sends ends the call with `CANCELLED` when it runs out. On the shutdown signal the
//! listener closes, every connection is asked to finish (HTTP/2 GOAWAY: calls in progress
//! complete, no new ones start), and serving ends when they have closed. A failed accept (out
//! of file descriptors, say) is tried again after a pause of 100 ms, not at once in a loop.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_stream::{Stream, StreamExt};
use tonic::service::Routes;
use tonic::Status;
use tower::ServiceExt;
use tracing::{debug, warn};

use crate::api::connection::{ConnState, TrackedIo};

/// How long the listener waits after a failed accept before it accepts again.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// HTTP/2 settings of the gRPC listener.
#[derive(Debug, Clone, Copy)]
pub struct Http2Settings {
    /// How often an idle connection is pinged.
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the connection is closed.
    pub keepalive_timeout: Duration,
}

/// Serves `routes` on every connection of `incoming` until `signal` completes, then closes the
/// listener, asks each connection to finish and returns once they all have.
pub async fn serve<I, IO, E, F>(routes: Routes, incoming: I, signal: F, settings: Http2Settings)
where
    I: Stream<Item = Result<TrackedIo<IO>, E>>,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    E: std::fmt::Display,
    F: Future<Output = ()>,
{
    let routes = routes.prepare();
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(settings.keepalive_interval))
        .keep_alive_timeout(settings.keepalive_timeout)
        // Where tonic's server leaves them (it passes `None` for each).
        .max_concurrent_streams(None)
        .max_pending_accept_reset_streams(None)
        .max_local_error_reset_streams(None)
        .auto_date_header(false);
    // Each connection holds a receiver; the closing of all of them tells that every
    // connection has ended.
    let (finish_tx, finish_rx) = tokio::sync::watch::channel(());
    {
        let mut incoming = std::pin::pin!(incoming);
        let mut signal = std::pin::pin!(signal);
        loop {
            let io = tokio::select! {
                _ = &mut signal => break,
                io = incoming.next() => io,
            };
            let io = match io {
                Some(Ok(io)) => io,
                Some(Err(e)) => {
                    // Out of file descriptors, say: accepting again at once would fail again
                    // at once, in a loop that keeps a core busy until one is freed.
                    warn!(error = %e, pause_ms = ACCEPT_PAUSE.as_millis() as u64,
                          "accepting a gRPC connection failed; accepting again after a pause");
                    tokio::select! {
                        _ = &mut signal => break,
                        _ = tokio::time::sleep(ACCEPT_PAUSE) => continue,
                    }
                }
                None => break,
            };
            let state = io.state();
            let service = {
                let routes = routes.clone();
                hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                    call(routes.clone(), state.clone(), request)
                })
            };
            let connection = builder.serve_connection(TokioIo::new(io), service);
            let mut finish = finish_rx.clone();
            tokio::spawn(async move {
                let mut connection = std::pin::pin!(connection);
                let ended = tokio::select! {
                    ended = connection.as_mut() => Some(ended),
                    _ = finish.changed() => None,
                };
                let ended = match ended {
                    Some(ended) => ended,
                    None => {
                        connection.as_mut().graceful_shutdown();
                        connection.await
                    }
                };
                if let Err(e) = ended {
                    debug!(error = %e, "a gRPC connection ended with an error");
                }
                drop(finish);
            });
        }
        // The listener closes here, with `incoming`.
    }
    let _ = finish_tx.send(());
    drop(finish_rx);
    finish_tx.closed().await;
}

/// One request: its connection's state in its extensions, routed, bounded by the caller's
/// `grpc-timeout` if it sent one.
async fn call<B>(
    routes: Routes,
    state: Arc<ConnState>,
    request: hyper::Request<B>,
) -> Result<hyper::Response<tonic::body::Body>, Infallible>
where
    B: hyper::body::Body<Data = hyper::body::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut request = request.map(tonic::body::Body::new);
    request.extensions_mut().insert(state);
    let deadline = request
        .headers()
        .get("grpc-timeout")
        .and_then(|v| grpc_timeout(v.as_bytes()));
    let response = routes.oneshot(request);
    match deadline {
        None => response.await,
        Some(d) => match tokio::time::timeout(d, response).await {
            Ok(response) => response,
            Err(_) => Ok(Status::cancelled("Timeout expired").into_http()),
        },
    }
}

/// The duration of a `grpc-timeout` header's value: up to 8 digits and a unit (`H`ours,
/// `M`inutes, `S`econds, `m`illis, `u` micros, `n`anos), as gRPC's HTTP/2 protocol defines
/// it. `None` for anything else: a malformed header is ignored, as tonic's server ignores it.
pub(crate) fn grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests run against real time and real servers"
)]
mod tests {
    use super::*;
    use std::task::{Context, Poll};

    /// A service that answers after `delay`, `OK` when its request carries a connection's
    /// state, `FAILED_PRECONDITION` when not.
    #[derive(Clone)]
    struct Slow {
        delay: Duration,
    }

    impl tonic::server::NamedService for Slow {
        const NAME: &'static str = "test.Slow";
    }

    impl tower::Service<hyper::Request<tonic::body::Body>> for Slow {
        type Response = hyper::Response<tonic::body::Body>;
        type Error = Infallible;
        type Future = std::pin::Pin<
            Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send + 'static>,
        >;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: hyper::Request<tonic::body::Body>) -> Self::Future {
            let delay = self.delay;
            let has_state = request.extensions().get::<Arc<ConnState>>().is_some();
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                let status = if has_state {
                    Status::ok("")
                } else {
                    Status::failed_precondition("no connection state")
                };
                Ok(status.into_http())
            })
        }
    }

    fn request(timeout: Option<&str>) -> hyper::Request<tonic::body::Body> {
        let mut builder = hyper::Request::post("/test.Slow/Call")
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        if let Some(t) = timeout {
            builder = builder.header("grpc-timeout", t);
        }
        builder.body(tonic::body::Body::empty()).unwrap()
    }

    fn grpc_status(response: &hyper::Response<tonic::body::Body>) -> tonic::Code {
        Status::from_header_map(response.headers())
            .map(|s| s.code())
            .unwrap_or(tonic::Code::Ok)
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_carries_its_connections_state_and_ends_at_its_grpc_timeout() {
        let routes = Routes::new(Slow {
            delay: Duration::from_secs(10),
        })
        .prepare();
        let state = TrackedIo::new(()).state();

        let started = tokio::time::Instant::now();
        let response = call(routes.clone(), state.clone(), request(Some("50m")))
            .await
            .unwrap();
        assert_eq!(grpc_status(&response), tonic::Code::Cancelled);
        assert_eq!(started.elapsed(), Duration::from_millis(50));

        // Without the header, or with one longer than the call: the service's own answer,
        // which says the connection's state was there.
        for timeout in [None, Some("1M")] {
            let response = call(routes.clone(), state.clone(), request(timeout))
                .await
                .unwrap();
            assert_eq!(grpc_status(&response), tonic::Code::Ok, "{timeout:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_accept_is_tried_again_after_a_pause_not_at_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        // Accepts that fail, as out of file descriptors, for the first thousand tries.
        let tries = Arc::new(AtomicUsize::new(0));
        let incoming = {
            let tries = tries.clone();
            futures::stream::poll_fn(move |_| {
                if tries.fetch_add(1, Ordering::SeqCst) < 1000 {
                    std::task::Poll::Ready(Some(Err::<TrackedIo<tokio::io::DuplexStream>, _>(
                        "Too many open files",
                    )))
                } else {
                    std::task::Poll::Pending
                }
            })
        };
        let settings = Http2Settings {
            keepalive_interval: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(20),
        };
        let routes = Routes::new(Slow {
            delay: Duration::ZERO,
        });
        let started = tokio::time::Instant::now();
        serve(
            routes,
            incoming,
            tokio::time::sleep(Duration::from_secs(1)),
            settings,
        )
        .await;
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1),
            "ends at the signal"
        );
        let tried = tries.load(Ordering::SeqCst);
        assert!(
            (10..=11).contains(&tried),
            "one try every {ACCEPT_PAUSE:?} for 1 s, not {tried}"
        );
    }

    #[test]
    fn a_grpc_timeout_is_read_in_each_of_its_units() {
        assert_eq!(grpc_timeout(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(grpc_timeout(b"3M"), Some(Duration::from_secs(180)));
        assert_eq!(grpc_timeout(b"4S"), Some(Duration::from_secs(4)));
        assert_eq!(grpc_timeout(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(
            grpc_timeout(b"99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        assert_eq!(grpc_timeout(b"7n"), Some(Duration::from_nanos(7)));
    }

    #[test]
    fn a_malformed_grpc_timeout_is_ignored() {
        for bad in [
            &b""[..],
            b"S",
            b"10",
            b"10x",
            b"123456789S",
            b"-1S",
            b"1.5S",
            b" 1S",
        ] {
            assert_eq!(
                grpc_timeout(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
