//! OpenTelemetry traces: every finished execution becomes one span, `shardcar.execution`, from
//! the moment its fire was acted on (the decision to run it) to its last answer, exported by
//! OTLP/gRPC.
//!
//! The span's ids are the ones its `Trigger` carried in `traceparent` (see
//! `coordination::trace`), so a worker's handler span, a child of that `traceparent`, joins the
//! same trace. Spans are built from the execution's record once it is over (its events were
//! noted by the state machine as they happened) and exported in batches by one task; the
//! coordinator only hands a record over (`try_send`, never waiting). Without an endpoint none of
//! this runs.

use std::time::Duration;

use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use opentelemetry_sdk::Resource;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::coordination::{ExecutionRecord, ItemOutcome};

/// How many finished spans may wait for export; beyond that they are dropped (and counted).
const QUEUE: usize = 4096;
/// Spans per export call, and how long a partial batch waits.
const BATCH: usize = 512;
const BATCH_DELAY: Duration = Duration::from_secs(1);

/// Where spans go: the endpoint and the service name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetrySettings {
    /// An OTLP/gRPC endpoint, e.g. `http://localhost:4317`.
    pub endpoint: String,
    pub service_name: String,
}

impl TelemetrySettings {
    /// Where spans go, from the `otlp_endpoint` setting (or the standard variables) as given.
    ///
    /// # Errors
    /// A message for the setting when the endpoint is not an `http://` or `https://` URL with a
    /// host.
    pub fn new(endpoint: &str, service_name: &str) -> Result<TelemetrySettings, String> {
        let endpoint = endpoint.trim().to_string();
        let host = endpoint
            .strip_prefix("http://")
            .or_else(|| endpoint.strip_prefix("https://"))
            .map(|rest| rest.split(['/', ':']).next().unwrap_or_default());
        if host.is_none_or(str::is_empty) {
            return Err(format!(
                "{endpoint:?} must be an http:// or https:// URL, e.g. http://127.0.0.1:4317"
            ));
        }
        Ok(TelemetrySettings {
            endpoint,
            service_name: service_name.to_string(),
        })
    }
}

/// The exporting end: hands finished executions to the export task.
#[derive(Debug)]
pub struct Telemetry {
    tx: mpsc::Sender<SpanData>,
    dropped: std::sync::atomic::AtomicU64,
}

impl Telemetry {
    /// Starts the export task on `tracker`; it flushes what is queued when `cancel` fires.
    ///
    /// # Errors
    /// The endpoint cannot be used (it is not a URI).
    pub fn start(
        settings: &TelemetrySettings,
        tracker: &TaskTracker,
        cancel: CancellationToken,
    ) -> Result<Telemetry, String> {
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| format!("cannot export to {}: {e}", settings.endpoint))?;
        exporter.set_resource(
            &Resource::builder_empty()
                .with_service_name(settings.service_name.clone())
                .build(),
        );
        let (tx, rx) = mpsc::channel(QUEUE);
        tracker.spawn(export(exporter, rx, cancel));
        tracing::info!(endpoint = %settings.endpoint, service = %settings.service_name,
                       "exporting execution spans by OTLP/gRPC");
        Ok(Telemetry {
            tx,
            dropped: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Queues the span of a finished execution, unless it continues a trace its caller did not
    /// sample (parent-based sampling: the caller's `traceparent` flags decide).
    pub fn execution_finished(&self, record: &ExecutionRecord) {
        if !record.trace.sampled {
            return;
        }
        if self.tx.try_send(span_of(record)).is_err() {
            let n = self
                .dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n.is_power_of_two() {
                tracing::warn!(
                    dropped = n + 1,
                    "execution spans dropped: the exporter is behind"
                );
            }
        }
    }
}

#[allow(
    clippy::disallowed_methods,
    reason = "the span exporter batches on the clock: an I/O edge"
)]
async fn export<E: SpanExporter>(
    exporter: E,
    mut rx: mpsc::Receiver<SpanData>,
    cancel: CancellationToken,
) {
    let mut batch = Vec::with_capacity(BATCH);
    // When the batch must go out: BATCH_DELAY after its first span came, however many follow.
    let mut due: Option<tokio::time::Instant> = None;
    loop {
        let flush = tokio::select! {
            span = rx.recv() => match span {
                Some(span) => {
                    batch.push(span);
                    due.get_or_insert_with(|| tokio::time::Instant::now() + BATCH_DELAY);
                    batch.len() >= BATCH
                }
                None => true,
            },
            _ = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => true,
            _ = cancel.cancelled() => {
                rx.close();
                while let Ok(span) = rx.try_recv() {
                    batch.push(span);
                }
                if !batch.is_empty() {
                    send(&exporter, std::mem::take(&mut batch)).await;
                }
                let _ = exporter.shutdown();
                return;
            }
        };
        if flush && !batch.is_empty() {
            due = None;
            send(
                &exporter,
                std::mem::replace(&mut batch, Vec::with_capacity(BATCH)),
            )
            .await;
        }
        if rx.is_closed() && rx.is_empty() && batch.is_empty() {
            return;
        }
    }
}

