package io.shardcar.elasticjob;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.client.InvalidJobConfigException;
import io.shardcar.client.JobConfig;
import io.shardcar.client.ShardingStrategy;
import io.shardcar.client.TriggerSource;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.apache.shardingsphere.elasticjob.api.ShardingContext;
import org.apache.shardingsphere.elasticjob.api.ElasticJob;
import org.apache.shardingsphere.elasticjob.dataflow.job.DataflowJob;
import org.apache.shardingsphere.elasticjob.dataflow.props.DataflowJobProperties;
import org.apache.shardingsphere.elasticjob.simple.job.SimpleJob;
import org.junit.jupiter.api.Test;

/** Mapping between ElasticJob's types and shardcar's; needs no sidecar. */
class ElasticJobBridgeTest {
  @Test
  void everySharedSettingIsMapped() {
    JobConfiguration ej = JobConfiguration.newBuilder("orders", 3)
        .cron("0/5 * * * * ?")
        .timeZone("GMT+08:00")
        .shardingItemParameters("0=Beijing,1=Shanghai,2=Guangzhou")
        .jobParameter("batch=100")
        .monitorExecution(false)
        .failover(true)
        .misfire(false)
        .maxTimeDiffSeconds(60)
        .reconcileIntervalMinutes(7)
        .jobShardingStrategyType("ODEVITY")
        .description("orders job")
        .setProperty("k", "v")
        .disabled(true)
        .overwrite(true)
        .build();
    JobConfig c = ElasticJobBridge.toJobConfig(ej);
    assertEquals("orders", c.getJobName());
    assertEquals("0/5 * * * * ?", c.getCron());
    assertEquals("GMT+08:00", c.getTimeZone());
    assertEquals(3, c.getShardingTotalCount());
    assertEquals(Map.of(0, "Beijing", 1, "Shanghai", 2, "Guangzhou"), c.getShardingItemParameters());
    assertEquals("batch=100", c.getJobParameter());
    assertFalse(c.getMonitorExecution());
    assertTrue(c.isFailover());
    assertFalse(c.getMisfire());
    assertEquals(60, c.getMaxTimeDiffSeconds());
    assertEquals(7, c.getReconcileIntervalMinutes());
    assertEquals(ShardingStrategy.ODEVITY, c.getShardingStrategy());
    assertEquals("orders job", c.getDescription());
    assertEquals(Map.of("k", "v"), c.getProps());
    assertTrue(c.isDisabled());
    assertTrue(c.isOverwrite());
  }

  @Test
  void elasticJobDefaultsAreSentExplicitly() {
    JobConfig c = ElasticJobBridge.toJobConfig(JobConfiguration.newBuilder("j", 1).cron("* * * * * ?").build());
    assertEquals(true, c.getMisfire());
    assertEquals(true, c.getMonitorExecution());
    assertEquals(-1, c.getMaxTimeDiffSeconds());
    assertEquals(10, c.getReconcileIntervalMinutes());
    assertEquals(ShardingStrategy.AVG_ALLOCATION, c.getShardingStrategy());
    assertEquals("", c.getTimeZone());
    assertTrue(c.getShardingItemParameters().isEmpty());
  }

  @Test
  void theErrorHandlerGoesToTheSidecarUnlessItIsAnSpiHandlerOfTheApplications() {
    JobConfig dingtalk = ElasticJobBridge.toJobConfig(JobConfiguration.newBuilder("j", 1)
        .jobErrorHandlerType("DINGTALK").setProperty("dingtalk.webhook", "https://oapi.dingtalk.com/robot/send").build());
    assertEquals("DINGTALK", dingtalk.getJobErrorHandlerType());
    assertEquals(Map.of("dingtalk.webhook", "https://oapi.dingtalk.com/robot/send"), dingtalk.getProps());
    // ElasticJob loads handlers by type through its SPI: a type of the application's own cannot run
    // in a sidecar, and is ignored with a warning as the executor's other settings are.
    assertEquals("", ElasticJobBridge.toJobConfig(JobConfiguration.newBuilder("j", 1)
        .jobErrorHandlerType("MY_PAGER").build()).getJobErrorHandlerType());
    assertEquals("", ElasticJobBridge.toJobConfig(JobConfiguration.newBuilder("j", 1).build()).getJobErrorHandlerType());
  }

