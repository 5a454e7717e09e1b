package io.shardcar.elasticjob;

import io.shardcar.client.DataflowHandler;
import io.shardcar.client.JobConfig;
import io.shardcar.client.JobHandler;
import io.shardcar.client.JobRegistration;
import io.shardcar.client.ShardcarException;
import io.shardcar.client.ShardcarWorker;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import org.apache.shardingsphere.elasticjob.api.ElasticJob;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.apache.shardingsphere.elasticjob.api.ShardingContext;
import org.apache.shardingsphere.elasticjob.dataflow.job.DataflowJob;
import org.apache.shardingsphere.elasticjob.simple.job.SimpleJob;

/**
 * Runs ElasticJob-Lite 3.x {@link SimpleJob} and {@link DataflowJob} implementations, unchanged,
 * through a shardcar sidecar: the job's {@link JobConfiguration} is mapped to shardcar's
 * {@link JobConfig}; a {@code SimpleJob}'s {@code execute(ShardingContext)} is called once per
 * item with ElasticJob's own {@link ShardingContext}, a {@code DataflowJob}'s
 * {@code fetchData}/{@code processData} as ElasticJob's {@code DataflowJobExecutor} calls them
 * (one-off, or streaming with the {@code streaming.process} property; see
 * {@link DataflowHandler}).
 *
 * <p>The job runs on the worker's item pool and with the worker's {@code max_concurrent_executions}
 * ({@link ShardcarWorker.Builder#maxConcurrentExecutions(int)}, default the executor size): a busy
 * instance also takes FAILOVER and MISFIRE runs beside what runs, so {@code execute} may be called for
 * items of two executions at once, as it already is for the items of one. The {@code run(job, config)}
 * forms use a worker with the defaults; pass one built with {@code maxConcurrentExecutions(1)} for
 * ElasticJob's one execution at a time.
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

  /**
   * Starts a worker for the sidecar named by {@code SHARDCAR_TARGET} (default
   * {@code 127.0.0.1:50061}) and registers the dataflow {@code job} on it. Close the returned
   * worker to stop.
   *
   * @throws ShardcarException when the configuration is invalid or the sidecar cannot be reached
   */
  public static ShardcarWorker run(DataflowJob<?> job, JobConfiguration config) {
    return run(ShardcarWorker.builder().build(), job, config);
  }

  /**
   * Registers the dataflow {@code job} on {@code worker} and returns the worker; on failure the
   * worker is closed.
   *
   * @throws ShardcarException when the configuration is invalid or the sidecar cannot be reached
   */
  public static ShardcarWorker run(ShardcarWorker worker, DataflowJob<?> job, JobConfiguration config) {
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

  /**
   * Registers the dataflow {@code job} with its ElasticJob configuration on an existing worker.
   * Its {@code streaming.process} property (ElasticJob's
   * {@code DataflowJobProperties.STREAM_PROCESS_KEY}) chooses one-off or streaming, as read from the
   * job's effective configuration.
   */
  public static JobRegistration register(ShardcarWorker worker, DataflowJob<?> job, JobConfiguration config) {
    return worker.register(toJobConfig(config), dataflowHandler(job));
  }

  /**
   * Registers a {@link SimpleJob} or a {@link DataflowJob} (the job types of ElasticJob-Lite's
   * class-based executors that shardcar runs).
   *
   * @throws IllegalArgumentException for any other kind of job
   */
  public static JobRegistration register(ShardcarWorker worker, ElasticJob job, JobConfiguration config) {
    Objects.requireNonNull(job, "job");
    if (job instanceof SimpleJob simple) {
      return register(worker, simple, config);
    }
    if (job instanceof DataflowJob<?> dataflow) {
      return register(worker, dataflow, config);
    }
    throw new IllegalArgumentException("job " + config.getJobName() + ": " + job.getClass().getName()
        + " is neither a SimpleJob nor a DataflowJob; shardcar runs only those");
  }

  /**
   * Registers a {@link SimpleJob} or a {@link DataflowJob} with a shardcar configuration (for
   * example {@link #toJobConfig(JobConfiguration)}'s, with shardcar-only settings added such as
   * {@code executionTimeoutSeconds}).
   *
   * @throws IllegalArgumentException for any other kind of job
   */
  public static JobRegistration register(ShardcarWorker worker, ElasticJob job, JobConfig config) {
    Objects.requireNonNull(job, "job");
    if (job instanceof SimpleJob simple) {
      return worker.register(config, handler(simple));
    }
    if (job instanceof DataflowJob<?> dataflow) {
      return worker.register(config, dataflowHandler(dataflow));
    }
    throw new IllegalArgumentException("job " + config.getJobName() + ": " + job.getClass().getName()
        + " is neither a SimpleJob nor a DataflowJob; shardcar runs only those");
  }

  /** Whether {@code job} is of a kind the bridge runs: a {@link SimpleJob} or a {@link DataflowJob}. */
  public static boolean isSupported(ElasticJob job) {
    return job instanceof SimpleJob || job instanceof DataflowJob;
  }

  /** Calls {@code job.execute} with ElasticJob's {@link ShardingContext} for each item. */
  public static JobHandler handler(SimpleJob job) {
    Objects.requireNonNull(job, "job");
    return ctx -> job.execute(toShardingContext(ctx));
  }

  /**
   * Calls {@code job.fetchData} and {@code job.processData} with ElasticJob's
   * {@link ShardingContext}; register the result with
   * {@link ShardcarWorker#register(JobConfig, DataflowHandler)} for ElasticJob's
   * {@code DataflowJobExecutor} loop.
   */
  public static <T> DataflowHandler<T> dataflowHandler(DataflowJob<T> job) {
    Objects.requireNonNull(job, "job");
    return new DataflowHandler<T>() {
      @Override
      public List<T> fetch(io.shardcar.client.ShardingContext ctx) {
        return job.fetchData(toShardingContext(ctx));
      }

      @Override
      public void process(io.shardcar.client.ShardingContext ctx, List<T> data) {
        job.processData(toShardingContext(ctx), data);
      }

      @Override
      public String toString() {
        return "DataflowHandler(" + job.getClass().getName() + ")";
      }
    };
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
   * Maps every {@link JobConfiguration} setting shardcar shares with ElasticJob, the error handler
   * ({@code jobErrorHandlerType}, which the sidecar runs, with its props) among them. Settings that
   * belong to ElasticJob's in-process executor (executor service handler, listeners, extra
   * configurations, label, static sharding) have no meaning here and are ignored with a warning
   * when set, as is an error handler type the sidecar does not have (an SPI handler of the
   * application's own).
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
    String errorHandler = c.getJobErrorHandlerType();
    boolean knownErrorHandler = notBlank(errorHandler)
        && JobConfig.ERROR_HANDLER_TYPES.contains(errorHandler.strip().toUpperCase(java.util.Locale.ROOT));
    if (notBlank(errorHandler) && !knownErrorHandler) {
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
    if (knownErrorHandler) {
      b.jobErrorHandlerType(errorHandler);
    }
    return b.build();
  }

  private static boolean notBlank(String s) {
    return s != null && !s.isBlank();
  }
}