async fn send<E: SpanExporter>(exporter: &E, batch: Vec<SpanData>) {
    let n = batch.len();
    if let Err(e) = exporter.export(batch).await {
        tracing::warn!(spans = n, error = %e, "exporting execution spans failed");
    }
}

/// The `shardcar.execution` span of a finished execution.
pub fn span_of(r: &ExecutionRecord) -> SpanData {
    let t = &r.trace;
    let flags = if t.sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let state = t.tracestate.parse::<TraceState>().unwrap_or_default();
    let items: Vec<i64> = r.items.keys().map(|i| i64::from(*i)).collect();
    let tokens: Vec<String> = r
        .fencing_tokens
        .iter()
        .map(|(i, t)| format!("{i}={t}"))
        .collect();
    let not_completed = r
        .items
        .values()
        .filter(|o| !matches!(o, ItemOutcome::Completed))
        .count();
    let attributes = vec![
        KeyValue::new("shardcar.job", r.job.clone()),
        KeyValue::new("shardcar.execution_id", r.execution_id.clone()),
        KeyValue::new("shardcar.task_id", r.task_id.clone()),
        KeyValue::new("shardcar.items", opentelemetry::Value::Array(items.into())),
        KeyValue::new("shardcar.source", r.source.as_str()),
        KeyValue::new("shardcar.instance", r.instance_id.clone()),
        KeyValue::new("shardcar.outcome", r.outcome()),
        KeyValue::new("shardcar.fencing_tokens", tokens.join(",")),
        KeyValue::new(
            "shardcar.fire_time",
            chrono::DateTime::<chrono::Utc>::from(r.fire_time).to_rfc3339(),
        ),
        KeyValue::new("shardcar.items_not_completed", not_completed as i64),
    ];
    let events = r
        .events
        .iter()
        .map(|e| {
            Event::new(
                e.name,
                e.at,
                e.attributes
                    .iter()
                    .map(|(k, v)| KeyValue::new(*k, v.clone()))
                    .collect(),
                0,
            )
        })
        .collect();
    let status = match r.outcome() {
        "completed" => Status::Ok,
        _ => Status::error(r.error().unwrap_or(r.outcome()).to_string()),
    };
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(t.trace_id),
            SpanId::from_bytes(t.span_id),
            flags,
            false,
            state,
        ),
        parent_span_id: t.parent_span_id.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: t.parent_span_id.is_some(),
        span_kind: SpanKind::Internal,
        name: "shardcar.execution".into(),
        // A run claimed ahead of its instant began with its claim, before it started.
        start_time: r
            .noted("claimed ahead")
            .map_or(r.started_at, |at| at.min(r.started_at)),
        end_time: r.started_at + r.duration,
        attributes,
        dropped_attributes_count: 0,
        events: {
            let mut all = SpanEvents::default();
            all.events = events;
            all
        },
        links: SpanLinks::default(),
        status,
        instrumentation_scope: InstrumentationScope::builder("shardcar")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests run against real time and real servers"
)]
mod tests {
    use super::*;
    use crate::coordination::events::Source;
    use crate::coordination::trace::TraceContext;
    use opentelemetry_sdk::error::OTelSdkResult;
    use std::sync::{Arc, Mutex};
    use std::time::SystemTime;

