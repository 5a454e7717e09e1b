package io.shardcar.client;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.TreeMap;

/**
 * A job's configuration, with ElasticJob-Lite's field names. Optional settings that are not set
 * are left unset on the wire, and the sidecar applies ElasticJob's defaults ({@code misfire} and
 * {@code monitorExecution} true, {@code maxTimeDiffSeconds} -1, {@code reconcileIntervalMinutes}
 * 10). Validation (cron syntax, count range, ...) is the sidecar's: an invalid config fails
 * {@link ShardcarWorker#register} with an {@link InvalidJobConfigException} naming the field. The
 * builder checks some fields itself, with the same exception: the {@link RetryPolicy} and the
 * error handler type among them, so that a value the sidecar would refuse fails where it is set.
 *
 * <p>A {@linkplain Builder#resident(boolean) resident} job (register its handler with
 * {@link ShardcarWorker#registerResident(JobConfig, ResidentHandler)}, which sets it) has no cron, no
 * failover and no execution timeout, and keeps {@code monitorExecution} on: {@code build()} refuses
 * those with an {@link InvalidJobConfigException} naming the field, as the sidecar would.
 */
public final class JobConfig {
  /**
   * The property that turns a dataflow job's streaming mode on, ElasticJob's
   * {@code DataflowJobProperties.STREAM_PROCESS_KEY}: {@code true} (any case) streams, anything else
   * or absent is one-off. See {@link DataflowHandler}.
   */
  public static final String STREAMING_PROCESS = "streaming.process";

  /**
   * The values of {@link #getJobErrorHandlerType()}: ElasticJob's {@code jobErrorHandlerType}
   * names, plus shardcar's own {@code WEBHOOK}.
   */
  public static final List<String> ERROR_HANDLER_TYPES =
      List.of("LOG", "IGNORE", "THROW", "EMAIL", "WECHAT", "DINGTALK", "WEBHOOK");

  private final String jobName;
  private final String cron;
  private final String timeZone;
  private final int shardingTotalCount;
  private final Map<Integer, String> shardingItemParameters;
  private final String jobParameter;
  private final boolean failover;
  private final Boolean misfire;
  private final Boolean monitorExecution;
  private final ShardingStrategy shardingStrategy;
  private final Integer maxTimeDiffSeconds;
  private final Integer reconcileIntervalMinutes;
  private final String description;
  private final boolean disabled;
  private final Map<String, String> props;
  private final int executionTimeoutSeconds;
  private final RetryPolicy retry;
  private final String jobErrorHandlerType;
  private final boolean resident;
  private final boolean overwrite;

  private JobConfig(Builder b) {
    this.jobName = b.jobName;
    this.cron = b.cron;
    this.timeZone = b.timeZone;
    this.shardingTotalCount = b.shardingTotalCount;
    this.shardingItemParameters = Collections.unmodifiableMap(new TreeMap<>(b.shardingItemParameters));
    this.jobParameter = b.jobParameter;
    this.failover = b.failover;
    this.misfire = b.misfire;
    this.monitorExecution = b.monitorExecution;
    this.shardingStrategy = b.shardingStrategy;
    this.maxTimeDiffSeconds = b.maxTimeDiffSeconds;
    this.reconcileIntervalMinutes = b.reconcileIntervalMinutes;
    this.description = b.description;
    this.disabled = b.disabled;
    this.props = Collections.unmodifiableMap(new LinkedHashMap<>(b.props));
    this.executionTimeoutSeconds = b.executionTimeoutSeconds;
    this.retry = b.retry;
    this.jobErrorHandlerType = b.jobErrorHandlerType;
    this.resident = b.resident;
    this.overwrite = b.overwrite;
  }

  /** An empty builder; {@code jobName} and {@code shardingTotalCount} must be set before {@code build()}. */
  public static Builder builder() {
    return new Builder();
  }

  /** ElasticJob's entry point: {@code JobConfiguration.newBuilder(jobName, shardingTotalCount)}. */
  public static Builder newBuilder(String jobName, int shardingTotalCount) {
    return new Builder().jobName(jobName).shardingTotalCount(shardingTotalCount);
  }

