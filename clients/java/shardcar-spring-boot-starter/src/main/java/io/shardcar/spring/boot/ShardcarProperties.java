package io.shardcar.spring.boot;

import java.time.Duration;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.LinkedList;
import java.util.Map;
import java.util.Properties;
import org.apache.shardingsphere.elasticjob.api.ElasticJob;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.boot.context.properties.DeprecatedConfigurationProperty;

/**
 * {@code shardcar.*}: the sidecar to use and the jobs to run. A job's settings have the names of
 * ElasticJob-Lite's Spring Boot starter ({@code elasticjob.jobs.<name>.*}) and its defaults, so
 * that an {@code application.yml} moves over by renaming the prefix.
 */
@ConfigurationProperties(prefix = "shardcar")
public class ShardcarProperties {
  /** Whether the starter runs the jobs at all. */
  private boolean enabled = true;

  /**
   * The sidecar's gRPC target: {@code host:port} or {@code unix:///path}. Unset: the
   * {@code SHARDCAR_TARGET} environment variable, else {@code 127.0.0.1:50061}.
   */
  private String target;

  /** How long each job's registration keeps trying to reach the sidecar at startup. */
  private Duration connectTimeout = Duration.ofSeconds(30);

  /**
   * How long running items may finish and answer when the application stops, before they are
   * interrupted ({@code ShardcarWorker.Builder#drainTimeout}).
   */
  private Duration drainTimeout = Duration.ofSeconds(30);

  /**
   * Whether a drain of the sidecar (a restart) stops the jobs, as a remote shutdown does; by
   * default they subscribe again once it is back ({@code ShardcarWorker.Builder#stopOnDrain}).
   */
  private boolean stopOnDrain;

  /**
   * The executor size: items of one job run at once on this worker, whichever execution they
   * belong to; unset: 8.
   */
  private Integer itemConcurrency;

  /**
   * Executions of one job run at once on this worker ({@code max_concurrent_executions}, sent to
   * the sidecar): while it runs fewer, the sidecar also gives it FAILOVER runs (a crashed peer's
   * items) and MISFIRE catch-ups beside what runs. Unset: the executor size
   * ({@code item-concurrency}, at most 1024); 1 is ElasticJob's one execution at a time. 1 to 1024
   * and at most the executor size.
   */
  private Integer maxConcurrentExecutions;

  /**
   * The instance id to register as, instead of the sidecar's {@code {ip}@-@{pid}} (or
   * {@code {ip}@-@{pid}-{random}} in a container).
   */
  private String instanceId;

  /**
   * Whether a job that cannot be registered at startup (sidecar unreachable within the connect
   * timeout, configuration refused) fails the application's startup. When false, the failure is
   * logged and the health indicator reports the job DOWN with the error.
   */
  private boolean failFast = true;

  /** The jobs, by job name. */
  private Map<String, Job> jobs = new LinkedHashMap<>();

  public boolean isEnabled() {
    return enabled;
  }

  public void setEnabled(boolean enabled) {
    this.enabled = enabled;
  }

  public String getTarget() {
    return target;
  }

  public void setTarget(String target) {
    this.target = target;
  }

  public Duration getConnectTimeout() {
    return connectTimeout;
  }

  public void setConnectTimeout(Duration connectTimeout) {
    this.connectTimeout = connectTimeout;
  }

  public Duration getDrainTimeout() {
    return drainTimeout;
  }

  public void setDrainTimeout(Duration drainTimeout) {
    this.drainTimeout = drainTimeout;
  }

  public boolean isStopOnDrain() {
    return stopOnDrain;
  }

  public void setStopOnDrain(boolean stopOnDrain) {
    this.stopOnDrain = stopOnDrain;
  }

  /**
   * {@code shardcar.shutdown-grace-period}, the former name of {@code shardcar.drain-timeout}.
   *
   * @return the drain timeout
   * @deprecated since 0.1.0, for removal: use {@code shardcar.drain-timeout}
   */
  @Deprecated(since = "0.1.0", forRemoval = true)
  @DeprecatedConfigurationProperty(replacement = "shardcar.drain-timeout")
  public Duration getShutdownGracePeriod() {
    return drainTimeout;
  }

  /**
   * Sets {@code shardcar.drain-timeout} under its former name.
   *
   * @param shutdownGracePeriod the drain timeout
   * @deprecated since 0.1.0, for removal: use {@code shardcar.drain-timeout}
   */
  @Deprecated(since = "0.1.0", forRemoval = true)
  public void setShutdownGracePeriod(Duration shutdownGracePeriod) {
    if (DEPRECATED_WARNED.compareAndSet(false, true)) {
      // Spring's metadata marks it deprecated for IDEs; this tells the running application.
      System.getLogger(ShardcarProperties.class.getName()).log(System.Logger.Level.WARNING,
          "shardcar: the property shardcar.shutdown-grace-period is deprecated and will be removed: "
              + "use shardcar.drain-timeout, the same setting");
    }
    this.drainTimeout = shutdownGracePeriod;
  }

