//! OpenTelemetry: the sidecar exports one `shardcar.execution` span per execution by OTLP/gRPC,
//! with the ids its `Trigger` carried in `traceparent`, and a `TriggerJob` call that carries a
//! `traceparent` puts the executions it starts into the caller's trace. The receiver is a tonic
//! `TraceService` built from `opentelemetry-proto`, inside the test.

use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use shardcar::proto::subscribe_response::Event;
use shardcar::proto::{Trigger, TriggerJobRequest};
use tokio_stream::wrappers::TcpListenerStream;

use super::*;

/// A span as received, with its resource's `service.name`.
#[derive(Clone, Debug)]
struct Received {
    service: String,
    span: Span,
}

#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Received>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| attr(&r.attributes, "service.name"))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for span in ss.spans {
                    spans.push(Received {
                        service: service.clone(),
                        span,
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A string (or integer, as text) attribute.
fn attr(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .map(|v| match v {
            AnyValue::StringValue(s) => s.clone(),
            AnyValue::IntValue(i) => i.to_string(),
            other => format!("{other:?}"),
        })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Starts the receiver on a free loopback port; returns it and its endpoint URL.
async fn receiver() -> (Receiver, String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let receiver = Receiver::default();
    let service = TraceServiceServer::new(receiver.clone());
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await;
    });
    (receiver, format!("http://{addr}"), task)
}

/// The span received for `execution`, once it has come.
async fn span_of(receiver: &Receiver, execution: &str) -> Received {
    common::eventually(WAIT, || async {
        receiver
            .spans
            .lock()
            .unwrap()
            .iter()
            .find(|r| {
                attr(&r.span.attributes, "shardcar.execution_id").as_deref() == Some(execution)
            })
            .cloned()
    })
    .await
    .unwrap_or_else(|| panic!("no span for execution {execution} reached the receiver"))
}

/// The `(trace id, span id)` of a `traceparent`.
fn ids(traceparent: &str) -> (String, String) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent:?}");
    assert_eq!((parts[0], parts[3]), ("00", "01"), "{traceparent:?}");
    (parts[1].to_string(), parts[2].to_string())
}

/// Triggers `job` once through the Admin API, with `traceparent` metadata if given, and
/// returns the trigger the worker got.
async fn trigger(car: &Sidecar, w: &TestWorker, job: &str, traceparent: Option<&str>) -> Trigger {
    let before = w.triggers().len();
    let mut admin = AdminServiceClient::connect(car.endpoint()).await.unwrap();
    let mut request = tonic::Request::new(TriggerJobRequest {
        job_name: job.into(),
        job_parameter: None,
    });
    if let Some(tp) = traceparent {
        request
            .metadata_mut()
            .insert("traceparent", tp.parse().unwrap());
        request
            .metadata_mut()
            .insert("tracestate", "shardcar-test=1".parse().unwrap());
    }
    admin.trigger_job(request).await.expect("TriggerJob");
    w.wait_for(
        |e| {
            e.iter()
                .filter(|(_, e)| matches!(e.event, Some(Event::Trigger(_))))
                .count()
                > before
        },
        WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    w.triggers().pop().expect("a trigger").1
}

#[tokio::test(flavor = "multi_thread")]
async fn each_execution_is_a_span_with_the_ids_its_trigger_carried() {
    let (receiver, endpoint, server) = receiver().await;
    let car = Sidecar::start(SidecarOptions {
        extra_args: vec!["--otlp-endpoint".into(), endpoint],
        env: vec![("OTEL_SERVICE_NAME".into(), "shardcar-under-test".into())],
        ..SidecarOptions::standalone()
    })
    .await;
    let w = TestWorker::subscribe(
        &car.endpoint(),
        subscribe_request(job_config("traced", NEVER, 2)),
    )
    .await
    .unwrap();
    w.set_auto_complete(true);
    w.wait_items(|items| items.len() == 2, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // Untraced call: the execution starts a trace of its own (trace id = execution id).
    let t = trigger(&car, &w, "traced", None).await;
    let (trace, span) = ids(&t.traceparent);
    assert_eq!(
        trace, t.execution_id,
        "a root execution's trace id is its execution id"
    );
    let got = span_of(&receiver, &t.execution_id).await;
    assert_eq!(got.service, "shardcar-under-test");
    let s = &got.span;
    assert_eq!(s.name, "shardcar.execution");
    assert_eq!((hex(&s.trace_id), hex(&s.span_id)), (trace, span));
    assert!(s.parent_span_id.is_empty(), "a root span");
    assert!(s.end_time_unix_nano >= s.start_time_unix_nano);
    for (key, want) in [
        ("shardcar.job", "traced"),
        ("shardcar.source", "MANUAL"),
        ("shardcar.outcome", "completed"),
        ("shardcar.instance", w.instance_id()),
        ("shardcar.task_id", t.task_id.as_str()),
    ] {
        assert_eq!(
            attr(&s.attributes, key).as_deref(),
            Some(want),
            "{key}: {s:?}"
        );
    }
    let tokens = attr(&s.attributes, "shardcar.fencing_tokens").unwrap_or_default();
    for (item, token) in &t.fencing_tokens {
        assert!(tokens.contains(&format!("{item}={token}")), "{tokens}");
    }
    let events: Vec<&str> = s.events.iter().map(|e| e.name.as_str()).collect();
    assert!(events.contains(&"trigger sent"), "{events:?}");
    assert_eq!(
        events.iter().filter(|e| **e == "answer").count(),
        2,
        "one answer event per item: {events:?}"
    );

    // Traced call: the execution continues the caller's trace, as a child of its span.
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let t = trigger(
        &car,
        &w,
        "traced",
        Some(&format!("00-{caller_trace}-{caller_span}-01")),
    )
    .await;
    let (trace, span) = ids(&t.traceparent);
    assert_eq!(trace, caller_trace, "{t:?}");
    assert_ne!(span, caller_span);
    assert_eq!(t.tracestate, "shardcar-test=1");
    let s = span_of(&receiver, &t.execution_id).await.span;
    assert_eq!(
        (hex(&s.trace_id), hex(&s.span_id), hex(&s.parent_span_id)),
        (caller_trace.to_string(), span, caller_span.to_string())
    );
    assert_eq!(s.trace_state, "shardcar-test=1");

    // The caller's trace was for that one trigger: the next untraced call starts its own.
    let t = trigger(&car, &w, "traced", None).await;
    let (trace, _) = ids(&t.traceparent);
    assert_eq!(trace, t.execution_id, "an untraced call after a traced one");
    assert_eq!(t.tracestate, "");
    let s = span_of(&receiver, &t.execution_id).await.span;
    assert!(s.parent_span_id.is_empty());
    drop(car);
    server.abort();
}
