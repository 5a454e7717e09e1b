package io.shardcar.spring.boot;

import io.shardcar.client.JobConfig;
import io.shardcar.client.JobRegistration;
import io.shardcar.client.ShardcarWorker;
import io.shardcar.elasticjob.ElasticJobBridge;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.shardingsphere.elasticjob.api.ElasticJob;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.springframework.beans.factory.ListableBeanFactory;
import org.springframework.beans.factory.config.AutowireCapableBeanFactory;
import org.springframework.context.SmartLifecycle;

/**
 * The jobs of {@code shardcar.jobs}: registers each on the {@link ShardcarWorker} when the
 * application context starts (after every other bean is ready, as ElasticJob's starter schedules
 * its jobs once the application has started) and closes the registrations when it stops (running
 * items get the worker's drain timeout to finish and answer).
 */
public class ShardcarJobs implements SmartLifecycle {
  private static final System.Logger LOG = System.getLogger(ShardcarJobs.class.getName());

  /** Where one configured job is: its registration once registered, or the error that stopped it. */
  public record JobStatus(String jobName, JobRegistration registration, Exception startupFailure) {
    /** Registered on a live stream ({@link JobRegistration.State#ACTIVE}). */
    public boolean isRegistered() {
      return registration != null && registration.getState() == JobRegistration.State.ACTIVE;
    }

    /** What stopped it: the startup failure, or the error its registration closed with. */
    public Optional<Exception> failure() {
      if (startupFailure != null) {
        return Optional.of(startupFailure);
      }
      return registration == null ? Optional.empty() : registration.getFailure().map(e -> (Exception) e);
    }
  }

  private final ShardcarWorker worker;
  private final ShardcarProperties properties;
  private final ListableBeanFactory beans;
  private final Map<String, JobStatus> statuses = new LinkedHashMap<>();
  private volatile boolean running;

  public ShardcarJobs(ShardcarWorker worker, ShardcarProperties properties, ListableBeanFactory beans) {
    this.worker = worker;
    this.properties = properties;
    this.beans = beans;
    properties.getJobs().keySet().forEach(name -> statuses.put(name, new JobStatus(name, null, null)));
  }

  /**
   * Registers every job. With {@code shardcar.fail-fast} (the default) the first failure closes
   * what was registered and fails the startup; otherwise it is recorded for the health indicator.
   */
  @Override
  public void start() {
    running = true;
    for (Map.Entry<String, ShardcarProperties.Job> entry : properties.getJobs().entrySet()) {
      String name = entry.getKey();
      try {
        ShardcarProperties.Job settings = entry.getValue();
        ElasticJob job = resolveJob(name, settings);
        JobConfig config = toJobConfig(name, settings);
        JobRegistration registration = ElasticJobBridge.register(worker, job, config);
        record(new JobStatus(name, registration, null));
        LOG.log(System.Logger.Level.INFO, "shardcar job {0} ({1}) registered as {2}",
            name, job.getClass().getName(), registration.getInstanceId());
      } catch (RuntimeException e) {
        record(new JobStatus(name, null, e));
        if (properties.isFailFast()) {
          stop();
          throw new IllegalStateException("shardcar job " + name + " could not be registered: " + e.getMessage()
              + " (set shardcar.fail-fast=false to start without it)", e);
        }
        LOG.log(System.Logger.Level.ERROR, "shardcar job " + name + " could not be registered", e);
      }
    }
  }

  /** The shardcar configuration of {@code shardcar.jobs.<name>}: ElasticJob's, plus shardcar-only settings. */
  static JobConfig toJobConfig(String name, ShardcarProperties.Job settings) {
    if (settings.getJobBootstrapBeanName() != null && !settings.getJobBootstrapBeanName().isBlank()) {
      LOG.log(System.Logger.Level.WARNING, "shardcar job {0}: jobBootstrapBeanName does not apply (no "
          + "OneOffJobBootstrap bean is made); trigger the job with `shardcar ctl trigger` or the admin API", name);
    }
    JobConfiguration elasticJob = settings.toJobConfiguration(name);
    JobConfig config = ElasticJobBridge.toJobConfig(elasticJob);
    if (settings.getExecutionTimeoutSeconds() != 0) {
      config = config.toBuilder().executionTimeoutSeconds(settings.getExecutionTimeoutSeconds()).build();
    }
    return config;
  }

  /** The job bean: {@code elasticJobBean} by name, else the bean of {@code elasticJobClass} (created if there is none). */
  private ElasticJob resolveJob(String name, ShardcarProperties.Job settings) {
    if (settings.getElasticJobType() != null && !settings.getElasticJobType().isBlank()) {
      throw new IllegalArgumentException("shardcar job " + name + ": elasticJobType " + settings.getElasticJobType()
          + " (ElasticJob's typed jobs such as SCRIPT or HTTP) is not supported; use a SimpleJob or DataflowJob "
          + "bean (elasticJobClass or elasticJobBean)");
    }
    String beanName = settings.getElasticJobBean();
    Class<? extends ElasticJob> type = settings.getElasticJobClass();
    if (beanName != null && !beanName.isBlank() && type != null) {
      throw new IllegalArgumentException("shardcar job " + name + ": elasticJobClass and elasticJobBean are "
          + "mutually exclusive");
    }
    if (beanName != null && !beanName.isBlank()) {
      return beans.getBean(beanName, ElasticJob.class);
    }
    if (type == null) {
      throw new IllegalArgumentException("shardcar job " + name + ": set elasticJobClass or elasticJobBean");
    }
    return beanOf(type);
  }

  private <T extends ElasticJob> T beanOf(Class<T> type) {
    return beans.getBeanProvider(type).getIfAvailable(() -> {
      if (beans instanceof AutowireCapableBeanFactory factory) {
        return factory.createBean(type);
      }
      throw new IllegalArgumentException("no bean of " + type.getName());
    });
  }

  private synchronized void record(JobStatus status) {
    statuses.put(status.jobName(), status);
  }

  /**
   * Every configured job's status, in configuration order.
   *
   * @return a snapshot
   */
  public synchronized List<JobStatus> getStatuses() {
    return Collections.unmodifiableList(new ArrayList<>(statuses.values()));
  }

  /**
   * The registration of job {@code jobName}, once registered.
   *
   * @param jobName a job of {@code shardcar.jobs}
   * @return its registration, if it has one
   */
  public synchronized Optional<JobRegistration> getRegistration(String jobName) {
    JobStatus status = statuses.get(jobName);
    return status == null ? Optional.empty() : Optional.ofNullable(status.registration());
  }

  /** Closes every registration: no new work, running items may finish and answer for the grace period. */
  @Override
  public void stop() {
    running = false;
    List<JobRegistration> open = new ArrayList<>();
    synchronized (this) {
      statuses.values().forEach(s -> {
        if (s.registration() != null) {
          open.add(s.registration());
        }
      });
    }
    open.parallelStream().forEach(JobRegistration::close);
  }

  @Override
  public boolean isRunning() {
    return running;
  }
}
