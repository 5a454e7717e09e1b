package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanId;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.testing.exporter.InMemorySpanExporter;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.data.EventData;
import io.opentelemetry.sdk.trace.data.SpanData;
import io.opentelemetry.sdk.trace.export.SimpleSpanProcessor;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** {@link OpenTelemetryTracing} alone: the handler span's parent, attributes, scope, failures and cancels. */
class OpenTelemetryTracingTest {
  private static final String TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
  private static final String PARENT_ID = "00f067aa0ba902b7";
  private static final String TRACEPARENT = "00-" + TRACE_ID + "-" + PARENT_ID + "-01";

  private final InMemorySpanExporter exporter = InMemorySpanExporter.create();
  private final OpenTelemetrySdk sdk = OpenTelemetrySdk.builder()
      .setTracerProvider(SdkTracerProvider.builder().addSpanProcessor(SimpleSpanProcessor.create(exporter)).build())
      .build();

  @AfterEach
  void close() {
    sdk.close();
  }

  private static ShardingContext context(String traceparent, String tracestate) {
    return new ShardingContext("orders", "orders@-@2@-@READY@-@10.0.0.1@-@42", 3, "", 2, "eu", "e1",
        TriggerSource.MANUAL, 7, null, traceparent, tracestate);
  }

  private SpanData only(String name) {
    List<SpanData> found = exporter.getFinishedSpanItems().stream().filter(s -> s.getName().equals(name)).toList();
    assertEquals(1, found.size(), "spans: " + exporter.getFinishedSpanItems());
    return found.get(0);
  }

  @Test
  void theHandlerSpanIsAChildOfTheTriggersTraceparentAndCurrentWhileTheHandlerRuns() {
    ItemTracing tracing = ItemTracing.create(true, sdk);
    ItemTracing.ItemSpan span = tracing.start(context(TRACEPARENT, "vendor=abc"), "10.0.0.1@-@42");
    Span seen;
    ItemTracing.Scope scope = span.makeCurrent();
    try {
      seen = Span.current();
      // The user's own span nests under the handler's.
      sdk.getTracer("user").spanBuilder("user.work").startSpan().end();
    } finally {
      scope.close();
    }
    assertFalse(Span.current().getSpanContext().isValid(), "the scope was closed");
    span.end(ItemTracing.Outcome.COMPLETED, null);

    SpanData handler = only(OpenTelemetryTracing.SPAN_NAME);
    assertEquals(TRACE_ID, handler.getTraceId());
    assertEquals(PARENT_ID, handler.getParentSpanId());
    assertTrue(handler.getParentSpanContext().isRemote());
    assertEquals("abc", handler.getSpanContext().getTraceState().get("vendor"));
    assertEquals(SpanKind.CONSUMER, handler.getKind());
    assertEquals(seen.getSpanContext(), handler.getSpanContext());
    assertEquals(StatusCode.UNSET, handler.getStatus().getStatusCode());
    assertEquals("orders", handler.getAttributes().get(AttributeKey.stringKey("shardcar.job")));
    assertEquals("e1", handler.getAttributes().get(AttributeKey.stringKey("shardcar.execution_id")));
    assertEquals(2L, handler.getAttributes().get(AttributeKey.longKey("shardcar.item")));
    assertEquals("MANUAL", handler.getAttributes().get(AttributeKey.stringKey("shardcar.source")));
    assertEquals(7L, handler.getAttributes().get(AttributeKey.longKey("shardcar.fencing_token")));
    assertEquals("10.0.0.1@-@42", handler.getAttributes().get(AttributeKey.stringKey("shardcar.instance")));
    assertEquals("completed", handler.getAttributes().get(AttributeKey.stringKey("shardcar.outcome")));
    assertEquals(OpenTelemetryTracing.SCOPE_NAME, handler.getInstrumentationScopeInfo().getName());

    SpanData user = only("user.work");
    assertEquals(TRACE_ID, user.getTraceId());
    assertEquals(handler.getSpanId(), user.getParentSpanId());
  }

  @Test
  void aHandlerThatThrewHasTheExceptionAndAnErrorStatus() {
    ItemTracing.ItemSpan span = ItemTracing.create(true, sdk).start(context(TRACEPARENT, ""), "i");
    IllegalStateException boom = new IllegalStateException("boom");
    span.failed(boom);
    span.end(ItemTracing.Outcome.FAILED, "java.lang.IllegalStateException: boom");

    SpanData handler = only(OpenTelemetryTracing.SPAN_NAME);
    assertEquals(StatusCode.ERROR, handler.getStatus().getStatusCode());
    assertEquals("java.lang.IllegalStateException: boom", handler.getStatus().getDescription());
    assertEquals("failed", handler.getAttributes().get(AttributeKey.stringKey("shardcar.outcome")));
    EventData exception = handler.getEvents().get(0);
    assertEquals("exception", exception.getName());
    assertEquals("java.lang.IllegalStateException",
        exception.getAttributes().get(AttributeKey.stringKey("exception.type")));
  }