    /// Records the size of every batch exported, and when.
    #[derive(Debug, Clone, Default)]
    struct Batches(Arc<Mutex<Vec<(tokio::time::Instant, usize)>>>);

    impl SpanExporter for Batches {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0
                .lock()
                .unwrap()
                .push((tokio::time::Instant::now(), batch.len()));
            Ok(())
        }
    }

    fn record(id: &str) -> ExecutionRecord {
        ExecutionRecord {
            job: "j".into(),
            execution_id: id.into(),
            instance_id: "10.0.0.1@-@7".into(),
            source: Source::Cron,
            started_at: SystemTime::UNIX_EPOCH,
            duration: Duration::from_millis(5),
            items: [(0, ItemOutcome::Completed)].into_iter().collect(),
            task_id: "j@-@0@-@READY@-@10.0.0.1@-@7".into(),
            fire_time: SystemTime::UNIX_EPOCH,
            fencing_tokens: [(0, 42)].into_iter().collect(),
            trace: TraceContext::for_execution(id, None),
            events: Vec::new(),
            attempt: 0,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn spans_go_out_at_most_a_batch_delay_after_they_came_and_all_at_shutdown() {
        let batches = Batches::default();
        let (tx, rx) = mpsc::channel(QUEUE);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(export(batches.clone(), rx, cancel.clone()));
        let t0 = tokio::time::Instant::now();
        // A span every 400 ms: a sleep restarted by each span would never fire.
        for i in 0..6 {
            tx.send(span_of(&record(&format!("{i:032x}"))))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        let seen = batches.0.lock().unwrap().clone();
        assert!(
            !seen.is_empty(),
            "nothing went out within 2.4 s of a steady trickle"
        );
        assert!(
            seen[0].0 - t0 <= BATCH_DELAY + Duration::from_millis(1),
            "the first batch went out {:?} after its first span",
            seen[0].0 - t0
        );
        tx.send(span_of(&record(&format!("{:032x}", 99))))
            .await
            .unwrap();
        cancel.cancel();
        task.await.unwrap();
        let total: usize = batches.0.lock().unwrap().iter().map(|(_, n)| n).sum();
        assert_eq!(total, 7, "every span goes out, the last ones at shutdown");
    }

    #[test]
    fn the_span_has_the_ids_and_attributes_of_its_execution() {
        let r = record("0af7651916cd43dd8448eb211c80319c");
        let s = span_of(&r);
        assert_eq!(s.name, "shardcar.execution");
        assert_eq!(
            s.span_context.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(s.span_context.span_id().to_bytes(), r.trace.span_id);
        assert_eq!(s.parent_span_id, SpanId::INVALID);
        let attr = |k: &str| {
            s.attributes
                .iter()
                .find(|kv| kv.key.as_str() == k)
                .map(|kv| kv.value.to_string())
        };
        assert_eq!(attr("shardcar.source").as_deref(), Some("CRON"));
        assert_eq!(attr("shardcar.outcome").as_deref(), Some("completed"));
        assert_eq!(attr("shardcar.fencing_tokens").as_deref(), Some("0=42"));
        assert_eq!(s.status, Status::Ok);
        assert_eq!(
            (s.start_time, s.end_time),
            (r.started_at, r.started_at + r.duration)
        );
    }

    #[test]
    fn the_span_of_a_run_claimed_ahead_begins_with_its_claim() {
        let mut r = record("0af7651916cd43dd8448eb211c80319c");
        r.started_at = SystemTime::UNIX_EPOCH + Duration::from_millis(100);
        r.events = vec![crate::coordination::trace::SpanEvent {
            at: SystemTime::UNIX_EPOCH,
            name: "claimed ahead",
            attributes: Vec::new(),
        }];
        let s = span_of(&r);
        assert_eq!(s.start_time, SystemTime::UNIX_EPOCH);
        assert_eq!(
            s.end_time,
            SystemTime::UNIX_EPOCH + Duration::from_millis(105)
        );
    }
}