  /** A builder holding this configuration's values. */
  public Builder toBuilder() {
    Builder b = new Builder()
        .jobName(jobName)
        .cron(cron)
        .timeZone(timeZone)
        .shardingTotalCount(shardingTotalCount)
        .shardingItemParameters(shardingItemParameters)
        .jobParameter(jobParameter)
        .failover(failover)
        .shardingStrategy(shardingStrategy)
        .description(description)
        .disabled(disabled)
        .props(props)
        .executionTimeoutSeconds(executionTimeoutSeconds)
        .retry(retry)
        .overwrite(overwrite);
    b.jobErrorHandlerType = jobErrorHandlerType;
    b.resident = resident;
    b.misfire = misfire;
    b.monitorExecution = monitorExecution;
    b.maxTimeDiffSeconds = maxTimeDiffSeconds;
    b.reconcileIntervalMinutes = reconcileIntervalMinutes;
    return b;
  }

  public String getJobName() {
    return jobName;
  }

  /** Quartz cron with a seconds field; empty for a one-off job. */
  public String getCron() {
    return cron;
  }

  /** {@code GMT+08:00} style or an IANA name; empty means the sidecar's local time zone. */
  public String getTimeZone() {
    return timeZone;
  }

  public int getShardingTotalCount() {
    return shardingTotalCount;
  }

  /** Item number to parameter, sorted by item. */
  public Map<Integer, String> getShardingItemParameters() {
    return shardingItemParameters;
  }

  public String getJobParameter() {
    return jobParameter;
  }

  public boolean isFailover() {
    return failover;
  }

  /** {@code null} when unset (the sidecar then uses true). */
  public Boolean getMisfire() {
    return misfire;
  }

  /** {@code null} when unset (the sidecar then uses true). */
  public Boolean getMonitorExecution() {
    return monitorExecution;
  }

  public ShardingStrategy getShardingStrategy() {
    return shardingStrategy;
  }

  /** {@code null} when unset (the sidecar then uses -1, off). */
  public Integer getMaxTimeDiffSeconds() {
    return maxTimeDiffSeconds;
  }

  /** {@code null} when unset (the sidecar then uses 10). */
  public Integer getReconcileIntervalMinutes() {
    return reconcileIntervalMinutes;
  }

  public String getDescription() {
    return description;
  }

  public boolean isDisabled() {
    return disabled;
  }

  public Map<String, String> getProps() {
    return props;
  }

  /**
   * Whether a dataflow job streams: its {@link #STREAMING_PROCESS} property is {@code true}
   * (ElasticJob's reading, {@code Boolean.parseBoolean}).
   */
  public boolean isStreamingProcess() {
    return Boolean.parseBoolean(props.get(STREAMING_PROCESS));
  }

  /** 0 means no timeout. */
  public int getExecutionTimeoutSeconds() {
    return executionTimeoutSeconds;
  }

  /**
   * How a failed item runs again; {@code null} when unset: it does not, it waits for the next fire,
   * as in ElasticJob.
   */
  public RetryPolicy getRetry() {
    return retry;
  }

  /**
   * ElasticJob's {@code jobErrorHandlerType}: how the sidecar reports a failure that stands (at once,
   * or once its retries ran out), one of {@link #ERROR_HANDLER_TYPES}, set up by {@link #getProps()};
   * empty when unset (ElasticJob's default, {@code LOG}).
   */
  public String getJobErrorHandlerType() {
    return jobErrorHandlerType;
  }

  /**
   * Whether the job is resident: each item is held by one worker, its owner's, from a
   * {@link TriggerSource#RESIDENT} trigger until it is revoked, instead of run at fire instants
   * (see {@link ResidentHandler}).
   */
  public boolean isResident() {
    return resident;
  }

