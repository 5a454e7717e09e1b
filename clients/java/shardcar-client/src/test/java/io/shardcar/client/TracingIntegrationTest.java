package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.SpanId;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.testing.exporter.InMemorySpanExporter;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.data.EventData;
import io.opentelemetry.sdk.trace.data.SpanData;
import io.opentelemetry.sdk.trace.export.SimpleSpanProcessor;
import io.shardcar.client.testing.OtlpTraceReceiver;
import io.shardcar.client.testing.Processes;
import io.shardcar.client.testing.Recorder;
import io.shardcar.client.testing.SidecarAdmin;
import io.shardcar.client.testing.SidecarProcess;
import io.shardcar.client.testing.WorkerMain;
import io.shardcar.client.testing.WorkerProcess;
import java.time.Duration;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Handler spans against a real sidecar that exports its {@code shardcar.execution} spans by
 * OTLP/gRPC to a receiver in the test ({@link OtlpTraceReceiver}); the worker's spans go to an
 * in-memory exporter. The sidecar exports about every second: every wait polls. The handler span
 * is a child of the trigger's {@code traceparent} and of the received execution span; a
 * {@code TriggerJob} call with {@code traceparent} metadata puts both into the caller's trace; a
 * worker JVM without any OpenTelemetry jar on its classpath works.
 */