  @Test
  void unsupportedStrategyIsRefusedNamingTheField() {
    JobConfiguration ej = JobConfiguration.newBuilder("j", 1).jobShardingStrategyType("MY_STRATEGY").build();
    InvalidJobConfigException e = assertThrows(InvalidJobConfigException.class, () -> ElasticJobBridge.toJobConfig(ej));
    assertEquals("shardingStrategy", e.getField().orElseThrow());
  }

  @Test
  void theSimpleJobSeesElasticJobsShardingContext() throws Exception {
    List<ShardingContext> seen = new ArrayList<>();
    SimpleJob job = seen::add;
    ElasticJobBridge.handler(job).execute(new io.shardcar.client.ShardingContext(
        "orders", "orders@-@1@-@READY@-@10.0.0.1@-@42", 3, "p", 1, "Shanghai", "e-1",
        TriggerSource.CRON, 17, Instant.EPOCH));
    ShardingContext ctx = seen.get(0);
    assertEquals("orders", ctx.getJobName());
    assertEquals("orders@-@1@-@READY@-@10.0.0.1@-@42", ctx.getTaskId());
    assertEquals(3, ctx.getShardingTotalCount());
    assertEquals("p", ctx.getJobParameter());
    assertEquals(1, ctx.getShardingItem());
    assertEquals("Shanghai", ctx.getShardingParameter());
  }

  @Test
  void aThrowingSimpleJobPropagatesSoTheItemIsReportedFailed() {
    SimpleJob job = ctx -> {
      throw new IllegalStateException("boom");
    };
    IllegalStateException e = assertThrows(IllegalStateException.class, () -> ElasticJobBridge.handler(job)
        .execute(new io.shardcar.client.ShardingContext("j", "", 1, "", 0, "", "e", TriggerSource.CRON, 0, null)));
    assertEquals("boom", e.getMessage());
  }

  @Test
  void theDataflowJobSeesElasticJobsShardingContextAndItsData() throws Exception {
    List<String> calls = new ArrayList<>();
    DataflowJob<Integer> job = new DataflowJob<>() {
      @Override
      public List<Integer> fetchData(ShardingContext ctx) {
        calls.add("fetch " + ctx.getShardingItem() + " " + ctx.getShardingParameter());
        return List.of(7, 8);
      }

      @Override
      public void processData(ShardingContext ctx, List<Integer> data) {
        calls.add("process " + ctx.getJobName() + " " + data);
      }
    };
    io.shardcar.client.ShardingContext ctx = new io.shardcar.client.ShardingContext(
        "orders", "t", 3, "p", 1, "Shanghai", "e-1", TriggerSource.CRON, 17, Instant.EPOCH);
    io.shardcar.client.DataflowHandler<Integer> handler = ElasticJobBridge.dataflowHandler(job);
    handler.process(ctx, handler.fetch(ctx));
    assertEquals(List.of("fetch 1 Shanghai", "process orders [7, 8]"), calls);
  }

  @Test
  void theStreamingPropertyTravelsWithTheOtherProps() {
    JobConfig c = ElasticJobBridge.toJobConfig(JobConfiguration.newBuilder("j", 1)
        .setProperty(DataflowJobProperties.STREAM_PROCESS_KEY, "true").build());
    assertTrue(c.isStreamingProcess());
    assertFalse(ElasticJobBridge.toJobConfig(JobConfiguration.newBuilder("j", 1).build()).isStreamingProcess());
  }

  @Test
  void onlySimpleAndDataflowJobsAreRun() {
    ElasticJob other = new ElasticJob() {};
    assertFalse(ElasticJobBridge.isSupported(other));
    assertTrue(ElasticJobBridge.isSupported((SimpleJob) ctx -> {}));
    try (io.shardcar.client.ShardcarWorker worker =
        io.shardcar.client.ShardcarWorker.builder().target("127.0.0.1:1").build()) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
          () -> new ShardcarJobBootstrap(worker, other, JobConfiguration.newBuilder("j", 1).build()));
      assertTrue(e.getMessage().contains("neither a SimpleJob nor a DataflowJob"), e.getMessage());
    }
  }
}
