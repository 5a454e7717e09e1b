package io.shardcar.client;

/**
 * Runs each handler in a span, or does nothing: the face of {@link OpenTelemetryTracing} that
 * names no OpenTelemetry type, so that the client loads and runs without {@code opentelemetry-api}
 * on the classpath. {@link OpenTelemetryTracing} is only loaded once {@link #create} found the API.
 */
interface ItemTracing {
  /** The class whose presence means that {@code opentelemetry-api} (and its context) is there. */
  String API_CLASS = "io.opentelemetry.api.GlobalOpenTelemetry";
  String CONTEXT_CLASS = "io.opentelemetry.context.Context";

  /** No tracing. */
  ItemTracing NONE = (ctx, instanceId) -> ItemSpan.NONE;

  /** How an item ended, for its span. */
  enum Outcome {
    /** {@code Complete} was sent. */
    COMPLETED,
    /** {@code ReportFailure} was sent: the handler threw. */
    FAILED,
    /** Not answered: cancelled (revoke, lease, drain timeout, lost stream) and given back with {@code Decline}, or its stream ended. */
    DECLINED
  }

  /**
   * Starts the span of one item's handler. Called on the item thread right before the handler;
   * never throws (a broken tracer must not fail an item).
   *
   * @param ctx the item
   * @param instanceId the registration's instance id
   * @return the span, {@link ItemSpan#NONE} when not tracing
   */
  ItemSpan start(ShardingContext ctx, String instanceId);

  /** One handler's span. Every method swallows its own failures. */
  interface ItemSpan {
    ItemSpan NONE = new ItemSpan() {
      @Override
      public Scope makeCurrent() {
        return () -> { };
      }

      @Override
      public void cancelled(String reason) {}

      @Override
      public void failed(Throwable error) {}

      @Override
      public void end(Outcome outcome, String detail) {}
    };

    /** Makes the span current on this thread until the scope closes (on the same thread). */
    Scope makeCurrent();

    /** The item was cancelled while its handler ran (an event; only the first counts). */
    void cancelled(String reason);

    /** The handler threw. */
    void failed(Throwable error);

    /** Ends the span; later calls do nothing. {@code detail}: the failure or the reason it was not answered. */
    void end(Outcome outcome, String detail);
  }

  /** A current span's scope. */
  interface Scope extends AutoCloseable {
    @Override
    void close();
  }

  /**
   * The tracing a worker uses: none when {@code enabled} is false or the OpenTelemetry API is not
   * on the classpath; else spans from {@code openTelemetry} (an {@code io.opentelemetry.api.OpenTelemetry}),
   * or from {@code GlobalOpenTelemetry} when it is null.
   */
  static ItemTracing create(boolean enabled, Object openTelemetry) {
    if (!enabled) {
      return NONE;
    }
    if (openTelemetry == null && !apiPresent()) {
      return NONE;
    }
    try {
      return OpenTelemetryTracing.create(openTelemetry);
    } catch (LinkageError e) {
      // An opentelemetry-api too old for this client: work untraced rather than not at all.
      System.getLogger(ItemTracing.class.getName()).log(System.Logger.Level.WARNING,
          "tracing off: the OpenTelemetry API on the classpath cannot be used", e);
      return NONE;
    }
  }

  /** Whether {@code opentelemetry-api} can be loaded by the client's class loader. */
  static boolean apiPresent() {
    ClassLoader loader = ItemTracing.class.getClassLoader();
    try {
      Class.forName(API_CLASS, false, loader);
      Class.forName(CONTEXT_CLASS, false, loader);
      return true;
    } catch (ClassNotFoundException | LinkageError e) {
      return false;
    }
  }
}