@Tag("integration")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class TracingIntegrationTest {
  private static final String EVERY_SECOND = "* * * * * ?";
  private static final Duration WAIT = Duration.ofSeconds(20);
  private static final AttributeKey<String> EXECUTION_ID = AttributeKey.stringKey("shardcar.execution_id");
  private static final AttributeKey<Long> ITEM = AttributeKey.longKey("shardcar.item");
  private static final AttributeKey<String> OUTCOME = AttributeKey.stringKey("shardcar.outcome");

  private OtlpTraceReceiver receiver;
  private SidecarProcess sidecar;
  private InMemorySpanExporter exporter;
  private OpenTelemetrySdk sdk;
  private Recorder recorder;
  private ShardcarWorker worker;

  @BeforeEach
  void start() {
    receiver = OtlpTraceReceiver.start();
    sidecar = SidecarProcess.start(List.of("--otlp-endpoint", receiver.endpoint()));
    exporter = InMemorySpanExporter.create();
    sdk = OpenTelemetrySdk.builder()
        .setTracerProvider(SdkTracerProvider.builder().addSpanProcessor(SimpleSpanProcessor.create(exporter)).build())
        .build();
    recorder = new Recorder();
    worker = ShardcarWorker.builder()
        .target(sidecar.target())
        .openTelemetry(sdk)
        .connectTimeout(Duration.ofSeconds(10))
        .drainTimeout(Duration.ofSeconds(2))
        .listener(recorder)
        .build();
  }

  @AfterEach
  void stop() {
    try {
      if (worker != null) {
        worker.close();
      }
    } finally {
      try {
        sidecar.close();
      } finally {
        receiver.close();
        sdk.close();
      }
    }
  }

  /** {@code [trace id, span id]} of a W3C {@code traceparent}. */
  private static String[] ids(String traceparent) {
    String[] parts = traceparent.split("-");
    assertEquals(4, parts.length, traceparent);
    return new String[] {parts[1], parts[2]};
  }

  /** Waits (polling the in-memory exporter) for a finished span that matches. */
  private SpanData awaitSpan(String what, Predicate<SpanData> match) {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (true) {
      Optional<SpanData> found = exporter.getFinishedSpanItems().stream().filter(match).findFirst();
      if (found.isPresent()) {
        return found.get();
      }
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("timed out waiting for " + what + "; spans: " + exporter.getFinishedSpanItems()
            + "; recorded: " + recorder.events());
      }
      Processes.sleep(20);
    }
  }

  private static boolean isHandler(SpanData s) {
    return s.getName().equals(OpenTelemetryTracing.SPAN_NAME);
  }

  @Test
  void theHandlerSpanIsAChildOfTheTriggersTraceparentAndTheUsersSpansNestInIt() {
    Map<String, ShardingContext> contexts = new ConcurrentHashMap<>();
    Map<String, SpanContext> current = new ConcurrentHashMap<>();
    JobRegistration registration = worker.register(
        JobConfig.newBuilder("traced-job", 2).cron(EVERY_SECOND).build(),
        ctx -> {
          String key = ctx.getExecutionId() + "/" + ctx.getShardingItem();
          contexts.put(key, ctx);
          current.put(key, Span.current().getSpanContext());
          sdk.getTracer("user").spanBuilder("user.work").setAttribute("key", key).startSpan().end();
        });

    for (int item : new int[] {0, 1}) {
      SpanData handler = awaitSpan("a finished handler span of item " + item,
          s -> isHandler(s) && s.getAttributes().get(ITEM) == item);
      String key = handler.getAttributes().get(EXECUTION_ID) + "/" + item;
      ShardingContext ctx = contexts.get(key);
      String[] trigger = ids(ctx.getTraceparent());
      assertEquals(trigger[0], handler.getTraceId(), "the trigger's trace");
      assertEquals(trigger[1], handler.getParentSpanId(), "the trigger's span is the parent");
      assertTrue(handler.getParentSpanContext().isRemote());
      assertEquals(SpanKind.CONSUMER, handler.getKind());
      assertEquals(current.get(key), handler.getSpanContext(), "the handler span was current in the handler");
      assertEquals("traced-job", handler.getAttributes().get(AttributeKey.stringKey("shardcar.job")));
      assertEquals(registration.getInstanceId(), handler.getAttributes().get(AttributeKey.stringKey("shardcar.instance")));
      assertEquals(ctx.getSource().name(), handler.getAttributes().get(AttributeKey.stringKey("shardcar.source")));
      assertEquals(ctx.getFencingToken(), handler.getAttributes().get(AttributeKey.longKey("shardcar.fencing_token")));
      assertEquals("completed", handler.getAttributes().get(OUTCOME));
      assertEquals(StatusCode.UNSET, handler.getStatus().getStatusCode());

      SpanData user = awaitSpan("the user's span in " + key,
          s -> s.getName().equals("user.work") && key.equals(s.getAttributes().get(AttributeKey.stringKey("key"))));
      assertEquals(handler.getTraceId(), user.getTraceId());
      assertEquals(handler.getSpanId(), user.getParentSpanId());
    }
  }

  @Test
  void theSidecarsExecutionSpanReceivedByOtlpIsTheParentOfTheHandlerSpan() {
    worker.register(JobConfig.newBuilder("otlp-job", 1).cron(EVERY_SECOND).build(), ctx -> { });
    SpanData handler = awaitSpan("a finished handler span", TracingIntegrationTest::isHandler);
    String executionId = handler.getAttributes().get(EXECUTION_ID);

    OtlpTraceReceiver.Received execution = receiver.await("the shardcar.execution span of " + executionId, WAIT,
        r -> r.span().getName().equals("shardcar.execution") && r.spanId().equals(handler.getParentSpanId()));
    assertEquals(handler.getTraceId(), execution.traceId());
    assertEquals(executionId, execution.attribute("shardcar.execution_id").orElse(null));
    assertEquals("otlp-job", execution.attribute("shardcar.job").orElse(null));
    assertTrue(execution.parentSpanId().isEmpty() || execution.parentSpanId().equals(SpanId.getInvalid()),
        "a cron fire starts its own trace: " + execution);
  }

  @Test
  void aTriggerJobCallWithTraceparentPutsTheExecutionAndTheHandlerInTheCallersTrace() {
    String job = "caller-trace-job";
    JobRegistration registration = worker.register(JobConfig.newBuilder(job, 1).cron(WorkerMain.NEVER).build(), ctx -> { });
    String callerTrace = randomHex(16);
    String callerSpan = randomHex(8);
    try (SidecarAdmin admin = new SidecarAdmin(sidecar)) {
      List<String> asked = admin.trigger(job,
          Map.of("traceparent", "00-" + callerTrace + "-" + callerSpan + "-01", "tracestate", "caller=t61"));
      assertEquals(List.of(registration.getInstanceId()), asked);
    }

    SpanData handler = awaitSpan("the handler span in the caller's trace",
        s -> isHandler(s) && s.getTraceId().equals(callerTrace));
    assertNotEquals(callerSpan, handler.getParentSpanId(), "the handler's parent is the execution, not the caller");
    assertEquals("t61", handler.getSpanContext().getTraceState().get("caller"), "the caller's tracestate came along");
    assertEquals("MANUAL", handler.getAttributes().get(AttributeKey.stringKey("shardcar.source")));

    OtlpTraceReceiver.Received execution = receiver.await("the execution span in the caller's trace", WAIT,
        r -> r.span().getName().equals("shardcar.execution") && r.traceId().equals(callerTrace));
    assertEquals(callerSpan, execution.parentSpanId(), "the execution continues the caller's span");
    assertEquals(handler.getParentSpanId(), execution.spanId(), "the execution span is the handler span's parent");
    assertEquals(handler.getAttributes().get(EXECUTION_ID), execution.attribute("shardcar.execution_id").orElse(null));
  }

  @Test
  void aFailedHandlersSpanHasTheExceptionAndAnErrorStatus() {
    worker.register(JobConfig.newBuilder("failing-job", 1).cron(EVERY_SECOND).build(), ctx -> {
      throw new IllegalStateException("boom in the handler");
    });
    SpanData handler = awaitSpan("a failed handler span", TracingIntegrationTest::isHandler);
    assertEquals(StatusCode.ERROR, handler.getStatus().getStatusCode());
    assertEquals("java.lang.IllegalStateException: boom in the handler", handler.getStatus().getDescription());
    assertEquals("failed", handler.getAttributes().get(OUTCOME));
    EventData exception = handler.getEvents().get(0);
    assertEquals("exception", exception.getName());
    assertEquals("boom in the handler", exception.getAttributes().get(AttributeKey.stringKey("exception.message")));
  }

  @Test
  void aRevokedHandlersSpanRecordsTheCancellation() {
    // An item still running after executionTimeoutSeconds is revoked: interrupted, then declined.
    worker.register(JobConfig.newBuilder("revoked-job", 1).cron(EVERY_SECOND).executionTimeoutSeconds(1).build(),
        ctx -> {
          try {
            Thread.sleep(120_000);
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt(); // and return: the contract declines it
          }
        });
    SpanData handler = awaitSpan("a declined handler span",
        s -> isHandler(s) && "declined".equals(s.getAttributes().get(OUTCOME)));
    List<EventData> cancels = handler.getEvents().stream()
        .filter(e -> e.getName().equals(OpenTelemetryTracing.CANCELLED_EVENT)).toList();
    assertEquals(1, cancels.size(), handler.getEvents().toString());
    String reason = cancels.get(0).getAttributes().get(OpenTelemetryTracing.REASON);
    assertTrue(reason.startsWith("revoked: "), reason);
    assertEquals(StatusCode.ERROR, handler.getStatus().getStatusCode());
  }

  /** The client without opentelemetry-api: a worker JVM whose classpath has no OpenTelemetry jar. */
  @Test
  void withoutOpenTelemetryOnTheClasspathTheWorkerRunsItsItemsUntraced() {
    String classpath = WorkerProcess.testClasspath();
    assertTrue(classpath.contains("/io/opentelemetry/"), "the test classpath has OpenTelemetry");
    assertFalse(WorkerProcess.withoutOpenTelemetry(classpath).contains("opentelemetry"));
    String job = "untraced-job";
    try (SidecarAdmin admin = new SidecarAdmin(sidecar);
        WorkerProcess child = WorkerProcess.startWithoutOpenTelemetry(sidecar.target(), job, "quick")) {
      admin.trigger(job, Map.of("traceparent", "00-" + randomHex(16) + "-" + randomHex(8) + "-01"));
      String started = child.await("the item started", WAIT, l -> l.startsWith("STARTED "));
      String item = started.substring("STARTED ".length());
      child.await("the item answered", WAIT, l -> l.equals("ANSWERED " + item + " failure=null refused=null"));
      assertFalse(child.logTail().contains("NoClassDefFoundError"), child.logTail());
    }
  }

  private static String randomHex(int bytes) {
    byte[] b = new byte[bytes];
    ThreadLocalRandom.current().nextBytes(b);
    b[0] |= 1; // never all zero
    return HexFormat.of().formatHex(b);
  }
}
