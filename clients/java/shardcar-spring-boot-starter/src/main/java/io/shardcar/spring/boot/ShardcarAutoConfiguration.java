package io.shardcar.spring.boot;

import io.shardcar.client.ShardcarWorker;
import io.shardcar.client.WorkerListener;
import org.springframework.beans.factory.ListableBeanFactory;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

/**
 * Runs the ElasticJob {@code SimpleJob}/{@code DataflowJob} beans declared under
 * {@code shardcar.jobs.<name>} through the shardcar sidecar at {@code shardcar.target}: one
 * {@link ShardcarWorker} (replaceable by a bean of your own), the {@link ShardcarJobs} that
 * register the jobs once the context has started, and, with Actuator present, the
 * {@link ShardcarHealthIndicator} ({@code shardcar}). Off with {@code shardcar.enabled=false}.
 */
@AutoConfiguration
@ConditionalOnProperty(prefix = "shardcar", name = "enabled", matchIfMissing = true)
@EnableConfigurationProperties(ShardcarProperties.class)
public class ShardcarAutoConfiguration {
  /**
   * The worker all jobs register on, closed with the context.
   *
   * @param properties {@code shardcar.*}
   * @param listener a {@link WorkerListener} bean, if the application has exactly one
   * @return the worker
   */
  @Bean(destroyMethod = "close")
  @ConditionalOnMissingBean
  public ShardcarWorker shardcarWorker(ShardcarProperties properties, ObjectProvider<WorkerListener> listener) {
    ShardcarWorker.Builder builder = ShardcarWorker.builder()
        .target(properties.getTarget())
        .connectTimeout(properties.getConnectTimeout())
        .drainTimeout(properties.getDrainTimeout())
        .stopOnDrain(properties.isStopOnDrain())
        .instanceId(properties.getInstanceId());
    if (properties.getItemConcurrency() != null) {
      builder.itemConcurrency(properties.getItemConcurrency());
    }
    if (properties.getMaxConcurrentExecutions() != null) {
      builder.maxConcurrentExecutions(properties.getMaxConcurrentExecutions());
    }
    listener.ifUnique(builder::listener);
    return builder.build();
  }

  /**
   * The configured jobs, registered when the context starts.
   *
   * @param worker the worker
   * @param properties {@code shardcar.*}
   * @param beans where the job beans are found
   * @return the jobs
   */
  @Bean
  @ConditionalOnMissingBean
  public ShardcarJobs shardcarJobs(ShardcarWorker worker, ShardcarProperties properties, ListableBeanFactory beans) {
    return new ShardcarJobs(worker, properties, beans);
  }

  /** With Spring Boot Actuator on the classpath: the health of the jobs. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(name = "org.springframework.boot.actuate.health.HealthIndicator")
  static class HealthConfiguration {
    /**
     * Health contributor {@code shardcar}.
     *
     * @param jobs the jobs
     * @param worker the worker (for its target)
     * @return the indicator
     */
    @Bean
    @ConditionalOnMissingBean(name = "shardcarHealthIndicator")
    ShardcarHealthIndicator shardcarHealthIndicator(ShardcarJobs jobs, ShardcarWorker worker) {
      return new ShardcarHealthIndicator(jobs, worker.getTarget());
    }
  }
}