  /** Whether the deprecated property's warning was logged (once per JVM). */
  private static final java.util.concurrent.atomic.AtomicBoolean DEPRECATED_WARNED =
      new java.util.concurrent.atomic.AtomicBoolean();

  public Integer getItemConcurrency() {
    return itemConcurrency;
  }

  public void setItemConcurrency(Integer itemConcurrency) {
    this.itemConcurrency = itemConcurrency;
  }

  public Integer getMaxConcurrentExecutions() {
    return maxConcurrentExecutions;
  }

  public void setMaxConcurrentExecutions(Integer maxConcurrentExecutions) {
    this.maxConcurrentExecutions = maxConcurrentExecutions;
  }

  public String getInstanceId() {
    return instanceId;
  }

  public void setInstanceId(String instanceId) {
    this.instanceId = instanceId;
  }

  public boolean isFailFast() {
    return failFast;
  }

  public void setFailFast(boolean failFast) {
    this.failFast = failFast;
  }

  public Map<String, Job> getJobs() {
    return jobs;
  }

  public void setJobs(Map<String, Job> jobs) {
    this.jobs = jobs;
  }

  /**
   * One job, {@code shardcar.jobs.<name>.*}: ElasticJob-Lite's starter properties (same names, same
   * defaults: unset booleans are false, {@code maxTimeDiffSeconds} -1,
   * {@code reconcileIntervalMinutes} 0), plus {@code elasticJobBean} and
   * {@code executionTimeoutSeconds}.
   */
  public static class Job {
    /**
     * The job's class, a {@code SimpleJob} or a {@code DataflowJob}: the application's bean of
     * that class (as in ElasticJob's starter), else a new instance created with autowiring.
     */
    private Class<? extends ElasticJob> elasticJobClass;

    /** The name of the job's bean, instead of {@code elasticJobClass}. */
    private String elasticJobBean;

    /** ElasticJob's typed jobs ({@code SCRIPT}, {@code HTTP}): not supported by shardcar, refused. */
    private String elasticJobType;

    /** Quartz cron with seconds; empty for a job that runs only when triggered (admin API, console). */
    private String cron;

    /** {@code GMT+08:00} style or an IANA name; empty: the sidecar's time zone. */
    private String timeZone;

    /**
     * ElasticJob's one-off bootstrap bean: does not apply (trigger a job without cron with
     * {@code shardcar ctl trigger} or the admin API).
     */
    private String jobBootstrapBeanName;

    /** How many sharding items the job has. */
    private int shardingTotalCount;

    /** {@code 0=a,1=b}: each item's parameter. */
    private String shardingItemParameters;

    /** The parameter every item gets. */
    private String jobParameter;

    /** Whether an item is never started while it still runs elsewhere. */
    private boolean monitorExecution;

    /** Whether the items of an instance that went away are run by others at once. */
    private boolean failover;

    /** Whether fires missed while the items ran are made up afterwards. */
    private boolean misfire;

    /** Largest tolerated clock difference between instances, -1 to not check. */
    private int maxTimeDiffSeconds = -1;

    /** Minutes between the leader's consistency checks, 0 for none. */
    private int reconcileIntervalMinutes;

    /** {@code AVG_ALLOCATION} (default), {@code ODEVITY} or {@code ROUND_ROBIN}. */
    private String jobShardingStrategyType;

    /** ElasticJob executor setting: does not apply under shardcar (ignored with a warning). */
    private String jobExecutorServiceHandlerType;

    /**
     * How a failure that stands is reported, ElasticJob's types ({@code LOG}, {@code EMAIL},
     * {@code DINGTALK}, ...) or shardcar's {@code WEBHOOK}, set up by {@code props}; run by the
     * sidecar. Another type (an SPI handler of the application's own) is ignored with a warning.
     */
    private String jobErrorHandlerType;

    /** ElasticJob executor setting: does not apply under shardcar (ignored with a warning). */
    private Collection<String> jobListenerTypes = new LinkedList<>();

    /** Free text. */
    private String description;

    /** Job properties, e.g. {@code streaming.process: true} for a streaming DataflowJob. */
    private Properties props = new Properties();

    /** Whether the job is stored disabled (it does not run until enabled). */
    private boolean disabled;

    /** Whether this configuration replaces the one already stored for the job. */
    private boolean overwrite;

    /** shardcar: seconds after which a running item is taken back and reported failed; 0 for never. */
    private int executionTimeoutSeconds;

    /**
     * ElasticJob's {@link JobConfiguration} of these settings, built as ElasticJob's starter
     * builds it.
     *
     * @param jobName the job's name (its key under {@code shardcar.jobs})
     * @return the configuration
     */
    public JobConfiguration toJobConfiguration(String jobName) {
      JobConfiguration.Builder b = JobConfiguration.newBuilder(jobName, shardingTotalCount)
          .cron(cron)
          .timeZone(timeZone)
          .shardingItemParameters(shardingItemParameters)
          .jobParameter(jobParameter)
          .monitorExecution(monitorExecution)
          .failover(failover)
          .misfire(misfire)
          .maxTimeDiffSeconds(maxTimeDiffSeconds)
          .reconcileIntervalMinutes(reconcileIntervalMinutes)
          .jobShardingStrategyType(jobShardingStrategyType)
          .jobExecutorServiceHandlerType(jobExecutorServiceHandlerType)
          .jobErrorHandlerType(jobErrorHandlerType)
          .jobListenerTypes(jobListenerTypes.toArray(new String[0]))
          .description(description)
          .disabled(disabled)
          .overwrite(overwrite);
      for (String key : props.stringPropertyNames()) {
        b.setProperty(key, props.getProperty(key));
      }
      return b.build();
    }