  @Test
  void aCancelledItemHasOneCancelEventAndAnErrorStatus() {
    ItemTracing.ItemSpan span = ItemTracing.create(true, sdk).start(context(TRACEPARENT, ""), "i");
    span.cancelled("revoked: execution timeout");
    span.cancelled("the lease ran out"); // only the first counts
    span.end(ItemTracing.Outcome.DECLINED, "stopped: revoked: execution timeout");
    span.cancelled("after the end: ignored");

    SpanData handler = only(OpenTelemetryTracing.SPAN_NAME);
    assertEquals(1, handler.getEvents().size(), handler.getEvents().toString());
    EventData cancelled = handler.getEvents().get(0);
    assertEquals(OpenTelemetryTracing.CANCELLED_EVENT, cancelled.getName());
    assertEquals("revoked: execution timeout", cancelled.getAttributes().get(OpenTelemetryTracing.REASON));
    assertEquals(StatusCode.ERROR, handler.getStatus().getStatusCode());
    assertEquals("declined", handler.getAttributes().get(AttributeKey.stringKey("shardcar.outcome")));
  }

  @Test
  void aDeclinedItemWhoseCancelCameTooLateStillHasTheEvent() {
    ItemTracing.ItemSpan span = ItemTracing.create(true, sdk).start(context(TRACEPARENT, ""), "i");
    span.end(ItemTracing.Outcome.DECLINED, "not answered: its stream ended");
    EventData cancelled = only(OpenTelemetryTracing.SPAN_NAME).getEvents().get(0);
    assertEquals(OpenTelemetryTracing.CANCELLED_EVENT, cancelled.getName());
    assertEquals("not answered: its stream ended", cancelled.getAttributes().get(OpenTelemetryTracing.REASON));
  }

  @Test
  void withoutATraceparentTheHandlerSpanIsARootSpan() {
    for (String traceparent : new String[] {"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}) {
      exporter.reset();
      ItemTracing.create(true, sdk).start(context(traceparent, ""), "i").end(ItemTracing.Outcome.COMPLETED, null);
      SpanData handler = only(OpenTelemetryTracing.SPAN_NAME);
      assertEquals(SpanId.getInvalid(), handler.getParentSpanId(), traceparent);
      assertNotEquals(TRACE_ID, handler.getTraceId());
    }
  }

  @Test
  void byDefaultTheGlobalOpenTelemetryIsReadWhenTheHandlerStarts() {
    GlobalOpenTelemetry.resetForTest();
    try {
      // Built before the application installed its SDK: the span still goes to that SDK.
      ItemTracing tracing = ShardcarWorker.builder().target("127.0.0.1:1").settings().tracing();
      assertInstanceOf(OpenTelemetryTracing.class, tracing);
      // A trigger before the SDK is installed: no span, and the global is not locked to a no-op.
      tracing.start(context(TRACEPARENT, ""), "i").end(ItemTracing.Outcome.COMPLETED, null);
      assertFalse(GlobalOpenTelemetry.isSet());
      GlobalOpenTelemetry.set(sdk);
      tracing.start(context(TRACEPARENT, ""), "i").end(ItemTracing.Outcome.COMPLETED, null);
      assertEquals(PARENT_ID, only(OpenTelemetryTracing.SPAN_NAME).getParentSpanId());
    } finally {
      GlobalOpenTelemetry.resetForTest();
    }
    assertEquals(1, exporter.getFinishedSpanItems().size());
  }

  @Test
  void theBuilderTakesAnInstanceOrOptsOut() {
    assertInstanceOf(OpenTelemetryTracing.class,
        ShardcarWorker.builder().target("127.0.0.1:1").openTelemetry(sdk).settings().tracing());
    assertSame(ItemTracing.NONE,
        ShardcarWorker.builder().target("127.0.0.1:1").openTelemetry(sdk).tracing(false).settings().tracing());
    assertSame(ItemTracing.ItemSpan.NONE, ItemTracing.NONE.start(context(TRACEPARENT, ""), "i"));
    assertThrows(IllegalArgumentException.class, () -> OpenTelemetryTracing.create("not an OpenTelemetry"));
    assertTrue(ItemTracing.apiPresent());
  }

  @Test
  void theTriggersTraceFieldsReachTheContext() {
    io.shardcar.v1.Trigger trigger = io.shardcar.v1.Trigger.newBuilder()
        .setExecutionId("e1")
        .addItems(io.shardcar.v1.ShardItem.newBuilder().setItem(0))
        .setTraceparent(TRACEPARENT)
        .setTracestate("vendor=abc")
        .build();
    ShardingContext ctx = ProtoMapping.contexts("orders", trigger).get(0);
    assertEquals(TRACEPARENT, ctx.getTraceparent());
    assertEquals("vendor=abc", ctx.getTracestate());
    assertEquals("", new ShardingContext("j", "", 1, "", 0, "", "e", null, 0, null).getTraceparent());
  }
}
