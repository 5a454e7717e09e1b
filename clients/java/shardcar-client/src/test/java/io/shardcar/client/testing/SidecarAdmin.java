package io.shardcar.client.testing;

import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.stub.MetadataUtils;
import io.shardcar.v1.AdminServiceGrpc;
import io.shardcar.v1.DisableJobRequest;
import io.shardcar.v1.ExecutionInfo;
import io.shardcar.v1.GetJobRequest;
import io.shardcar.v1.ItemInfo;
import io.shardcar.v1.ListExecutionsRequest;
import io.shardcar.v1.ShutdownInstanceRequest;
import io.shardcar.v1.TriggerJobRequest;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;

/** The sidecar's {@code AdminService}, for tests: trigger a job by hand, shut an instance down, read executions. */
public final class SidecarAdmin implements AutoCloseable {
  private final ManagedChannel channel;
  private final AdminServiceGrpc.AdminServiceBlockingStub stub;

  public SidecarAdmin(SidecarProcess sidecar) {
    this.channel = ManagedChannelBuilder.forTarget(sidecar.target()).usePlaintext().build();
    this.stub = AdminServiceGrpc.newBlockingStub(channel);
  }

  /** Runs the job once now on every live instance; returns the instances asked to run. */
  public List<String> trigger(String jobName) {
    return stub.withDeadlineAfter(10, TimeUnit.SECONDS)
        .triggerJob(TriggerJobRequest.newBuilder().setJobName(jobName).build())
        .getInstanceIdsList();
  }

  /**
   * {@link #trigger(String)} with call metadata, e.g. a W3C {@code traceparent} (and
   * {@code tracestate}) that the executions it starts continue.
   */
  public List<String> trigger(String jobName, Map<String, String> metadata) {
    Metadata headers = new Metadata();
    metadata.forEach((k, v) -> headers.put(Metadata.Key.of(k, Metadata.ASCII_STRING_MARSHALLER), v));
    return stub.withDeadlineAfter(10, TimeUnit.SECONDS)
        .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(headers))
        .triggerJob(TriggerJobRequest.newBuilder().setJobName(jobName).build())
        .getInstanceIdsList();
  }

  /** Remote shutdown of one instance in one job ({@code ShutdownInstance}); returns the jobs it was removed from. */
  public List<String> shutdownInstance(String jobName, String instanceId) {
    return stub.withDeadlineAfter(10, TimeUnit.SECONDS)
        .shutdownInstance(ShutdownInstanceRequest.newBuilder().setJobName(jobName).setInstanceId(instanceId).build())
        .getJobNamesList();
  }

  /** Disables the job ({@code DisableJob}): its instances are assigned no items. */
  public void disableJob(String jobName) {
    stub.withDeadlineAfter(10, TimeUnit.SECONDS).disableJob(DisableJobRequest.newBuilder().setJobName(jobName).build());
  }

  /** The job's items as the registry has them ({@code GetJob}): owner, running, failover flags. */
  public Map<Integer, ItemInfo> items(String jobName) {
    Map<Integer, ItemInfo> items = new java.util.TreeMap<>();
    for (ItemInfo item : stub.withDeadlineAfter(10, TimeUnit.SECONDS)
        .getJob(GetJobRequest.newBuilder().setJobName(jobName).build()).getJob().getItemsList()) {
      items.put(item.getItem(), item);
    }
    return items;
  }

  /** Finished executions of the job, newest first. */
  public List<ExecutionInfo> executions(String jobName) {
    return stub.withDeadlineAfter(10, TimeUnit.SECONDS)
        .listExecutions(ListExecutionsRequest.newBuilder().setJobName(jobName).build())
        .getExecutionsList();
  }

  /** Waits until the sidecar lists a finished execution that matches. */
  public ExecutionInfo awaitExecution(String jobName, String what, Duration timeout, Predicate<ExecutionInfo> match) {
    long deadline = System.nanoTime() + timeout.toNanos();
    List<ExecutionInfo> seen = List.of();
    while (System.nanoTime() - deadline < 0) {
      seen = executions(jobName);
      Optional<ExecutionInfo> found = seen.stream().filter(match).findFirst();
      if (found.isPresent()) {
        return found.get();
      }
      Processes.sleep(100);
    }
    throw new AssertionError("timed out after " + timeout + " waiting for " + what + "; executions: " + seen);
  }

  @Override
  public void close() {
    channel.shutdownNow();
    try {
      channel.awaitTermination(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