    public Class<? extends ElasticJob> getElasticJobClass() {
      return elasticJobClass;
    }

    public void setElasticJobClass(Class<? extends ElasticJob> elasticJobClass) {
      this.elasticJobClass = elasticJobClass;
    }

    public String getElasticJobBean() {
      return elasticJobBean;
    }

    public void setElasticJobBean(String elasticJobBean) {
      this.elasticJobBean = elasticJobBean;
    }

    public String getElasticJobType() {
      return elasticJobType;
    }

    public void setElasticJobType(String elasticJobType) {
      this.elasticJobType = elasticJobType;
    }

    public String getCron() {
      return cron;
    }

    public void setCron(String cron) {
      this.cron = cron;
    }

    public String getTimeZone() {
      return timeZone;
    }

    public void setTimeZone(String timeZone) {
      this.timeZone = timeZone;
    }

    public String getJobBootstrapBeanName() {
      return jobBootstrapBeanName;
    }

    public void setJobBootstrapBeanName(String jobBootstrapBeanName) {
      this.jobBootstrapBeanName = jobBootstrapBeanName;
    }

    public int getShardingTotalCount() {
      return shardingTotalCount;
    }

    public void setShardingTotalCount(int shardingTotalCount) {
      this.shardingTotalCount = shardingTotalCount;
    }

    public String getShardingItemParameters() {
      return shardingItemParameters;
    }

    public void setShardingItemParameters(String shardingItemParameters) {
      this.shardingItemParameters = shardingItemParameters;
    }

    public String getJobParameter() {
      return jobParameter;
    }

    public void setJobParameter(String jobParameter) {
      this.jobParameter = jobParameter;
    }

    public boolean isMonitorExecution() {
      return monitorExecution;
    }

    public void setMonitorExecution(boolean monitorExecution) {
      this.monitorExecution = monitorExecution;
    }

    public boolean isFailover() {
      return failover;
    }

    public void setFailover(boolean failover) {
      this.failover = failover;
    }

    public boolean isMisfire() {
      return misfire;
    }

    public void setMisfire(boolean misfire) {
      this.misfire = misfire;
    }

    public int getMaxTimeDiffSeconds() {
      return maxTimeDiffSeconds;
    }

    public void setMaxTimeDiffSeconds(int maxTimeDiffSeconds) {
      this.maxTimeDiffSeconds = maxTimeDiffSeconds;
    }

    public int getReconcileIntervalMinutes() {
      return reconcileIntervalMinutes;
    }

    public void setReconcileIntervalMinutes(int reconcileIntervalMinutes) {
      this.reconcileIntervalMinutes = reconcileIntervalMinutes;
    }

    public String getJobShardingStrategyType() {
      return jobShardingStrategyType;
    }

    public void setJobShardingStrategyType(String jobShardingStrategyType) {
      this.jobShardingStrategyType = jobShardingStrategyType;
    }

    public String getJobExecutorServiceHandlerType() {
      return jobExecutorServiceHandlerType;
    }

    public void setJobExecutorServiceHandlerType(String jobExecutorServiceHandlerType) {
      this.jobExecutorServiceHandlerType = jobExecutorServiceHandlerType;
    }

    public String getJobErrorHandlerType() {
      return jobErrorHandlerType;
    }

    public void setJobErrorHandlerType(String jobErrorHandlerType) {
      this.jobErrorHandlerType = jobErrorHandlerType;
    }

    public Collection<String> getJobListenerTypes() {
      return jobListenerTypes;
    }

    public void setJobListenerTypes(Collection<String> jobListenerTypes) {
      this.jobListenerTypes = jobListenerTypes;
    }

    public String getDescription() {
      return description;
    }

    public void setDescription(String description) {
      this.description = description;
    }

    public Properties getProps() {
      return props;
    }

    public void setProps(Properties props) {
      this.props = props;
    }

    public boolean isDisabled() {
      return disabled;
    }

    public void setDisabled(boolean disabled) {
      this.disabled = disabled;
    }

    public boolean isOverwrite() {
      return overwrite;
    }

    public void setOverwrite(boolean overwrite) {
      this.overwrite = overwrite;
    }

    public int getExecutionTimeoutSeconds() {
      return executionTimeoutSeconds;
    }

    public void setExecutionTimeoutSeconds(int executionTimeoutSeconds) {
      this.executionTimeoutSeconds = executionTimeoutSeconds;
    }
  }
}
