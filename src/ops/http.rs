//! The `/metrics` HTTP endpoint: a minimal HTTP/1.1 server (one request per connection,
//! `Connection: close`), enough for Prometheus and `curl`, without a web framework.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

use super::metrics::Metrics;

/// A request head larger than this is refused.
const MAX_HEAD: usize = 16 * 1024;
/// A client must send its request head within this long.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `GET /metrics` on `listener` until `cancel`.
///
/// # Cancellation safety
/// Stops accepting at once; connections in progress finish on their own tasks.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let metrics = metrics.clone();
                tracker.spawn(async move {
                    if let Err(e) = handle(stream, &metrics).await {
                        debug!(peer = %peer, error = %e, "metrics request failed");
                    }
                });
            }
            Err(e) => {
                debug!(error = %e, "metrics listener cannot accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn handle(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 2048];
    let complete = tokio::time::timeout(READ_TIMEOUT, async {
        loop {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Ok::<bool, std::io::Error>(false);
            }
            head.extend_from_slice(&buf[..n]);
            if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
                return Ok(true);
            }
            if head.len() > MAX_HEAD {
                return Ok(false);
            }
        }
    })
    .await
    .unwrap_or(Ok(false))?;
    let (status, content_type, body) = if complete {
        respond(&head, metrics)
    } else {
        (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "incomplete request\n".to_string(),
        )
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    if !head.starts_with(b"HEAD ") {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.shutdown().await
}

/// Status line, content type and body for a request head.
fn respond(head: &[u8], metrics: &Metrics) -> (&'static str, &'static str, String) {
    let text = String::from_utf8_lossy(head);
    let mut parts = text.lines().next().unwrap_or_default().split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let path = target.split('?').next().unwrap_or_default();
    const PLAIN: &str = "text/plain; charset=utf-8";
    if method != "GET" && method != "HEAD" {
        return (
            "405 Method Not Allowed",
            PLAIN,
            "only GET is supported\n".into(),
        );
    }
    match path {
        "/metrics" => ("200 OK", super::metrics::CONTENT_TYPE, metrics.render()),
        "/" => (
            "200 OK",
            PLAIN,
            "shardcar: metrics are at /metrics\n".into(),
        ),
        _ => (
            "404 Not Found",
            PLAIN,
            format!("{path} not found; metrics are at /metrics\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: std::net::SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_metrics_and_refuses_the_rest() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = Arc::new(Metrics::new());
        metrics.trigger_sent("j", "CRON", Duration::from_millis(1));
        let cancel = CancellationToken::new();
        tokio::spawn(serve(listener, metrics, cancel.clone(), TaskTracker::new()));
        let ok = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("application/openmetrics-text; version=1.0.0"));
        assert!(ok.contains("shardcar_triggers_total{job_name=\"j\",source=\"CRON\"} 1\n"));
        let missing = get(addr, "GET /nope HTTP/1.1\r\n\r\n").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        let post = get(addr, "POST /metrics HTTP/1.1\r\n\r\n").await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        cancel.cancel();
    }
}