  /** Replace the job's stored configuration with this one when subscribing. */
  public boolean isOverwrite() {
    return overwrite;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof JobConfig)) {
      return false;
    }
    JobConfig c = (JobConfig) o;
    return shardingTotalCount == c.shardingTotalCount
        && failover == c.failover
        && disabled == c.disabled
        && executionTimeoutSeconds == c.executionTimeoutSeconds
        && Objects.equals(retry, c.retry)
        && jobErrorHandlerType.equals(c.jobErrorHandlerType)
        && resident == c.resident
        && overwrite == c.overwrite
        && jobName.equals(c.jobName)
        && cron.equals(c.cron)
        && timeZone.equals(c.timeZone)
        && shardingItemParameters.equals(c.shardingItemParameters)
        && jobParameter.equals(c.jobParameter)
        && Objects.equals(misfire, c.misfire)
        && Objects.equals(monitorExecution, c.monitorExecution)
        && shardingStrategy == c.shardingStrategy
        && Objects.equals(maxTimeDiffSeconds, c.maxTimeDiffSeconds)
        && Objects.equals(reconcileIntervalMinutes, c.reconcileIntervalMinutes)
        && description.equals(c.description)
        && props.equals(c.props);
  }

  @Override
  public int hashCode() {
    return Objects.hash(jobName, cron, shardingTotalCount, shardingItemParameters, jobParameter);
  }

  @Override
  public String toString() {
    return "JobConfig{jobName=" + jobName + ", cron=" + cron + ", timeZone=" + timeZone
        + ", shardingTotalCount=" + shardingTotalCount
        + ", shardingItemParameters=" + shardingItemParameters
        + ", jobParameter=" + jobParameter + ", failover=" + failover + ", misfire=" + misfire
        + ", monitorExecution=" + monitorExecution + ", shardingStrategy=" + shardingStrategy
        + ", maxTimeDiffSeconds=" + maxTimeDiffSeconds
        + ", reconcileIntervalMinutes=" + reconcileIntervalMinutes
        + ", description=" + description + ", disabled=" + disabled + ", props=" + props
        + ", executionTimeoutSeconds=" + executionTimeoutSeconds + ", retry=" + retry
        + ", jobErrorHandlerType=" + jobErrorHandlerType + ", resident=" + resident
        + ", overwrite=" + overwrite + "}";
  }

  /** Builds a {@link JobConfig}; every setter returns the builder. */
  public static final class Builder {
    private String jobName;
    private String cron = "";
    private String timeZone = "";
    private int shardingTotalCount;
    private final Map<Integer, String> shardingItemParameters = new TreeMap<>();
    private String jobParameter = "";
    private boolean failover;
    private Boolean misfire;
    private Boolean monitorExecution;
    private ShardingStrategy shardingStrategy = ShardingStrategy.AVG_ALLOCATION;
    private Integer maxTimeDiffSeconds;
    private Integer reconcileIntervalMinutes;
    private String description = "";
    private boolean disabled;
    private final Map<String, String> props = new LinkedHashMap<>();
    private int executionTimeoutSeconds;
    private RetryPolicy retry;
    private String jobErrorHandlerType = "";
    private boolean resident;
    /** Whether {@link #build()} checks a resident job's fields (not for one the sidecar sent). */
    private boolean residentChecked = true;
    private boolean overwrite;

    private Builder() {}

    public Builder jobName(String jobName) {
      this.jobName = jobName;
      return this;
    }

    /** Quartz cron with seconds, e.g. {@code 0/5 * * * * ?}; null or empty for a one-off job. */
    public Builder cron(String cron) {
      this.cron = orEmpty(cron);
      return this;
    }

    public Builder timeZone(String timeZone) {
      this.timeZone = orEmpty(timeZone);
      return this;
    }

    public Builder shardingTotalCount(int shardingTotalCount) {
      this.shardingTotalCount = shardingTotalCount;
      return this;
    }

    /**
     * ElasticJob's text form, {@code 0=Beijing,1=Shanghai}: comma-separated {@code item=parameter}
     * pairs; replaces any parameters set before. Null or blank clears them.
     *
     * @throws InvalidJobConfigException when a pair has no {@code =} or its item is not a number
     */
    public Builder shardingItemParameters(String text) {
      shardingItemParameters.clear();
      shardingItemParameters.putAll(parseShardingItemParameters(text));
      return this;
    }

    /** Replaces the item parameters with the given map. */
    public Builder shardingItemParameters(Map<Integer, String> parameters) {
      shardingItemParameters.clear();
      parameters.forEach(this::shardingItemParameter);
      return this;
    }

    /** Sets one item's parameter. */
    public Builder shardingItemParameter(int item, String parameter) {
      shardingItemParameters.put(item, orEmpty(parameter));
      return this;
    }

    public Builder jobParameter(String jobParameter) {
      this.jobParameter = orEmpty(jobParameter);
      return this;
    }

    public Builder failover(boolean failover) {
      this.failover = failover;
      return this;
    }

    public Builder misfire(boolean misfire) {
      this.misfire = misfire;
      return this;
    }

    public Builder monitorExecution(boolean monitorExecution) {
      this.monitorExecution = monitorExecution;
      return this;
    }

    public Builder shardingStrategy(ShardingStrategy strategy) {
      this.shardingStrategy = Objects.requireNonNull(strategy, "shardingStrategy");
      return this;
    }

    /** ElasticJob's {@code jobShardingStrategyType} name ({@code AVG_ALLOCATION}, ...). */
    public Builder shardingStrategy(String elasticJobType) {
      this.shardingStrategy = ShardingStrategy.fromElasticJobType(elasticJobType);
      return this;
    }

    public Builder maxTimeDiffSeconds(int maxTimeDiffSeconds) {
      this.maxTimeDiffSeconds = maxTimeDiffSeconds;
      return this;
    }

    public Builder reconcileIntervalMinutes(int reconcileIntervalMinutes) {
      this.reconcileIntervalMinutes = reconcileIntervalMinutes;
      return this;
    }

    public Builder description(String description) {
      this.description = orEmpty(description);
      return this;
    }

    public Builder disabled(boolean disabled) {
      this.disabled = disabled;
      return this;
    }

    /** Sets one property (ElasticJob's {@code setProperty}). */
    public Builder prop(String key, String value) {
      props.put(Objects.requireNonNull(key, "key"), orEmpty(value));
      return this;
    }

    /** Replaces the properties with the given map. */
    public Builder props(Map<String, String> properties) {
      props.clear();
      properties.forEach(this::prop);
      return this;
    }

    /** Replaces the properties with the given {@link Properties}. */
    public Builder props(Properties properties) {
      props.clear();
      for (String key : properties.stringPropertyNames()) {
        prop(key, properties.getProperty(key));
      }
      return this;
    }

    /**
     * Sets the dataflow streaming mode: property {@link JobConfig#STREAMING_PROCESS} to
     * {@code true} or {@code false}.
     */
    public Builder streamingProcess(boolean streaming) {
      return prop(STREAMING_PROCESS, Boolean.toString(streaming));
    }

    /** Seconds after which a running item is reported failed by the sidecar; 0 (default) means never. */
    public Builder executionTimeoutSeconds(int executionTimeoutSeconds) {
      if (executionTimeoutSeconds < 0) {
        throw new InvalidJobConfigException(
            "executionTimeoutSeconds",
            "executionTimeoutSeconds must be 0 (no timeout) or positive, got " + executionTimeoutSeconds,
            null);
      }
      this.executionTimeoutSeconds = executionTimeoutSeconds;
      return this;
    }

    /**
     * How a failed item runs again ({@link RetryPolicy#newBuilder(int)}); null (default): it does
     * not, it waits for the next fire, as in ElasticJob.
     */
    public Builder retry(RetryPolicy retry) {
      this.retry = retry;
      return this;
    }

    /**
     * ElasticJob's {@code jobErrorHandlerType}: one of {@link JobConfig#ERROR_HANDLER_TYPES} (any
     * case, kept in upper case), its settings in the props under ElasticJob's names
     * ({@code dingtalk.webhook}, {@code email.host}, {@code webhook.url}, ...), which the sidecar
     * checks; null or blank: unset ({@code LOG}).
     *
     * @throws InvalidJobConfigException (field {@code jobErrorHandlerType}) for any other name
     */
    public Builder jobErrorHandlerType(String type) {
      String name = type == null ? "" : type.strip().toUpperCase(Locale.ROOT);
      if (!name.isEmpty() && !ERROR_HANDLER_TYPES.contains(name)) {
        throw new InvalidJobConfigException("jobErrorHandlerType", "jobErrorHandlerType must be one of "
            + String.join(", ", ERROR_HANDLER_TYPES) + " (or empty: unset, LOG), got '" + type + "'", null);
      }
      this.jobErrorHandlerType = name;
      return this;
    }

    /**
     * The error handler type the sidecar sent, taken as it is: a job written by an ElasticJob
     * process may name a handler of its own (an SPI type) that this client does not know.
     */
    Builder jobErrorHandlerTypeAsSent(String type) {
      this.jobErrorHandlerType = orEmpty(type);
      return this;
    }

    /**
     * A resident job: each item is held continuously by one worker, its owner's, instead of run at
     * fire instants; the sidecar starts each hold with a {@link TriggerSource#RESIDENT} trigger and
     * revokes it when the item moves. Such a job has no cron, no failover and no execution timeout,
     * and keeps {@code monitorExecution} on ({@link #build()} refuses the others, naming the
     * field); {@link #retry(RetryPolicy)} gives the backoffs before a hold its worker ended is
     * started again (1 s doubling up to 1 min without one). Its handler is a
     * {@link ResidentHandler}: {@link ShardcarWorker#registerResident(JobConfig, ResidentHandler)}
     * sets this itself.
     */
    public Builder resident(boolean resident) {
      this.resident = resident;
      this.residentChecked = true;
      return this;
    }

    /** What the sidecar sent, taken as it is (it checked the job when it was written). */
    Builder residentAsSent(boolean resident) {
      this.resident = resident;
      this.residentChecked = false;
      return this;
    }

    /** Replace the stored configuration of an existing job with this one when subscribing. */
    public Builder overwrite(boolean overwrite) {
      this.overwrite = overwrite;
      return this;
    }

    /**
     * @throws InvalidJobConfigException when {@code jobName} is missing, or a resident job has what
     *     a resident job cannot (the field is named: {@code cron}, {@code failover},
     *     {@code monitorExecution}, {@code executionTimeoutSeconds})
     */
    public JobConfig build() {
      if (jobName == null || jobName.isEmpty()) {
        throw new InvalidJobConfigException("jobName", "jobName must be set and not empty", null);
      }
      if (resident && residentChecked) {
        checkResident();
      }
      return new JobConfig(this);
    }

    /** What the sidecar refuses in a resident job ({@code check_resident}), named as the client names it. */
    private void checkResident() {
      String unless = " (or make the job not resident)";
      if (!cron.isBlank()) {
        throw new InvalidJobConfigException("cron", "cron: a resident job has no cron: its items are held, "
            + "not fired; leave the cron empty, got '" + cron + "'" + unless, null);
      }
      if (failover) {
        throw new InvalidJobConfigException("failover", "failover: a resident job moves its items with the "
            + "sharding, not by failover; turn failover off" + unless, null);
      }
      if (Boolean.FALSE.equals(monitorExecution)) {
        throw new InvalidJobConfigException("monitorExecution", "monitorExecution: a resident job needs "
            + "monitorExecution: each hold is guarded by the item's running node; turn it on or leave it unset"
            + unless, null);
      }
      if (executionTimeoutSeconds != 0) {
        throw new InvalidJobConfigException("executionTimeoutSeconds", "executionTimeoutSeconds: a resident "
            + "job holds its items until they are revoked; leave the execution timeout at 0, got "
            + executionTimeoutSeconds + unless, null);
      }
    }
  }

  /** Parses ElasticJob's {@code 0=a,1=b} form into a sorted map. */
  static Map<Integer, String> parseShardingItemParameters(String text) {
    Map<Integer, String> result = new TreeMap<>();
    if (text == null || text.isBlank()) {
      return result;
    }
    for (String pair : text.split(",")) {
      if (pair.isBlank()) {
        continue;
      }
      int eq = pair.indexOf('=');
      if (eq < 0) {
        throw badItemParameters(text, null);
      }
      String item = pair.substring(0, eq).trim();
      try {
        result.put(Integer.parseInt(item), pair.substring(eq + 1).trim());
      } catch (NumberFormatException e) {
        throw badItemParameters(text, e);
      }
    }
    return result;
  }

  private static InvalidJobConfigException badItemParameters(String text, Throwable cause) {
    return new InvalidJobConfigException(
        "shardingItemParameters",
        "shardingItemParameters '" + text + "' is malformed: expected item=parameter pairs separated by commas, e.g. 0=a,1=b",
        cause);
  }

  private static String orEmpty(String s) {
    return s == null ? "" : s;
  }
}
