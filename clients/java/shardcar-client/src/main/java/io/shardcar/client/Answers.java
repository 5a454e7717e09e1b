package io.shardcar.client;

import io.grpc.stub.StreamObserver;
import io.shardcar.v1.CompleteRequest;
import io.shardcar.v1.DeclineRequest;
import io.shardcar.v1.ReportFailureRequest;
import io.shardcar.v1.WorkerServiceGrpc;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * Sends the calls {@link RegistrationState} decides on ({@code Complete}, {@code ReportFailure},
 * {@code Decline}) under the answer deadline, and tells whether the sidecar accepted each, refused
 * it, or never got to rule on it (a transport failure).
 */
final class Answers {
  /** The longest {@code ReportFailure.error} and {@code Decline.reason} the sidecar accepts, in bytes of UTF-8. */
  static final int MAX_TEXT_BYTES = 16 * 1024;

  private final WorkerServiceGrpc.WorkerServiceStub stub;
  private final Settings settings;

  Answers(WorkerServiceGrpc.WorkerServiceStub stub, Settings settings) {
    this.stub = stub;
    this.settings = settings;
  }

  /** Sends {@code call}; {@code done} gets its result, on a gRPC thread. */
  void send(RegistrationState.Call call, Consumer<RegistrationState.CallResult> done) {
    WorkerServiceGrpc.WorkerServiceStub s = stub.withDeadlineAfter(settings.answerTimeout().toMillis(), TimeUnit.MILLISECONDS);
    String what = describe(call);
    switch (call.rpc()) {
      case COMPLETE -> s.complete(
          CompleteRequest.newBuilder()
              .setInstanceId(call.instanceId())
              .setExecutionId(call.executionId())
              .addAllItems(call.items())
              .build(),
          observer(what, done));
      case REPORT_FAILURE -> s.reportFailure(
          ReportFailureRequest.newBuilder()
              .setInstanceId(call.instanceId())
              .setExecutionId(call.executionId())
              .setItem(call.items().get(0))
              .setError(truncateUtf8(call.text() == null ? "" : call.text(), MAX_TEXT_BYTES))
              .build(),
          observer(what, done));
      case DECLINE -> s.decline(
          DeclineRequest.newBuilder()
              .setInstanceId(call.instanceId())
              .setExecutionId(call.executionId())
              .addAllItems(call.items())
              .setReason(truncateUtf8(call.text() == null ? "" : call.text(), MAX_TEXT_BYTES))
              .build(),
          observer(what, done));
    }
  }

  static String describe(RegistrationState.Call call) {
    String verb = switch (call.rpc()) {
      case COMPLETE -> "complete";
      case REPORT_FAILURE -> "report failure of";
      case DECLINE -> "decline";
    };
    return verb + " item(s) " + call.items() + " of execution " + call.executionId();
  }

  /**
   * The longest prefix of {@code text} whose UTF-8 encoding has at most {@code maxBytes} bytes,
   * never splitting a character (a surrogate pair stays whole).
   */
  static String truncateUtf8(String text, int maxBytes) {
    if (text.length() * 3L <= maxBytes) {
      return text; // at most 3 bytes per UTF-16 unit: it fits whatever it holds
    }
    int bytes = 0;
    int i = 0;
    while (i < text.length()) {
      int cp = text.codePointAt(i);
      int size = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
      if (bytes + size > maxBytes) {
        return text.substring(0, i);
      }
      bytes += size;
      i += Character.charCount(cp);
    }
    return text;
  }

  private <T> StreamObserver<T> observer(String what, Consumer<RegistrationState.CallResult> done) {
    return new StreamObserver<T>() {
      @Override
      public void onNext(T value) {}

      @Override
      public void onError(Throwable t) {
        done.accept(Errors.callResult(settings.target(), what, t));
      }

      @Override
      public void onCompleted() {
        done.accept(RegistrationState.CallResult.accepted());
      }
    };
  }
}
