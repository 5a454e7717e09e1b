package io.shardcar.elasticjob;

import io.shardcar.client.JobRegistration;
import io.shardcar.client.ShardcarWorker;
import java.util.Objects;
import org.apache.shardingsphere.elasticjob.api.ElasticJob;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;

/**
 * Drop-in for ElasticJob's {@code ScheduleJobBootstrap}: same shape ({@code schedule()},
 * {@code shutdown()}), but the registry center is replaced by a shardcar worker. The job is a
 * {@code SimpleJob} or a {@code DataflowJob} (one-off, or streaming with the
 * {@code streaming.process} property), as with ElasticJob's class-based executors.
 *
 * <pre>{@code
 * // before: new ScheduleJobBootstrap(registryCenter, new MyJob(), jobConfig).schedule();
 * new ShardcarJobBootstrap(new MyJob(), jobConfig).schedule();
 * }</pre>
 */
public final class ShardcarJobBootstrap implements AutoCloseable {
  private final ShardcarWorker worker;
  private final boolean ownsWorker;
  private final ElasticJob job;
  private final JobConfiguration config;
  private JobRegistration registration;

  /**
   * Uses a worker of its own for the sidecar named by {@code SHARDCAR_TARGET} (default {@code 127.0.0.1:50061}),
   * built with the defaults: the job's items run on a pool of the worker's default executor size (8), and the
   * worker runs as many executions at once ({@code max_concurrent_executions}), so while busy it also
   * takes FAILOVER and MISFIRE runs beside what runs. For ElasticJob's one execution at a time, use
   * {@link #ShardcarJobBootstrap(ShardcarWorker, ElasticJob, JobConfiguration)} with a worker built with
   * {@code maxConcurrentExecutions(1)}.
   *
   * @param job a {@code SimpleJob} or a {@code DataflowJob}
   * @param config the job's ElasticJob configuration
   * @throws IllegalArgumentException when the job is neither a {@code SimpleJob} nor a {@code DataflowJob}
   */
  public ShardcarJobBootstrap(ElasticJob job, JobConfiguration config) {
    this(ShardcarWorker.builder().build(), true, job, config);
  }

  /**
   * Uses a shared worker; {@link #shutdown()} then closes only this job's registration.
   *
   * @param worker the worker to register on
   * @param job a {@code SimpleJob} or a {@code DataflowJob}
   * @param config the job's ElasticJob configuration
   * @throws IllegalArgumentException when the job is neither a {@code SimpleJob} nor a {@code DataflowJob}
   */
  public ShardcarJobBootstrap(ShardcarWorker worker, ElasticJob job, JobConfiguration config) {
    this(worker, false, job, config);
  }

  private ShardcarJobBootstrap(ShardcarWorker worker, boolean ownsWorker, ElasticJob job, JobConfiguration config) {
    this.worker = Objects.requireNonNull(worker, "worker");
    this.ownsWorker = ownsWorker;
    this.job = Objects.requireNonNull(job, "job");
    this.config = Objects.requireNonNull(config, "config");
    if (!ElasticJobBridge.isSupported(job)) {
      if (ownsWorker) {
        worker.close();
      }
      throw new IllegalArgumentException("job " + config.getJobName() + ": " + job.getClass().getName()
          + " is neither a SimpleJob nor a DataflowJob; shardcar runs only those");
    }
  }

  /**
   * Subscribes the job; from now on the sidecar triggers it.
   *
   * @throws io.shardcar.client.ShardcarException when the configuration is invalid or the sidecar
   *     cannot be reached
   */
  public synchronized void schedule() {
    if (registration != null) {
      throw new IllegalStateException("job " + config.getJobName() + " is already scheduled");
    }
    registration = ElasticJobBridge.register(worker, job, config);
  }

  /** The live registration, or null before {@link #schedule()}. */
  public synchronized JobRegistration getRegistration() {
    return registration;
  }

  /** Stops the job: running items get the worker's grace period to finish. Idempotent. */
  public synchronized void shutdown() {
    if (registration != null) {
      registration.close();
    }
    if (ownsWorker) {
      worker.close();
    }
  }

  @Override
  public void close() {
    shutdown();
  }
}
