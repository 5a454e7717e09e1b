package io.shardcar.spring.boot;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.client.JobConfig;
import io.shardcar.client.ShardcarWorker;
import io.shardcar.client.WorkerListener;
import io.shardcar.client.ShardingStrategy;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.support.StaticListableBeanFactory;
import org.springframework.boot.context.properties.bind.Bindable;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.boot.context.properties.source.MapConfigurationPropertySource;

/** {@code shardcar.*} binds ElasticJob's starter property names and defaults; needs no sidecar. */
class ShardcarPropertiesTest {
  private static ShardcarProperties bind(Map<String, String> source) {
    return new Binder(new MapConfigurationPropertySource(source))
        .bind("shardcar", Bindable.of(ShardcarProperties.class))
        .orElseGet(ShardcarProperties::new);
  }

  @Test
  void elasticJobsNamesBindInCamelAndKebabCase() {
    Map<String, String> source = new LinkedHashMap<>();
    source.put("shardcar.target", "unix:///run/shardcar.sock");
    source.put("shardcar.connect-timeout", "5s");
    source.put("shardcar.jobs.orders.elasticJobClass", StarterIntegrationTest.CitiesJob.class.getName());
    source.put("shardcar.jobs.orders.cron", "0/5 * * * * ?");
    source.put("shardcar.jobs.orders.timeZone", "GMT+08:00");
    source.put("shardcar.jobs.orders.shardingTotalCount", "3");
    source.put("shardcar.jobs.orders.sharding-item-parameters", "0=a,1=b,2=c");
    source.put("shardcar.jobs.orders.jobParameter", "p");
    source.put("shardcar.jobs.orders.failover", "true");
    source.put("shardcar.jobs.orders.misfire", "true");
    source.put("shardcar.jobs.orders.monitor-execution", "true");
    source.put("shardcar.jobs.orders.maxTimeDiffSeconds", "30");
    source.put("shardcar.jobs.orders.reconcileIntervalMinutes", "5");
    source.put("shardcar.jobs.orders.jobShardingStrategyType", "ODEVITY");
    source.put("shardcar.jobs.orders.description", "d");
    source.put("shardcar.jobs.orders.disabled", "true");
    source.put("shardcar.jobs.orders.overwrite", "true");
    source.put("shardcar.jobs.orders.props.streaming.process", "true");
    source.put("shardcar.jobs.orders.props.custom", "x");
    source.put("shardcar.jobs.orders.executionTimeoutSeconds", "60");
    ShardcarProperties p = bind(source);
    assertEquals("unix:///run/shardcar.sock", p.getTarget());
    assertEquals(Duration.ofSeconds(5), p.getConnectTimeout());
    ShardcarProperties.Job job = p.getJobs().get("orders");
    assertEquals(StarterIntegrationTest.CitiesJob.class, job.getElasticJobClass());

    JobConfig c = ShardcarJobs.toJobConfig("orders", job);
    assertEquals("orders", c.getJobName());
    assertEquals("0/5 * * * * ?", c.getCron());
    assertEquals("GMT+08:00", c.getTimeZone());
    assertEquals(3, c.getShardingTotalCount());
    assertEquals(Map.of(0, "a", 1, "b", 2, "c"), c.getShardingItemParameters());
    assertEquals("p", c.getJobParameter());
    assertTrue(c.isFailover());
    assertEquals(Boolean.TRUE, c.getMisfire());
    assertEquals(Boolean.TRUE, c.getMonitorExecution());
    assertEquals(30, c.getMaxTimeDiffSeconds());
    assertEquals(5, c.getReconcileIntervalMinutes());
    assertEquals(ShardingStrategy.ODEVITY, c.getShardingStrategy());
    assertEquals("d", c.getDescription());
    assertTrue(c.isDisabled());
    assertTrue(c.isOverwrite());
    assertEquals(Map.of("streaming.process", "true", "custom", "x"), c.getProps());
    assertTrue(c.isStreamingProcess());
    assertEquals(60, c.getExecutionTimeoutSeconds());
  }

