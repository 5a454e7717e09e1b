package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.client.testing.Processes;
import io.shardcar.client.testing.Recorder;
import io.shardcar.client.testing.SidecarAdmin;
import io.shardcar.client.testing.SidecarProcess;
import io.shardcar.v1.ExecutionInfo;
import java.time.Duration;
import java.util.Comparator;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Retries against a real standalone {@code shardcar run} process: a job of two items with
 * {@code maxAttempts} 3 and a 100 ms backoff, triggered once through the Admin API, whose handler
 * fails item 1 on attempts 0 and 1. The handler sees item 1 at attempts 0, 1, 2 with sources
 * MANUAL, RETRY, RETRY and a growing fencing token, item 0 once, and nothing more; the sidecar's
 * history ({@code ListExecutions}) says the same. The effective policy and error handler come back
 * with the registration, and an error handler without its settings is refused naming the prop.
 * The job has no cron, so no fire of the item comes between a failure and its retry (a fire drops
 * the pending retry and starts the count again).
 */
@Tag("integration")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class RetryIntegrationTest {
  private static final Duration WAIT = Duration.ofSeconds(20);
  private static final Duration BACKOFF = Duration.ofMillis(100);
  /** After the last attempt, how long nothing more may run: five times the 0.4 s a fourth attempt would wait. */
  private static final long QUIET_MILLIS = 2000;

  private SidecarProcess sidecar;
  private SidecarAdmin admin;
  private Recorder recorder;
  private ShardcarWorker worker;

  @BeforeEach
  void start() {
    sidecar = SidecarProcess.startStandalone();
    admin = new SidecarAdmin(sidecar);
    recorder = new Recorder();
    worker = ShardcarWorker.builder()
        .target(sidecar.target())
        .connectTimeout(Duration.ofSeconds(10))
        .drainTimeout(Duration.ofSeconds(2))
        .listener(recorder)
        .build();
  }

  @AfterEach
  void stop() {
    try {
      if (worker != null) {
        worker.close();
      }
      if (admin != null) {
        admin.close();
      }
    } finally {
      sidecar.close();
    }
  }

  @Test
  void aFailedItemRunsAgainWithItsAttemptUntilItSucceeds() {
    List<ShardingContext> seen = new CopyOnWriteArrayList<>();
    JobConfig config = JobConfig.newBuilder("retried", 2)
        .retry(RetryPolicy.newBuilder(3).initialBackoff(BACKOFF).build())
        .build();
    worker.register(config, ctx -> {
      seen.add(ctx);
      if (ctx.getShardingItem() == 1 && ctx.getAttempt() < 2) {
        throw new IllegalStateException("item 1 fails on attempt " + ctx.getAttempt());
      }
    });
    recorder.await("both items assigned", WAIT,
        e -> e.kind().equals("Assignment") && e.assignment().itemNumbers().equals(Set.of(0, 1)));
    admin.trigger("retried");

    recorder.await("item 1 answered three times", WAIT, 3, e -> e.kind().equals("Answered") && e.item() == 1);
    Processes.sleep(QUIET_MILLIS); // nothing more: the third attempt succeeded, item 0 never failed
    List<ShardingContext> runs = seen.stream().filter(c -> c.getShardingItem() == 1).toList();
    assertEquals(List.of(0, 1, 2), runs.stream().map(ShardingContext::getAttempt).toList(), runs.toString());
    assertEquals(List.of(TriggerSource.MANUAL, TriggerSource.RETRY, TriggerSource.RETRY),
        runs.stream().map(ShardingContext::getSource).toList(), runs.toString());
    // Each retry is a new execution with a new fencing token, growing as a store that fences the
    // item needs it to.
    assertEquals(3, runs.stream().map(ShardingContext::getExecutionId).distinct().count(), runs.toString());
    assertTrue(runs.get(0).getFencingToken() < runs.get(1).getFencingToken()
        && runs.get(1).getFencingToken() < runs.get(2).getFencingToken(), runs.toString());
    List<ShardingContext> item0 = seen.stream().filter(c -> c.getShardingItem() == 0).toList();
    assertEquals(1, item0.size(), item0.toString());
    assertEquals(0, item0.get(0).getAttempt());
    assertEquals(TriggerSource.MANUAL, item0.get(0).getSource());

    List<Recorder.Event> answers = recorder.events("Answered").stream().filter(e -> e.item() == 1).toList();
    assertEquals(List.of("java.lang.IllegalStateException: item 1 fails on attempt 0",
        "java.lang.IllegalStateException: item 1 fails on attempt 1"),
        answers.subList(0, 2).stream().map(Recorder.Event::text).toList());
    assertNull(answers.get(2).text(), "the third attempt completed");
    answers.forEach(e -> assertNull(e.error(), "the sidecar accepted every answer: " + e));

    // The sidecar's record of the same: three executions of item 1, attempts 0, 1, 2.
    admin.awaitExecution("retried", "the third execution of item 1", WAIT,
        e -> e.getItemsList().contains(1) && e.getAttempt() == 2);
    List<ExecutionInfo> history = admin.executions("retried").stream()
        .filter(e -> e.getItemsList().contains(1))
        .sorted(Comparator.comparingInt(ExecutionInfo::getAttempt))
        .toList();
    assertEquals(List.of("0 TRIGGER_SOURCE_MANUAL EXECUTION_OUTCOME_FAILED",
        "1 TRIGGER_SOURCE_RETRY EXECUTION_OUTCOME_FAILED",
        "2 TRIGGER_SOURCE_RETRY EXECUTION_OUTCOME_COMPLETED"),
        history.stream().map(e -> e.getAttempt() + " " + e.getSource() + " " + e.getOutcome()).toList());
  }

  @Test
  void theEffectivePolicyAndHandlerComeBackWithTheRegistration() {
    JobRegistration registration = worker.register(
        JobConfig.newBuilder("effective", 1)
            .retry(RetryPolicy.newBuilder(3).initialBackoff(BACKOFF).build())
            .jobErrorHandlerType("ignore")
            .build(),
        ctx -> { });
    JobConfig effective = registration.getEffectiveConfig();
    // The sidecar's defaults filled in: max 1 min, multiplier 2.
    assertEquals(RetryPolicy.newBuilder(3).initialBackoff(BACKOFF).maxBackoff(Duration.ofMinutes(1)).multiplier(2.0)
        .build(), effective.getRetry());
    assertEquals("IGNORE", effective.getJobErrorHandlerType());
  }

  @Test
  void anErrorHandlerWithoutItsSettingsIsRefusedNamingTheProp() {
    InvalidJobConfigException e = assertThrows(InvalidJobConfigException.class,
        () -> worker.register(JobConfig.newBuilder("alerts", 1).jobErrorHandlerType("DINGTALK").build(), ctx -> { }));
    assertEquals("props[\"dingtalk.webhook\"]", e.getField().orElse(null), e.getMessage());
    assertEquals("config.props[\"dingtalk.webhook\"]", e.getRequestField().orElse(null), e.getMessage());
    assertEquals(ErrorReasons.INVALID_ARGUMENT, e.getReason().orElse(null), e.getMessage());
    assertTrue(worker.getRegistrations().isEmpty(),
        worker.getRegistrations().stream().map(Object::toString).collect(Collectors.joining(", ")));
  }
}
