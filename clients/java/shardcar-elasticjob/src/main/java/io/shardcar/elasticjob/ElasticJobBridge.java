package io.shardcar.elasticjob;

import io.shardcar.client.JobConfig;
import io.shardcar.client.JobHandler;
import io.shardcar.client.JobRegistration;
import io.shardcar.client.ShardcarException;
import io.shardcar.client.ShardcarWorker;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.apache.shardingsphere.elasticjob.api.ShardingContext;
import org.apache.shardingsphere.elasticjob.simple.job.SimpleJob;

/**
 * Runs ElasticJob-Lite 3.x {@link SimpleJob} implementations, unchanged, through a shardcar
 * sidecar: the job's {@link JobConfiguration} is mapped to shardcar's {@link JobConfig} and its
 * {@code execute(ShardingContext)} is called once per item with ElasticJob's own
 * {@link ShardingContext}.
 *
 * <pre>{@code
 * // before: new ScheduleJobBootstrap(registryCenter, new MyJob(), jobConfig).schedule();
 * ShardcarWorker worker = ElasticJobBridge.run(new MyJob(), jobConfig);
 * }</pre>
 */
public final class ElasticJobBridge {
  private static final System.Logger LOG = System.getLogger(ElasticJobBridge.class.getName());

  private ElasticJobBridge() {}

  /**
   * Starts a worker for the sidecar named by {@code SHARDCAR_TARGET} (default
   * {@code 127.0.0.1:50061}) and registers {@code job} on it. Close the returned worker to stop.
   *
   * @throws ShardcarException when the configuration is invalid or the sidecar cannot be reached
   */
  public static ShardcarWorker run(SimpleJob job, JobConfiguration config) {
    return run(ShardcarWorker.builder().build(), job, config);
  }

  /**
   * Registers {@code job} on {@code worker} and returns the worker; on failure the worker is closed.
   *
   * @throws ShardcarException when the configuration is invalid or the sidecar cannot be reached
   */
  public static ShardcarWorker run(ShardcarWorker worker, SimpleJob job, JobConfiguration config) {
    try {
      register(worker, job, config);
      return worker;
    } catch (RuntimeException e) {
      worker.close();
      throw e;
    }
  }

  /** Registers {@code job} with its ElasticJob configuration on an existing worker. */
  public static JobRegistration register(ShardcarWorker worker, SimpleJob job, JobConfiguration config) {
    return worker.register(toJobConfig(config), handler(job));
  }

  /** Calls {@code job.execute} with ElasticJob's {@link ShardingContext} for each item. */
  public static JobHandler handler(SimpleJob job) {
    Objects.requireNonNull(job, "job");
    return ctx -> job.execute(toShardingContext(ctx));
  }

  /** ElasticJob's view of one item. */
  public static ShardingContext toShardingContext(io.shardcar.client.ShardingContext ctx) {
    return new ShardingContext(
        ctx.getJobName(),
        ctx.getTaskId(),
        ctx.getShardingTotalCount(),
        ctx.getJobParameter(),
        ctx.getShardingItem(),
        ctx.getShardingParameter());
  }

  /**
   * Maps every {@link JobConfiguration} setting shardcar shares with ElasticJob. Settings that
   * belong to ElasticJob's in-process executor (executor service handler, error handler,
   * listeners, extra configurations, label, static sharding) have no meaning here and are
   * ignored with a warning when set.
   *
   * @throws io.shardcar.client.InvalidJobConfigException for a malformed
   *     {@code shardingItemParameters} or an unknown sharding strategy
   */
  public static JobConfig toJobConfig(JobConfiguration c) {
    Objects.requireNonNull(c, "config");
    List<String> ignored = new ArrayList<>();
    if (notBlank(c.getJobExecutorServiceHandlerType())) {
      ignored.add("jobExecutorServiceHandlerType");
    }
    if (notBlank(c.getJobErrorHandlerType())) {
      ignored.add("jobErrorHandlerType");
    }
    if (c.getJobListenerTypes() != null && !c.getJobListenerTypes().isEmpty()) {
      ignored.add("jobListenerTypes");
    }
    if (c.getExtraConfigurations() != null && !c.getExtraConfigurations().isEmpty()) {
      ignored.add("extraConfigurations");
    }
    if (notBlank(c.getLabel())) {
      ignored.add("label");
    }
    if (c.isStaticSharding()) {
      ignored.add("staticSharding");
    }
    if (!ignored.isEmpty()) {
      LOG.log(System.Logger.Level.WARNING,
          "job {0}: ElasticJob settings {1} do not apply under shardcar and are ignored", c.getJobName(), ignored);
    }
    JobConfig.Builder b = JobConfig.newBuilder(c.getJobName(), c.getShardingTotalCount())
        .cron(c.getCron())
        .timeZone(c.getTimeZone())
        .shardingItemParameters(c.getShardingItemParameters())
        .jobParameter(c.getJobParameter())
        .failover(c.isFailover())
        .misfire(c.isMisfire())
        .monitorExecution(c.isMonitorExecution())
        .shardingStrategy(c.getJobShardingStrategyType())
        .maxTimeDiffSeconds(c.getMaxTimeDiffSeconds())
        .reconcileIntervalMinutes(c.getReconcileIntervalMinutes())
        .description(c.getDescription())
        .disabled(c.isDisabled())
        .overwrite(c.isOverwrite());
    if (c.getProps() != null) {
      b.props(c.getProps());
    }
    return b.build();
  }

  private static boolean notBlank(String s) {
    return s != null && !s.isBlank();
  }
}
