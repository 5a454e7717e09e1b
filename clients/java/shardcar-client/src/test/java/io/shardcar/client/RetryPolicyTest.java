package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * {@link RetryPolicy} and {@link JobConfig}'s error handler type without a sidecar: the builder
 * refuses, naming the field as the sidecar would, every value the sidecar refuses; unset fields
 * stay unset on the wire; what the sidecar sends back is read as it is.
 */
class RetryPolicyTest {
  private static void refused(String field, String says, Executable build) {
    InvalidJobConfigException e = assertThrows(InvalidJobConfigException.class, build);
    assertEquals(field, e.getField().orElseThrow(), e.getMessage());
    assertTrue(e.getMessage().startsWith(field + " "), e.getMessage());
    assertTrue(e.getMessage().contains(says), e.getMessage());
    assertFalse(e.getReason().isPresent(), "the client's own check has no sidecar reason");
  }

  @Test
  void thePoliciesTheSidecarTakesAreBuilt() {
    RetryPolicy p = RetryPolicy.newBuilder(3)
        .initialBackoff(Duration.ofMillis(100))
        .maxBackoff(Duration.ofSeconds(30))
        .multiplier(3.0)
        .build();
    assertEquals(3, p.getMaxAttempts());
    assertEquals(Duration.ofMillis(100), p.getInitialBackoff());
    assertEquals(Duration.ofSeconds(30), p.getMaxBackoff());
    assertEquals(3.0, p.getMultiplier());
    assertEquals(p, p.toBuilder().build());
    // The limits themselves.
    RetryPolicy.newBuilder(100).initialBackoff(Duration.ofMillis(10)).maxBackoff(Duration.ofDays(1)).multiplier(10.0)
        .build();
    RetryPolicy.newBuilder(1).initialBackoff(Duration.ofDays(1)).multiplier(1.0).build();
    // 0 is the sidecar's "no retries", as 1 is (proto: "0 or 1: no retries").
    assertEquals(0, RetryPolicy.newBuilder(0).build().getMaxAttempts());
    RetryPolicy unset = RetryPolicy.newBuilder(2).build();
    assertNull(unset.getInitialBackoff());
    assertNull(unset.getMaxBackoff());
    assertNull(unset.getMultiplier());
  }

  @Test
  void aPolicyTheSidecarWouldRefuseNamesItsField() {
    refused("retry.maxAttempts", "from 0 to 100", () -> RetryPolicy.newBuilder(101));
    refused("retry.maxAttempts", "from 0 to 100", () -> RetryPolicy.newBuilder(-1));
    refused("retry.initialBackoff", "10 ms and 1 day",
        () -> RetryPolicy.newBuilder(3).initialBackoff(Duration.ofNanos(9_999_999)));
    refused("retry.initialBackoff", "10 ms and 1 day", () -> RetryPolicy.newBuilder(3).initialBackoff(Duration.ZERO));
    refused("retry.initialBackoff", "10 ms and 1 day",
        () -> RetryPolicy.newBuilder(3).initialBackoff(Duration.ofSeconds(-1)));
    refused("retry.maxBackoff", "10 ms and 1 day",
        () -> RetryPolicy.newBuilder(3).maxBackoff(Duration.ofDays(1).plusNanos(1)));
    refused("retry.maxBackoff", "must not be below retry.initialBackoff (PT2S)",
        () -> RetryPolicy.newBuilder(3).initialBackoff(Duration.ofSeconds(2)).maxBackoff(Duration.ofSeconds(1)).build());
    // Unset, the initial backoff is the sidecar's 1 s, which the max must not be below either.
    refused("retry.maxBackoff", "must not be below the default initialBackoff (PT1S)",
        () -> RetryPolicy.newBuilder(3).maxBackoff(Duration.ofMillis(500)).build());
    refused("retry.multiplier", "from 1 to 10", () -> RetryPolicy.newBuilder(3).multiplier(0.5));
    refused("retry.multiplier", "from 1 to 10", () -> RetryPolicy.newBuilder(3).multiplier(0.0));
    refused("retry.multiplier", "from 1 to 10", () -> RetryPolicy.newBuilder(3).multiplier(10.5));
    refused("retry.multiplier", "from 1 to 10", () -> RetryPolicy.newBuilder(3).multiplier(Double.NaN));
  }

