//! Running one item of a typed job: a script (a child process in its own process group) or an
//! HTTP call, either of which stops when its cancellation token fires.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::elasticjob::typed::{Action, HttpCall};

/// How much of a script's stderr (or a refused call's body) a failure reports.
const TAIL: usize = 4096;

/// One item to run.
#[derive(Debug, Clone)]
pub struct ItemWork {
    pub job_name: String,
    pub execution_id: String,
    pub item: i32,
    pub fencing_token: i64,
    /// ElasticJob's sharding context of the item, as JSON.
    pub context: String,
}

/// How an item's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    Completed,
    Failed(String),
    /// Stopped by its token before it ended (revoke, lease lapse, the sidecar stopping).
    Stopped,
}

/// Runs `action` for `work` until it ends or `stop` fires. A stopped script gets SIGTERM, then
/// SIGKILL after `kill_after` (its whole process group either way).
pub async fn run(
    action: &Action,
    work: &ItemWork,
    stop: &CancellationToken,
    kill_after: Duration,
) -> RunEnd {
    match action {
        Action::Script { argv } => script(argv, work, stop, kill_after).await,
        Action::Http(call) => http(call, work, stop).await,
    }
}

async fn script(
    argv: &[String],
    work: &ItemWork,
    stop: &CancellationToken,
    kill_after: Duration,
) -> RunEnd {
    let mut command = tokio::process::Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .arg(&work.context)
        .env("SHARDCAR_JOB_NAME", &work.job_name)
        .env("SHARDCAR_EXECUTION_ID", &work.execution_id)
        .env("SHARDCAR_SHARDING_ITEM", work.item.to_string())
        .env("SHARDCAR_FENCING_TOKEN", work.fencing_token.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return RunEnd::Failed(format!("cannot start {:?}: {e}", argv[0])),
    };
    let group = child.id().map(|pid| nix::unistd::Pid::from_raw(pid as i32));
    let stdout = child.stdout.take().map(|out| {
        let (job, item) = (work.job_name.clone(), work.item);
        tokio::spawn(async move {
            let tail = read_tail(out).await;
            if !tail.is_empty() {
                debug!(job = %job, item, stdout = %tail, "script output");
            }
        })
    });
    let stderr = child.stderr.take().map(|err| tokio::spawn(read_tail(err)));
    let signal = |sig| {
        if let Some(group) = group {
            let _ = nix::sys::signal::killpg(group, sig);
        }
    };
    let status = tokio::select! {
        status = child.wait() => Some(status),
        () = stop.cancelled() => None,
    };
    let status = match status {
        Some(status) => status,
        None => {
            signal(nix::sys::signal::Signal::SIGTERM);
            if tokio::time::timeout(kill_after, child.wait())
                .await
                .is_err()
            {
                warn!(job = %work.job_name, item = work.item, waited_ms = kill_after.as_millis() as u64, "the script did not stop on SIGTERM: killing it");
                signal(nix::sys::signal::Signal::SIGKILL);
                let _ = child.wait().await;
            }
            // Whatever the script left behind in its group goes with it.
            signal(nix::sys::signal::Signal::SIGKILL);
            return RunEnd::Stopped;
        }
    };
    // Children the script left running must not outlive its item (nor hold its pipes open).
    signal(nix::sys::signal::Signal::SIGKILL);
    if let Some(out) = stdout {
        let _ = tokio::time::timeout(Duration::from_secs(1), out).await;
    }
    let stderr = match stderr {
        Some(task) => tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default(),
        None => String::new(),
    };
    match status {
        Ok(status) if status.success() => RunEnd::Completed,
        Ok(status) => RunEnd::Failed(if stderr.trim().is_empty() {
            format!("{:?} ended with {status}", argv[0])
        } else {
            format!(
                "{:?} ended with {status}; stderr: {}",
                argv[0],
                stderr.trim_end()
            )
        }),
        Err(e) => RunEnd::Failed(format!("cannot wait for {:?}: {e}", argv[0])),
    }
}

/// Reads a stream to its end, keeping its last [`TAIL`] bytes (cut at a character boundary).
async fn read_tail(mut stream: impl AsyncRead + Unpin) -> String {
    let mut kept: Vec<u8> = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > 2 * TAIL {
                    kept.drain(..kept.len() - TAIL);
                }
            }
        }
    }
    if kept.len() > TAIL {
        kept.drain(..kept.len() - TAIL);
    }
    let text = String::from_utf8_lossy(&kept).into_owned();
    text.trim_start_matches('\u{fffd}').to_string()
}

async fn http(call: &HttpCall, work: &ItemWork, stop: &CancellationToken) -> RunEnd {
    let client = match reqwest::Client::builder()
        .connect_timeout(call.connect_timeout)
        .read_timeout(call.read_timeout)
        .build()
    {
        Ok(client) => client,
        Err(e) => return RunEnd::Failed(format!("cannot build an HTTP client: {e}")),
    };
    let method = match reqwest::Method::from_bytes(call.method.as_bytes()) {
        Ok(m) => m,
        Err(_) => return RunEnd::Failed(format!("{:?} is not an HTTP method", call.method)),
    };
    let context = match reqwest::header::HeaderValue::from_bytes(work.context.as_bytes()) {
        Ok(v) => v,
        Err(e) => {
            return RunEnd::Failed(format!("the sharding context is not a header value: {e}"))
        }
    };
    let mut request = client
        .request(method, &call.uri)
        .header("shardingContext", context)
        .header("X-Shardcar-Execution-Id", &work.execution_id)
        .header("X-Shardcar-Fencing-Token", work.fencing_token.to_string());
    if let Some(content_type) = &call.content_type {
        request = request.header(reqwest::header::CONTENT_TYPE, content_type);
    }
    if let Some(data) = &call.data {
        if ["POST", "PUT", "DELETE"].contains(&call.method.as_str()) {
            request = request.body(data.clone());
        }
    }
    let call_and_read = async {
        let response = request.send().await?;
        let status = response.status();
        let body = response.bytes().await?;
        Ok::<_, reqwest::Error>((status, body))
    };
    let result = tokio::select! {
        r = call_and_read => r,
        () = stop.cancelled() => return RunEnd::Stopped,
    };
    match result {
        Ok((status, _)) if status.is_success() => RunEnd::Completed,
        Ok((status, body)) => {
            let body = String::from_utf8_lossy(&body[..body.len().min(TAIL)]).into_owned();
            RunEnd::Failed(format!("{} answered {status}: {}", call.uri, body.trim()))
        }
        Err(e) => RunEnd::Failed(format!("{} {}: {}", call.method, call.uri, error_chain(&e))),
    }
}

/// An error with its sources (reqwest's own text says little: "error sending request").
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
