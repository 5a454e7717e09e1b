package io.shardcar.client;

import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.propagation.W3CTraceContextPropagator;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapGetter;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Each handler in a span {@value #SPAN_NAME}, a child of the sidecar's {@code shardcar.execution}
 * span: the only class of the client that uses {@code opentelemetry-api}, loaded only when it is
 * on the classpath (see {@link ItemTracing#create}).
 *
 * <p>The parent comes from the trigger's {@code traceparent} and {@code tracestate}, read with the
 * W3C Trace Context propagator whatever propagators the application configured: the sidecar
 * always speaks W3C. An empty or malformed {@code traceparent} (an older sidecar) makes the
 * handler span a root span. The span's kind is {@link SpanKind#CONSUMER}: the handler processes
 * a message (the trigger) that another process, the sidecar, sent asynchronously, so its parent is
 * remote; backends draw the edge from the sidecar's service to the worker's.
 */
final class OpenTelemetryTracing implements ItemTracing {
  static final String SPAN_NAME = "shardcar.handler";
  static final String SCOPE_NAME = "io.shardcar.client";
  static final String CANCELLED_EVENT = "shardcar.cancelled";

  static final AttributeKey<String> JOB = AttributeKey.stringKey("shardcar.job");
  static final AttributeKey<String> EXECUTION_ID = AttributeKey.stringKey("shardcar.execution_id");
  static final AttributeKey<Long> ITEM = AttributeKey.longKey("shardcar.item");
  static final AttributeKey<String> SOURCE = AttributeKey.stringKey("shardcar.source");
  static final AttributeKey<Long> FENCING_TOKEN = AttributeKey.longKey("shardcar.fencing_token");
  static final AttributeKey<String> INSTANCE = AttributeKey.stringKey("shardcar.instance");
  static final AttributeKey<String> TASK_ID = AttributeKey.stringKey("shardcar.task_id");
  static final AttributeKey<String> OUTCOME = AttributeKey.stringKey("shardcar.outcome");
  static final AttributeKey<String> REASON = AttributeKey.stringKey("shardcar.reason");

  private static final System.Logger LOG = System.getLogger(OpenTelemetryTracing.class.getName());
  private static final AtomicBoolean WARNED = new AtomicBoolean();

  /** Reads the trigger's two trace fields; an empty field is absent. */
  private static final TextMapGetter<ShardingContext> TRIGGER = new TextMapGetter<>() {
    @Override
    public Iterable<String> keys(ShardingContext carrier) {
      return List.of("traceparent", "tracestate");
    }

    @Override
    public String get(ShardingContext carrier, String key) {
      if (carrier == null) {
        return null;
      }
      String value = switch (key) {
        case "traceparent" -> carrier.getTraceparent();
        case "tracestate" -> carrier.getTracestate();
        default -> "";
      };
      return value.isEmpty() ? null : value;
    }
  };

  /** Null: {@link GlobalOpenTelemetry}, read at each item (so an SDK installed after the worker was built counts). */
  private final OpenTelemetry openTelemetry;
  /** {@code GlobalOpenTelemetry.getOrNoop()} is missing (opentelemetry-api before 1.57). */
  private static volatile boolean noGetOrNoop;

  private OpenTelemetryTracing(OpenTelemetry openTelemetry) {
    this.openTelemetry = openTelemetry;
  }

  /**
   * Tracing with {@code openTelemetry}, or with {@link GlobalOpenTelemetry} when null.
   *
   * @param openTelemetry an {@link OpenTelemetry}, or null
   * @return the tracing
   * @throws IllegalArgumentException when it is not an {@link OpenTelemetry}
   */
  static ItemTracing create(Object openTelemetry) {
    if (openTelemetry != null && !(openTelemetry instanceof OpenTelemetry)) {
      throw new IllegalArgumentException("not an io.opentelemetry.api.OpenTelemetry: " + openTelemetry.getClass());
    }
    return new OpenTelemetryTracing((OpenTelemetry) openTelemetry);
  }

  /** The parent context of an item's handler span: the trigger's {@code traceparent}, else none. */
  static Context parentOf(ShardingContext ctx) {
    return W3CTraceContextPropagator.getInstance().extract(Context.root(), ctx, TRIGGER);
  }

  @Override
  public ItemSpan start(ShardingContext ctx, String instanceId) {
    try {
      OpenTelemetry otel = openTelemetry != null ? openTelemetry : global();
      Context parent = parentOf(ctx);
      Span span = otel.getTracer(SCOPE_NAME)
          .spanBuilder(SPAN_NAME)
          .setParent(parent)
          .setSpanKind(SpanKind.CONSUMER)
          .setAttribute(JOB, ctx.getJobName())
          .setAttribute(EXECUTION_ID, ctx.getExecutionId())
          .setAttribute(ITEM, (long) ctx.getShardingItem())
          .setAttribute(SOURCE, ctx.getSource().name())
          .setAttribute(FENCING_TOKEN, ctx.getFencingToken())
          .setAttribute(INSTANCE, instanceId == null ? "" : instanceId)
          .setAttribute(TASK_ID, ctx.getTaskId())
          .startSpan();
      return new Item(span, parent.with(span));
    } catch (RuntimeException | LinkageError e) {
      warn("cannot start the handler span", e);
      return ItemSpan.NONE;
    }
  }

  /**
   * The global OpenTelemetry if the application set one, else a no-op, without setting the no-op
   * as the global: {@code GlobalOpenTelemetry.get()} would, and the application's own
   * {@code GlobalOpenTelemetry.set} would then fail if a trigger came first. An API older than
   * 1.57 has no {@code getOrNoop()}: {@code get()} then.
   */
  static OpenTelemetry global() {
    if (!noGetOrNoop) {
      try {
        return GlobalOpenTelemetry.getOrNoop();
      } catch (NoSuchMethodError e) {
        noGetOrNoop = true;
      }
    }
    return GlobalOpenTelemetry.get();
  }

  private static void warn(String what, Throwable e) {
    if (WARNED.compareAndSet(false, true)) {
      LOG.log(System.Logger.Level.WARNING, "tracing: " + what + " (further failures are not logged)", e);
    }
  }

  /** One handler's span. */
  private static final class Item implements ItemSpan {
    private final Span span;
    /** The trigger's context with the span: not the item thread's, which an agent may have filled. */
    private final Context context;
    private boolean cancelled;
    private boolean ended;

    Item(Span span, Context context) {
      this.span = span;
      this.context = context;
    }

    @Override
    public Scope makeCurrent() {
      try {
        io.opentelemetry.context.Scope scope = context.makeCurrent();
        return scope::close;
      } catch (RuntimeException e) {
        warn("cannot make the handler span current", e);
        return () -> { };
      }
    }

    @Override
    public synchronized void cancelled(String reason) {
      if (ended || cancelled) {
        return;
      }
      cancelled = true;
      try {
        span.addEvent(CANCELLED_EVENT, Attributes.of(REASON, reason == null ? "" : reason));
      } catch (RuntimeException e) {
        warn("cannot record the cancellation", e);
      }
    }

    @Override
    public synchronized void failed(Throwable error) {
      if (ended) {
        return;
      }
      try {
        span.recordException(error);
      } catch (RuntimeException e) {
        warn("cannot record the exception", e);
      }
    }

    @Override
    public synchronized void end(Outcome outcome, String detail) {
      if (ended) {
        return;
      }
      if (outcome == Outcome.DECLINED) {
        cancelled(detail); // the handler returned before the cancel reached the span
      }
      ended = true;
      try {
        String name = outcome.name().toLowerCase(Locale.ROOT);
        span.setAttribute(OUTCOME, name);
        if (outcome != Outcome.COMPLETED) {
          span.setStatus(StatusCode.ERROR, detail == null || detail.isEmpty() ? name : detail);
        }
        span.end();
      } catch (RuntimeException e) {
        warn("cannot end the handler span", e);
      }
    }
  }
}
