package io.shardcar.client.testing;

import io.grpc.InsecureServerCredentials;
import io.grpc.Server;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import io.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;
import io.opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse;
import io.opentelemetry.proto.collector.trace.v1.TraceServiceGrpc;
import io.opentelemetry.proto.common.v1.KeyValue;
import io.opentelemetry.proto.trace.v1.ResourceSpans;
import io.opentelemetry.proto.trace.v1.ScopeSpans;
import io.opentelemetry.proto.trace.v1.Span;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;

/**
 * A tiny OTLP/gRPC trace collector on a free port of 127.0.0.1 (grpc-netty-shaded's server): it keeps
 * every span exported to it, for a sidecar started with {@code --otlp-endpoint} {@link #endpoint()}.
 * Always closed by the test: use try-with-resources.
 */
public final class OtlpTraceReceiver extends TraceServiceGrpc.TraceServiceImplBase implements AutoCloseable {
  /** One received span with the service that sent it. */
  public record Received(String serviceName, Span span) {
    public String traceId() {
      return hex(span.getTraceId().toByteArray());
    }

    public String spanId() {
      return hex(span.getSpanId().toByteArray());
    }

    public String parentSpanId() {
      return hex(span.getParentSpanId().toByteArray());
    }

    /** A string attribute, or empty. */
    public Optional<String> attribute(String key) {
      return span.getAttributesList().stream().filter(kv -> kv.getKey().equals(key)).findFirst()
          .map(KeyValue::getValue).map(v -> v.hasStringValue() ? v.getStringValue() : v.toString());
    }

    @Override
    public String toString() {
      return span.getName() + "{service=" + serviceName + ", trace=" + traceId() + ", span=" + spanId()
          + ", parent=" + parentSpanId() + ", execution=" + attribute("shardcar.execution_id").orElse("") + "}";
    }
  }

  private final Server server;
  private final List<Received> spans = new ArrayList<>();
  private int exports;

  private OtlpTraceReceiver() {
    this.server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0), InsecureServerCredentials.create())
        .addService(this)
        .build();
  }

  /** Listens on a free port of 127.0.0.1. */
  public static OtlpTraceReceiver start() {
    OtlpTraceReceiver receiver = new OtlpTraceReceiver();
    try {
      receiver.server.start();
    } catch (IOException e) {
      throw new IllegalStateException("cannot start the OTLP receiver", e);
    }
    return receiver;
  }

  /** {@code http://127.0.0.1:PORT}, for {@code --otlp-endpoint}. */
  public String endpoint() {
    return "http://127.0.0.1:" + server.getPort();
  }

  @Override
  public void export(ExportTraceServiceRequest request, StreamObserver<ExportTraceServiceResponse> response) {
    List<Received> received = new ArrayList<>();
    for (ResourceSpans rs : request.getResourceSpansList()) {
      String service = rs.getResource().getAttributesList().stream()
          .filter(kv -> kv.getKey().equals("service.name")).findFirst()
          .map(kv -> kv.getValue().getStringValue()).orElse("");
      for (ScopeSpans ss : rs.getScopeSpansList()) {
        for (Span span : ss.getSpansList()) {
          received.add(new Received(service, span));
        }
      }
    }
    synchronized (this) {
      spans.addAll(received);
      exports++;
      notifyAll();
    }
    response.onNext(ExportTraceServiceResponse.getDefaultInstance());
    response.onCompleted();
  }

  /** Every span received so far. */
  public synchronized List<Received> spans() {
    return new ArrayList<>(spans);
  }

  /** Waits (by polling as exports arrive) for a received span that matches. */
  public synchronized Received await(String what, Duration timeout, Predicate<Received> match) {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (true) {
      Optional<Received> found = spans.stream().filter(match).findFirst();
      if (found.isPresent()) {
        return found.get();
      }
      long left = deadline - System.nanoTime();
      if (left <= 0) {
        throw new AssertionError("timed out after " + timeout + " waiting for " + what + "; " + exports
            + " export call(s), spans: " + spans);
      }
      try {
        wait(Math.max(1, Math.min(100, left / 1_000_000)));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new AssertionError("interrupted", e);
      }
    }
  }

  static String hex(byte[] bytes) {
    return HexFormat.of().formatHex(bytes);
  }

  @Override
  public void close() {
    server.shutdownNow();
    try {
      server.awaitTermination(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
