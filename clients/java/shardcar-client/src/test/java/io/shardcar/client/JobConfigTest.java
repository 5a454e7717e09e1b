package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import java.util.Properties;
import org.junit.jupiter.api.Test;

class JobConfigTest {
  @Test
  void optionalFieldsStayUnsetOnTheWireUnlessSet() {
    io.shardcar.v1.JobConfig p = ProtoMapping.toProto(JobConfig.newBuilder("orders", 3).build());
    assertEquals("orders", p.getJobName());
    assertEquals(3, p.getShardingTotalCount());
    assertFalse(p.hasMisfire());
    assertFalse(p.hasMonitorExecution());
    assertFalse(p.hasMaxTimeDiffSeconds());
    assertFalse(p.hasReconcileIntervalMinutes());
    assertEquals("", p.getCron());
    assertEquals(io.shardcar.v1.ShardingStrategy.SHARDING_STRATEGY_AVG_ALLOCATION, p.getShardingStrategy());

    io.shardcar.v1.JobConfig set = ProtoMapping.toProto(JobConfig.newBuilder("orders", 3)
        .misfire(false).monitorExecution(false).maxTimeDiffSeconds(-1).reconcileIntervalMinutes(0).build());
    assertTrue(set.hasMisfire());
    assertFalse(set.getMisfire());
    assertTrue(set.hasMonitorExecution());
    assertFalse(set.getMonitorExecution());
    assertEquals(-1, set.getMaxTimeDiffSeconds());
    assertTrue(set.hasReconcileIntervalMinutes());
    assertEquals(0, set.getReconcileIntervalMinutes());
  }

  @Test
  void everyFieldRoundTripsThroughTheProto() {
    Properties props = new Properties();
    props.setProperty("k", "v");
    JobConfig config = JobConfig.builder()
        .jobName("billing")
        .cron("0/5 * * * * ?")
        .timeZone("GMT+08:00")
        .shardingTotalCount(4)
        .shardingItemParameters("0=a, 1=b,3=")
        .jobParameter("p")
        .failover(true)
        .misfire(false)
        .monitorExecution(true)
        .shardingStrategy("round_robin")
        .maxTimeDiffSeconds(30)
        .reconcileIntervalMinutes(5)
        .description("d")
        .disabled(true)
        .props(props)
        .executionTimeoutSeconds(60)
        .build();
    assertEquals(Map.of(0, "a", 1, "b", 3, ""), config.getShardingItemParameters());
    assertEquals(ShardingStrategy.ROUND_ROBIN, config.getShardingStrategy());
    JobConfig back = ProtoMapping.fromProto(ProtoMapping.toProto(config));
    assertEquals(config, back);
    assertEquals(config, config.toBuilder().build());
    assertEquals(Map.of("k", "v"), back.getProps());
  }

  @Test
  void overwriteIsCarriedByTheConfigButNotByTheProtoConfig() {
    JobConfig config = JobConfig.newBuilder("j", 1).overwrite(true).build();
    assertTrue(config.isOverwrite());
    assertFalse(ProtoMapping.fromProto(ProtoMapping.toProto(config)).isOverwrite());
  }

  @Test
  void malformedItemParametersNameTheField() {
    InvalidJobConfigException e = assertThrows(
        InvalidJobConfigException.class, () -> JobConfig.newBuilder("j", 2).shardingItemParameters("0=a,b"));
    assertEquals("shardingItemParameters", e.getField().orElseThrow());
    assertTrue(e.getMessage().contains("0=a,b"), e.getMessage());
    assertThrows(InvalidJobConfigException.class, () -> JobConfig.newBuilder("j", 2).shardingItemParameters("x=a"));
    assertTrue(JobConfig.newBuilder("j", 2).shardingItemParameters((String) null).build()
        .getShardingItemParameters().isEmpty());
  }

  @Test
  void missingJobNameAndUnknownStrategyAreRefusedWithTheField() {
    assertEquals("jobName", assertThrows(InvalidJobConfigException.class,
        () -> JobConfig.builder().shardingTotalCount(1).build()).getField().orElseThrow());
    assertEquals("shardingStrategy", assertThrows(InvalidJobConfigException.class,
        () -> JobConfig.newBuilder("j", 1).shardingStrategy("CONSISTENT_HASH")).getField().orElseThrow());
    assertEquals("executionTimeoutSeconds", assertThrows(InvalidJobConfigException.class,
        () -> JobConfig.newBuilder("j", 1).executionTimeoutSeconds(-1)).getField().orElseThrow());
    assertEquals(ShardingStrategy.AVG_ALLOCATION, ShardingStrategy.fromElasticJobType(null));
    assertEquals(ShardingStrategy.ODEVITY, ShardingStrategy.fromElasticJobType(" ODEVITY "));
  }

  @Test
  void unsetOptionalsReadBackAsNull() {
    JobConfig config = ProtoMapping.fromProto(ProtoMapping.toProto(JobConfig.newBuilder("j", 1).build()));
    assertNull(config.getMisfire());
    assertNull(config.getMonitorExecution());
    assertNull(config.getMaxTimeDiffSeconds());
    assertNull(config.getReconcileIntervalMinutes());
  }
}