  @Test
  void unsetPolicyFieldsStayUnsetOnTheWire() {
    io.shardcar.v1.JobConfig p = ProtoMapping.toProto(
        JobConfig.newBuilder("j", 1).retry(RetryPolicy.newBuilder(3).build()).build());
    assertTrue(p.hasRetry());
    assertEquals(3, p.getRetry().getMaxAttempts());
    assertFalse(p.getRetry().hasInitialBackoff());
    assertFalse(p.getRetry().hasMaxBackoff());
    assertEquals(0.0, p.getRetry().getMultiplier(), "the wire's unset: the sidecar's 2");
    assertFalse(ProtoMapping.toProto(JobConfig.newBuilder("j", 1).build()).hasRetry());
    assertEquals("", ProtoMapping.toProto(JobConfig.newBuilder("j", 1).build()).getJobErrorHandlerType());

    io.shardcar.v1.RetryPolicy full = ProtoMapping.toProto(RetryPolicy.newBuilder(5)
        .initialBackoff(Duration.ofMillis(250)).maxBackoff(Duration.ofSeconds(90)).multiplier(1.5).build());
    assertEquals(0, full.getInitialBackoff().getSeconds());
    assertEquals(250_000_000, full.getInitialBackoff().getNanos());
    assertEquals(90, full.getMaxBackoff().getSeconds());
    assertEquals(1.5, full.getMultiplier());
  }

  @Test
  void theSidecarsPolicyAndHandlerAreReadAsTheyAre() {
    JobConfig config = JobConfig.newBuilder("j", 1)
        .retry(RetryPolicy.newBuilder(4).initialBackoff(Duration.ofMillis(500)).maxBackoff(Duration.ofSeconds(10))
            .multiplier(2.5).build())
        .jobErrorHandlerType("webhook")
        .props(Map.of("webhook.url", "http://x"))
        .build();
    assertEquals("WEBHOOK", config.getJobErrorHandlerType());
    assertEquals(config, ProtoMapping.fromProto(ProtoMapping.toProto(config)));
    assertEquals(config, config.toBuilder().build());
    // What the sidecar reads from ZooKeeper need not be what this client would send: a handler of
    // an ElasticJob process's own (an SPI type), a policy written by hand. A worker still reads it.
    io.shardcar.v1.JobConfig wire = io.shardcar.v1.JobConfig.newBuilder()
        .setJobName("j").setShardingTotalCount(1).setJobErrorHandlerType("MY_SPI_HANDLER")
        .setRetry(io.shardcar.v1.RetryPolicy.newBuilder().setMaxAttempts(500).setMultiplier(20))
        .build();
    JobConfig back = ProtoMapping.fromProto(wire);
    assertEquals("MY_SPI_HANDLER", back.getJobErrorHandlerType());
    assertEquals(500, back.getRetry().getMaxAttempts());
    assertEquals(20.0, back.getRetry().getMultiplier());
    assertNull(back.getRetry().getInitialBackoff());
    assertEquals(back, back.toBuilder().build());
  }

  @Test
  void theErrorHandlerTypeIsOneOfElasticJobs() {
    assertEquals(java.util.List.of("LOG", "IGNORE", "THROW", "EMAIL", "WECHAT", "DINGTALK", "WEBHOOK"),
        JobConfig.ERROR_HANDLER_TYPES);
    for (String type : JobConfig.ERROR_HANDLER_TYPES) {
      assertEquals(type, JobConfig.newBuilder("j", 1).jobErrorHandlerType(type.toLowerCase()).build()
          .getJobErrorHandlerType());
    }
    assertEquals("IGNORE", ProtoMapping.toProto(JobConfig.newBuilder("j", 1).jobErrorHandlerType(" ignore ").build())
        .getJobErrorHandlerType());
    assertEquals("", JobConfig.newBuilder("j", 1).jobErrorHandlerType(null).build().getJobErrorHandlerType());
    refused("jobErrorHandlerType", "must be one of LOG, IGNORE",
        () -> JobConfig.newBuilder("j", 1).jobErrorHandlerType("SLACK"));
  }
}
