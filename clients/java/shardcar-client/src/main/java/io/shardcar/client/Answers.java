package io.shardcar.client;

import io.grpc.stub.StreamObserver;
import io.shardcar.v1.CompleteRequest;
import io.shardcar.v1.ReportFailureRequest;
import io.shardcar.v1.WorkerGrpc;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/** Sends one item's answer ({@code Complete} or {@code ReportFailure}) under the answer deadline. */
final class Answers {
  private final WorkerGrpc.WorkerStub stub;
  private final Settings settings;

  Answers(WorkerGrpc.WorkerStub stub, Settings settings) {
    this.stub = stub;
    this.settings = settings;
  }

  /**
   * Answers {@code item} of {@code execution}: completed when {@code failure} is null, else failed
   * with that text. {@code done} gets null when the sidecar accepted the answer, else why not; it
   * runs on a gRPC thread.
   */
  void send(String instanceId, String execution, int item, String failure, Consumer<ShardcarException> done) {
    WorkerGrpc.WorkerStub s = stub.withDeadlineAfter(settings.answerTimeout().toMillis(), TimeUnit.MILLISECONDS);
    String what = (failure == null ? "complete" : "report failure of") + " item " + item + " of execution " + execution;
    if (failure == null) {
      s.complete(
          CompleteRequest.newBuilder().setInstanceId(instanceId).setExecutionId(execution).addItems(item).build(),
          observer(what, done));
    } else {
      s.reportFailure(
          ReportFailureRequest.newBuilder()
              .setInstanceId(instanceId)
              .setExecutionId(execution)
              .setItem(item)
              .setError(failure)
              .build(),
          observer(what, done));
    }
  }

  private <T> StreamObserver<T> observer(String what, Consumer<ShardcarException> done) {
    return new StreamObserver<T>() {
      @Override
      public void onNext(T value) {}

      @Override
      public void onError(Throwable t) {
        done.accept(Errors.fromThrowable(settings.target(), what, t));
      }

      @Override
      public void onCompleted() {
        done.accept(null);
      }
    };
  }
}
