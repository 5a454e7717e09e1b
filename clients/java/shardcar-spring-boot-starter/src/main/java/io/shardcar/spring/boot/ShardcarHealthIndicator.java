package io.shardcar.spring.boot;

import io.shardcar.client.Assignment;
import io.shardcar.client.JobRegistration;
import java.util.LinkedHashMap;
import java.util.Map;
import org.springframework.boot.actuate.health.Health;
import org.springframework.boot.actuate.health.HealthIndicator;

/**
 * Actuator health of the {@code shardcar.jobs} (contributor {@code shardcar}): UP when every job is
 * registered with the sidecar on a live stream, DOWN otherwise. The details name each job with
 * its {@code state} ({@code ACTIVE}, {@code CONNECTING}, {@code RECONNECTING}, {@code CLOSED}, or
 * {@code FAILED} when it could not be registered at startup), and when registered its
 * {@code instanceId}, {@code items}, {@code leader} and {@code leaseValid}; a failed job has its
 * {@code error}.
 */
public class ShardcarHealthIndicator implements HealthIndicator {
  private final ShardcarJobs jobs;
  private final String target;

  public ShardcarHealthIndicator(ShardcarJobs jobs, String target) {
    this.jobs = jobs;
    this.target = target;
  }

  @Override
  public Health health() {
    boolean up = true;
    Map<String, Object> details = new LinkedHashMap<>();
    for (ShardcarJobs.JobStatus status : jobs.getStatuses()) {
      Map<String, Object> job = new LinkedHashMap<>();
      JobRegistration registration = status.registration();
      if (registration == null) {
        job.put("state", status.startupFailure() != null ? "FAILED" : "NOT_STARTED");
      } else {
        job.put("state", registration.getState().name());
        job.put("instanceId", registration.getInstanceId());
        Assignment assignment = registration.getAssignment();
        job.put("items", assignment.itemNumbers());
        job.put("leader", assignment.leader());
        job.put("leaseValid", registration.hasValidLease());
      }
      status.failure().ifPresent(e -> job.put("error", e.getClass().getSimpleName() + ": " + e.getMessage()));
      up &= status.isRegistered();
      details.put(status.jobName(), job);
    }
    return (up ? Health.up() : Health.down())
        .withDetail("target", target)
        .withDetail("jobs", details)
        .build();
  }
}
