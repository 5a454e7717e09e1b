//! The one task that sends alerts, and the handle that queues them without waiting.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::{BoxFuture, FutureExt};
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use super::handler::ErrorHandler;
use super::send::{deliver, destination, HttpClients};
use super::{message, Failure};
use crate::ops::metrics::Metrics;

/// Failures that may wait for the alerts task; beyond that they are dropped (and counted).
pub const QUEUE: usize = 1024;
/// Sends in progress at once, so that one receiver that hangs until its timeout does not hold
/// back the others.
pub const IN_FLIGHT: usize = 8;
/// Once the sidecar stops, what is queued or in progress has this long to go out.
pub const FLUSH: Duration = Duration::from_secs(2);
/// The handlers that send, as the `handler` label of the alert metrics.
pub const SENDING: [&str; 4] = ["EMAIL", "WECHAT", "DINGTALK", "WEBHOOK"];

type Report = (Arc<ErrorHandler>, Failure);

/// Queues failures for the alerts task. Cheap to clone; every clone feeds the same task.
#[derive(Clone)]
pub struct Alerts {
    tx: mpsc::Sender<Report>,
    metrics: Arc<Metrics>,
    /// Reports dropped so far, for a warning at each power of two.
    dropped: Arc<AtomicU64>,
}

impl std::fmt::Debug for Alerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alerts").finish_non_exhaustive()
    }
}

impl Alerts {
    /// Starts the alerts task on `tracker` with a queue of [`QUEUE`]; it ends when `cancel`
    /// fires, after at most [`FLUSH`] spent on what is queued.
    pub fn spawn(
        metrics: Arc<Metrics>,
        tracker: &TaskTracker,
        cancel: CancellationToken,
    ) -> Alerts {
        Alerts::spawn_with_queue(QUEUE, metrics, tracker, cancel)
    }

    /// [`Alerts::spawn`] with a queue of `queue` failures (at least 1).
    pub fn spawn_with_queue(
        queue: usize,
        metrics: Arc<Metrics>,
        tracker: &TaskTracker,
        cancel: CancellationToken,
    ) -> Alerts {
        let (tx, rx) = mpsc::channel(queue.max(1));
        metrics.alerts_dropped(0);
        for handler in SENDING {
            metrics.alert_sent(handler, 0);
            metrics.alert_failed(handler, 0);
        }
        tracker.spawn(run(rx, metrics.clone(), cancel));
        Alerts {
            tx,
            metrics,
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Reports `failure` through `handler`, never waiting: LOG and THROW write an error line
    /// here, IGNORE does nothing, the others are queued for the alerts task, or dropped
    /// (logged and counted in `shardcar_alerts_dropped_total`) when the queue is full or the
    /// task has ended.
    pub fn report(&self, handler: Arc<ErrorHandler>, failure: Failure) {
        match *handler {
            ErrorHandler::Ignore => return,
            ErrorHandler::Log | ErrorHandler::Throw => {
                log(&failure);
                return;
            }
            _ => {}
        }
        if let Err(e) = self.tx.try_send((handler, failure)) {
            let (handler, failure) = e.into_inner();
            self.metrics.alerts_dropped(1);
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                warn!(job = %failure.job, item = failure.item, handler = handler.kind(),
                      dropped = n, "alert dropped: the queue of alerts to send is full");
            }
        }
    }
}

/// ElasticJob's LOG handler: an error line naming the job, with the failure's fields.
fn log(f: &Failure) {
    tracing::error!(job = %f.job, item = f.item, execution_id = %f.execution_id,
                    task_id = %f.task_id, instance_id = %f.instance_id, attempt = f.attempt,
                    error = %f.error, "{}", message::headline(&f.job));
}

/// The outcome of one send, for the metrics and the log.
struct Sent {
    handler: &'static str,
    job: String,
    item: i32,
    to: String,
    result: Result<(), String>,
}

/// The task: takes reports from the queue and sends each once, up to [`IN_FLIGHT`] at a time,
/// until cancelled; then [`FLUSH`] for what is left, and what is still queued is dropped.
#[allow(
    clippy::disallowed_methods,
    reason = "the alerts task: an I/O edge (DingTalk's timestamp, the mail's date, the flush deadline)"
)]
async fn run(mut rx: mpsc::Receiver<Report>, metrics: Arc<Metrics>, cancel: CancellationToken) {
    let mut clients = HttpClients::default();
    let mut in_flight: FuturesUnordered<BoxFuture<'static, Sent>> = FuturesUnordered::new();
    // Sends in progress by handler, to count them failed if the flush runs out.
    let mut in_progress: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut deadline: Option<Instant> = None;
    let mut drained = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled(), if deadline.is_none() => {
                rx.close();
                deadline = Some(Instant::now() + FLUSH);
            }
            Some(sent) = in_flight.next(), if !in_flight.is_empty() => {
                if let Some(n) = in_progress.get_mut(sent.handler) {
                    *n -= 1;
                }
                record(&metrics, sent);
            }
            report = rx.recv(), if !drained && in_flight.len() < IN_FLIGHT => match report {
                Some((handler, failure)) => {
                    *in_progress.entry(handler.kind()).or_default() += 1;
                    let http = clients.for_handler(&handler);
                    in_flight.push(async move {
                        let result = match http {
                            Ok(http) => deliver(&handler, &failure, http, SystemTime::now()).await,
                            Err(e) => Err(e),
                        };
                        Sent {
                            handler: handler.kind(),
                            to: destination(&handler),
                            job: failure.job,
                            item: failure.item,
                            result,
                        }
                    }.boxed());
                }
                None => drained = true,
            },
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                give_up(&metrics, &mut rx, &in_progress);
                return;
            }
        }
        if drained && in_flight.is_empty() {
            return;
        }
    }
}

fn record(metrics: &Metrics, sent: Sent) {
    match sent.result {
        Ok(()) => {
            metrics.alert_sent(sent.handler, 1);
            info!(job = %sent.job, item = sent.item, handler = sent.handler, to = %sent.to,
                  "alert sent");
        }
        Err(error) => {
            metrics.alert_failed(sent.handler, 1);
            warn!(job = %sent.job, item = sent.item, handler = sent.handler, to = %sent.to,
                  error = %error, "alert not sent (it is not retried)");
        }
    }
}

/// The flush after cancellation ran out: sends in progress count as failed, queued ones as
/// dropped.
fn give_up(
    metrics: &Metrics,
    rx: &mut mpsc::Receiver<Report>,
    in_progress: &BTreeMap<&'static str, u64>,
) {
    let mut queued = 0;
    while rx.try_recv().is_ok() {
        queued += 1;
    }
    metrics.alerts_dropped(queued);
    for (handler, n) in in_progress {
        metrics.alert_failed(handler, *n);
    }
    let in_progress: u64 = in_progress.values().sum();
    if in_progress + queued > 0 {
        warn!(
            in_progress,
            queued, "alerts not sent: the sidecar stopped before they went out"
        );
    }
}