  @Test
  void unsetSettingsTakeElasticJobStartersDefaults() {
    ShardcarProperties p = bind(Map.of(
        "shardcar.jobs.j.elasticJobBean", "myJob",
        "shardcar.jobs.j.shardingTotalCount", "1"));
    assertTrue(p.isEnabled());
    assertTrue(p.isFailFast());
    ShardcarProperties.Job job = p.getJobs().get("j");
    assertEquals("myJob", job.getElasticJobBean());
    // ElasticJob's starter leaves its primitives at Java's defaults (and maxTimeDiffSeconds -1).
    JobConfiguration ej = job.toJobConfiguration("j");
    assertFalse(ej.isMonitorExecution());
    assertFalse(ej.isMisfire());
    assertFalse(ej.isFailover());
    assertEquals(-1, ej.getMaxTimeDiffSeconds());
    assertEquals(0, ej.getReconcileIntervalMinutes());
    JobConfig c = ShardcarJobs.toJobConfig("j", job);
    assertEquals(Boolean.FALSE, c.getMonitorExecution());
    assertEquals(Boolean.FALSE, c.getMisfire());
    assertEquals(0, c.getReconcileIntervalMinutes());
    assertEquals("", c.getCron());
    assertEquals(0, c.getExecutionTimeoutSeconds());
    assertFalse(c.isStreamingProcess());
  }

  @Test
  @SuppressWarnings("removal") // the deprecated name is what this tests
  void drainSettingsBindAndTheFormerNameOfTheDrainTimeoutStillWorks() {
    ShardcarProperties unset = bind(Map.of("shardcar.target", "127.0.0.1:1"));
    assertEquals(Duration.ofSeconds(30), unset.getDrainTimeout());
    assertFalse(unset.isStopOnDrain(), "a sidecar restart does not stop the jobs");
    ShardcarProperties set = bind(Map.of("shardcar.drain-timeout", "7s", "shardcar.stop-on-drain", "true"));
    assertEquals(Duration.ofSeconds(7), set.getDrainTimeout());
    assertTrue(set.isStopOnDrain());
    ShardcarProperties old = bind(Map.of("shardcar.shutdown-grace-period", "5s"));
    assertEquals(Duration.ofSeconds(5), old.getDrainTimeout());
    assertEquals(Duration.ofSeconds(5), old.getShutdownGracePeriod());
    workerOf(set).close();
  }

  /** The worker bean the auto-configuration makes from {@code properties} (nothing is dialled). */
  private static ShardcarWorker workerOf(ShardcarProperties properties) {
    return new ShardcarAutoConfiguration().shardcarWorker(
        properties, new StaticListableBeanFactory().getBeanProvider(WorkerListener.class));
  }

  @Test
  void maxConcurrentExecutionsReachesTheWorkerAndDefaultsToTheExecutorSize() {
    ShardcarProperties set = bind(Map.of(
        "shardcar.target", "127.0.0.1:1",
        "shardcar.item-concurrency", "4",
        "shardcar.max-concurrent-executions", "2"));
    assertEquals(4, set.getItemConcurrency());
    assertEquals(2, set.getMaxConcurrentExecutions());
    try (ShardcarWorker worker = workerOf(set)) {
      assertEquals(4, worker.getItemConcurrency());
      assertEquals(2, worker.getMaxConcurrentExecutions());
    }
    ShardcarProperties camel = bind(Map.of(
        "shardcar.target", "127.0.0.1:1", "shardcar.itemConcurrency", "3", "shardcar.maxConcurrentExecutions", "1"));
    try (ShardcarWorker worker = workerOf(camel)) {
      assertEquals(1, worker.getMaxConcurrentExecutions(), "1: ElasticJob's one execution at a time");
    }
    ShardcarProperties unset = bind(Map.of("shardcar.target", "127.0.0.1:1", "shardcar.item-concurrency", "3"));
    assertNull(unset.getMaxConcurrentExecutions());
    try (ShardcarWorker worker = workerOf(unset)) {
      assertEquals(3, worker.getMaxConcurrentExecutions(), "the executor size");
    }
    assertThrows(IllegalArgumentException.class, () -> workerOf(bind(Map.of(
        "shardcar.target", "127.0.0.1:1", "shardcar.item-concurrency", "2", "shardcar.max-concurrent-executions", "3"))));
    assertThrows(IllegalArgumentException.class, () -> workerOf(bind(Map.of(
        "shardcar.target", "127.0.0.1:1", "shardcar.max-concurrent-executions", "0"))));
  }
}
