package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.v1.ShardItem;
import io.shardcar.v1.Trigger;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The client's enums against the prefixed {@code shardcar.v1} ones. */
class ProtoMappingTest {
  @Test
  void everyWireTriggerSourceMapsToItsOwnName() {
    assertEquals(TriggerSource.CRON, ProtoMapping.fromProto(io.shardcar.v1.TriggerSource.TRIGGER_SOURCE_CRON));
    assertEquals(TriggerSource.MISFIRE, ProtoMapping.fromProto(io.shardcar.v1.TriggerSource.TRIGGER_SOURCE_MISFIRE));
    assertEquals(TriggerSource.FAILOVER, ProtoMapping.fromProto(io.shardcar.v1.TriggerSource.TRIGGER_SOURCE_FAILOVER));
    assertEquals(TriggerSource.MANUAL, ProtoMapping.fromProto(io.shardcar.v1.TriggerSource.TRIGGER_SOURCE_MANUAL));
    assertEquals(TriggerSource.RETRY, ProtoMapping.fromProto(io.shardcar.v1.TriggerSource.TRIGGER_SOURCE_RETRY));
    assertEquals(
        TriggerSource.RESIDENT,
        ProtoMapping.fromProto(io.shardcar.v1.TriggerSource.TRIGGER_SOURCE_RESIDENT));
  }

  @Test
  void aRetryTriggerCarriesItsAttemptToTheContext() {
    Trigger retry = Trigger.newBuilder()
        .setExecutionId("e2")
        .addItems(ShardItem.newBuilder().setItem(1))
        .setSource(io.shardcar.v1.TriggerSource.TRIGGER_SOURCE_RETRY)
        .setAttempt(2)
        .putFencingTokens(1, 7L)
        .build();
    ShardingContext ctx = ProtoMapping.contexts("job", retry).get(0);
    assertEquals(2, ctx.getAttempt());
    assertEquals(TriggerSource.RETRY, ctx.getSource());
    assertEquals(7L, ctx.getFencingToken());
    assertTrue(ctx.toString().contains("attempt=2"), ctx.toString());
    // A first run, from a sidecar older than the field too, and a context built without one: 0.
    Trigger first = retry.toBuilder().clearAttempt().setSource(io.shardcar.v1.TriggerSource.TRIGGER_SOURCE_CRON).build();
    assertEquals(0, ProtoMapping.contexts("job", first).get(0).getAttempt());
    assertEquals(0, new ShardingContext("job", "", 1, "", 0, "", "e", null, 0, null).getAttempt());
  }

  @Test
  void anUnspecifiedOrUnknownTriggerSourceIsNotACronFire() {
    assertEquals(TriggerSource.UNKNOWN, ProtoMapping.fromProto(io.shardcar.v1.TriggerSource.TRIGGER_SOURCE_UNSPECIFIED));
    assertEquals(TriggerSource.UNKNOWN, ProtoMapping.fromProto(io.shardcar.v1.TriggerSource.UNRECOGNIZED));

    // As read off the wire: a trigger without a source, and one with a number this client does not know.
    Trigger unset = Trigger.newBuilder().setExecutionId("e1").addItems(ShardItem.newBuilder().setItem(0)).build();
    Trigger future = unset.toBuilder().setSourceValue(99).build();
    assertEquals(io.shardcar.v1.TriggerSource.UNRECOGNIZED, future.getSource());
    for (Trigger t : List.of(unset, future)) {
      List<ShardingContext> contexts = ProtoMapping.contexts("job", t);
      assertEquals(1, contexts.size());
      assertEquals(TriggerSource.UNKNOWN, contexts.get(0).getSource(), t.toString());
    }
    Trigger cron = unset.toBuilder().setSource(io.shardcar.v1.TriggerSource.TRIGGER_SOURCE_CRON).build();
    assertEquals(TriggerSource.CRON, ProtoMapping.contexts("job", cron).get(0).getSource());

    // A context built without a source does not claim one either.
    assertEquals(TriggerSource.UNKNOWN,
        new ShardingContext("job", "", 1, "", 0, "", "e", null, 0, null).getSource());
  }

  @Test
  void shardingStrategiesMapToThePrefixedProtoValuesAndBack() {
    assertEquals(io.shardcar.v1.ShardingStrategy.SHARDING_STRATEGY_AVG_ALLOCATION,
        ProtoMapping.toProto(ShardingStrategy.AVG_ALLOCATION));
    assertEquals(io.shardcar.v1.ShardingStrategy.SHARDING_STRATEGY_ODEVITY,
        ProtoMapping.toProto(ShardingStrategy.ODEVITY));
    assertEquals(io.shardcar.v1.ShardingStrategy.SHARDING_STRATEGY_ROUND_ROBIN,
        ProtoMapping.toProto(ShardingStrategy.ROUND_ROBIN));
    for (ShardingStrategy s : ShardingStrategy.values()) {
      assertEquals(s, ProtoMapping.fromProto(ProtoMapping.toProto(s)));
    }
    // Unset means ElasticJob's default, as the sidecar reads it.
    assertEquals(ShardingStrategy.AVG_ALLOCATION,
        ProtoMapping.fromProto(io.shardcar.v1.ShardingStrategy.SHARDING_STRATEGY_UNSPECIFIED));
    assertNull(ProtoMapping.fromProto(io.shardcar.v1.ShardingStrategy.UNRECOGNIZED));
  }

  @Test
  void aProtoConfigWithoutAStrategyReadsAsAvgAllocation() {
    io.shardcar.v1.JobConfig unset = io.shardcar.v1.JobConfig.newBuilder()
        .setJobName("j").setShardingTotalCount(1).build();
    assertEquals(ShardingStrategy.AVG_ALLOCATION, ProtoMapping.fromProto(unset).getShardingStrategy());
    io.shardcar.v1.JobConfig odevity = unset.toBuilder()
        .setShardingStrategy(io.shardcar.v1.ShardingStrategy.SHARDING_STRATEGY_ODEVITY).build();
    assertEquals(ShardingStrategy.ODEVITY, ProtoMapping.fromProto(odevity).getShardingStrategy());
  }
}
