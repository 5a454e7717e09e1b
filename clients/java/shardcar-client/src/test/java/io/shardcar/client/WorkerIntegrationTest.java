package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.client.testing.Recorder;
import io.shardcar.client.testing.SidecarProcess;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The client against a real standalone {@code shardcar run} process: triggers reach the handler
 * with ElasticJob's context; completions and failures are accepted; a lease that runs out while
 * the sidecar is frozen interrupts the handler; a revoke interrupts it and its answer is never
 * sent; after a sidecar restart the worker subscribes again and never answers for the old stream;
 * an invalid cron is refused with the field and reason of the sidecar's rich error details; two
 * workers with the same pid (as in two containers) get their own instance ids, share a job and
 * keep their ids across a restart; closing a registration lets the running item finish and answer.
 */
@Tag("integration")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class WorkerIntegrationTest {
  private static final String EVERY_SECOND = "* * * * * ?";
  private static final Duration WAIT = Duration.ofSeconds(20);

  private SidecarProcess sidecar;
  private Recorder recorder;
  private ShardcarWorker worker;

  @BeforeEach
  void startSidecar() {
    sidecar = SidecarProcess.startStandalone();
    recorder = new Recorder();
    worker = ShardcarWorker.builder()
        .target(sidecar.target())
        .connectTimeout(Duration.ofSeconds(10))
        .reconnectBackoff(Duration.ofMillis(100), Duration.ofSeconds(1))
        .drainTimeout(Duration.ofSeconds(2))
        .listener(recorder)
        .build();
  }

  @AfterEach
  void stopSidecar() {
    try {
      if (worker != null) {
        worker.close();
      }
    } finally {
      sidecar.close();
    }
  }

  @Test
  void triggersReachTheHandlerWithElasticJobsContext() {
    Map<Integer, ShardingContext> seen = new ConcurrentHashMap<>();
    JobRegistration registration = worker.register(
        JobConfig.newBuilder("ctx-job", 2)
            .cron(EVERY_SECOND)
            .shardingItemParameters("0=alpha,1=beta")
            .jobParameter("jp")
            .build(),
        ctx -> seen.putIfAbsent(ctx.getShardingItem(), ctx));
    assertFalse(registration.getInstanceId().isEmpty());
    assertEquals(JobRegistration.State.ACTIVE, registration.getState());
    assertEquals("ctx-job", registration.getEffectiveConfig().getJobName());

    recorder.await("both items answered", WAIT, 2, e -> e.kind().equals("Answered") && e.item() >= 0);
    recorder.await("items 0 and 1 answered", WAIT, e -> seen.keySet().containsAll(Set.of(0, 1)));
    for (int item : List.of(0, 1)) {
      ShardingContext ctx = seen.get(item);
      assertEquals("ctx-job", ctx.getJobName());
      assertEquals(2, ctx.getShardingTotalCount());
      assertEquals("jp", ctx.getJobParameter());
      assertEquals(item == 0 ? "alpha" : "beta", ctx.getShardingParameter());
      assertFalse(ctx.getExecutionId().isEmpty());
      assertTrue(ctx.getTaskId().startsWith("ctx-job@-@"), ctx.getTaskId());
      assertTrue(ctx.getTaskId().contains("@-@READY@-@"), ctx.getTaskId());
      assertTrue(ctx.getSource() == TriggerSource.CRON || ctx.getSource() == TriggerSource.MISFIRE, ctx.toString());
      assertFalse(ctx.isCancelled());
    }
    Assignment assignment = registration.getAssignment();
    assertEquals(Set.of(0, 1), assignment.itemNumbers());
    assertTrue(assignment.leader(), "the only instance leads");
  }

  @Test
  void completionAndFailureAreReportedAndAccepted() {
    worker.register(JobConfig.newBuilder("answers-job", 2).cron(EVERY_SECOND).build(), ctx -> {
      if (ctx.getShardingItem() == 1) {
        throw new IllegalStateException("boom on item 1");
      }
    });
    // Two rounds each: an item is triggered again only after its previous answer was taken.
    List<Recorder.Event> completed = recorder.await("item 0 completed twice", WAIT, 2,
        e -> e.kind().equals("Answered") && e.item() == 0);
    List<Recorder.Event> failed = recorder.await("item 1 reported failed twice", WAIT, 2,
        e -> e.kind().equals("Answered") && e.item() == 1);
    for (Recorder.Event e : completed) {
      assertNull(e.text(), "a returning handler completes");
      assertNull(e.error(), "the sidecar accepted Complete: " + e);
    }
    for (Recorder.Event e : failed) {
      assertEquals("java.lang.IllegalStateException: boom on item 1", e.text());
      assertNull(e.error(), "the sidecar accepted ReportFailure: " + e);
    }
    assertNotEquals(completed.get(0).executionId(), completed.get(1).executionId());
  }

  @Test
  void aLeaseRunningOutWhileTheSidecarIsFrozenInterruptsTheHandler() throws Exception {
    CountDownLatch started = new CountDownLatch(1);
    CountDownLatch interrupted = new CountDownLatch(1);
    List<String> executions = new CopyOnWriteArrayList<>();
    JobRegistration registration = worker.register(JobConfig.newBuilder("lease-job", 1).cron(EVERY_SECOND).build(),
        ctx -> {
          executions.add(ctx.getExecutionId());
          if (executions.size() > 1) {
            return;
          }
          started.countDown();
          try {
            Thread.sleep(120_000);
          } catch (InterruptedException e) {
            assertTrue(ctx.isCancelled());
            interrupted.countDown();
            throw e;
          }
        });
    assertTrue(started.await(20, TimeUnit.SECONDS), "the first trigger arrived");
    assertTrue(registration.hasValidLease());
    long frozenAt = System.nanoTime();
    sidecar.pause();
    try {
      assertTrue(interrupted.await(30, TimeUnit.SECONDS),
          "the handler was interrupted once the lease ran out; recorded: " + recorder.events());
      assertTrue(Duration.ofNanos(System.nanoTime() - frozenAt).toMillis() >= 500,
          "not before the lease could have run out");
      assertFalse(registration.hasValidLease());
      recorder.await("lease expiry", WAIT, e -> e.kind().equals("LeaseExpired"));
      Recorder.Event cancelled = recorder.await("the item given up", WAIT,
          e -> e.kind().equals("Cancelled") && e.executionId().equals(executions.get(0)));
      assertTrue(cancelled.text().contains("lease"), cancelled.toString());
    } finally {
      sidecar.resume();
    }
    // The unfrozen sidecar renews the lease (or the worker re-subscribes): the worker may work again.
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (!registration.hasValidLease() && System.nanoTime() - deadline < 0) {
      Thread.sleep(20);
    }
    assertTrue(registration.hasValidLease(), "a renewal after the sidecar resumed; recorded: " + recorder.events());
    // The sidecar voids the lapsed execution, so the item runs again.
    recorder.await("a later execution answered", WAIT,
        e -> e.kind().equals("Answered") && !e.executionId().equals(executions.get(0)) && e.error() == null);
    sleepBriefly();
    assertTrue(recorder.events("Answered").stream().noneMatch(e -> e.executionId().equals(executions.get(0))),
        "the interrupted execution was never answered: " + recorder.events());
  }

  @Test
  void aRevokeInterruptsTheHandlerAndItsAnswerIsNeverSent() throws Exception {
    CountDownLatch interrupted = new CountDownLatch(1);
    List<String> executions = new CopyOnWriteArrayList<>();
    // An item still running after executionTimeoutSeconds is taken back with a Revoke.
    worker.register(JobConfig.newBuilder("revoke-job", 1).cron(EVERY_SECOND).executionTimeoutSeconds(1).build(),
        ctx -> {
          executions.add(ctx.getExecutionId());
          if (executions.size() > 1) {
            return;
          }
          try {
            Thread.sleep(120_000);
          } catch (InterruptedException e) {
            assertTrue(ctx.isCancelled());
            interrupted.countDown();
          }
        });
    assertTrue(interrupted.await(30, TimeUnit.SECONDS), "the handler was interrupted; recorded: " + recorder.events());
    Recorder.Event cancelled = recorder.await("the revoked item", WAIT,
        e -> e.kind().equals("Cancelled") && e.executionId().equals(executions.get(0)));
    assertTrue(cancelled.text().startsWith("revoked: "), cancelled.toString());
    // The item was released: later executions run and are answered.
    recorder.await("a later execution answered", WAIT,
        e -> e.kind().equals("Answered") && !e.executionId().equals(executions.get(0)) && e.error() == null);
    assertTrue(recorder.events("Answered").stream().noneMatch(e -> e.executionId().equals(executions.get(0))),
        "the revoked execution was never answered: " + recorder.events());
  }

  @Test
  void theWorkerReconnectsAfterTheSidecarRestartsAndNeverAnswersForTheOldStream() throws Exception {
    CountDownLatch started = new CountDownLatch(1);
    CountDownLatch interrupted = new CountDownLatch(1);
    List<String> firstExecution = new CopyOnWriteArrayList<>();
    worker.register(JobConfig.newBuilder("restart-job", 1).cron(EVERY_SECOND).build(), ctx -> {
      if (firstExecution.isEmpty()) {
        firstExecution.add(ctx.getExecutionId());
        started.countDown();
        try {
          Thread.sleep(120_000);
        } catch (InterruptedException e) {
          interrupted.countDown();
        }
      }
    });
    assertTrue(started.await(20, TimeUnit.SECONDS), "the first trigger arrived");
    sidecar.restart();
    assertTrue(interrupted.await(20, TimeUnit.SECONDS), "the running handler was interrupted when the stream broke");
    recorder.await("a disconnect", WAIT, e -> e.kind().equals("Disconnected"));
    recorder.await("a second registration", WAIT, 2, e -> e.kind().equals("Registered"));
    Recorder.Event after = recorder.await("an execution of the new sidecar answered", WAIT,
        e -> e.kind().equals("Answered") && e.error() == null);
    assertNotEquals(firstExecution.get(0), after.executionId());
    sleepBriefly();
    assertTrue(recorder.events("Answered").stream().noneMatch(e -> e.executionId().equals(firstExecution.get(0))),
        "nothing from before the restart was answered: " + recorder.events());
    assertEquals(JobRegistration.State.ACTIVE, worker.getRegistrations().get(0).getState());
  }

  @Test
  void anInvalidConfigIsRefusedNamingTheField() {
    // The field comes from the status's google.rpc.BadRequest, the reason from its ErrorInfo.
    InvalidJobConfigException badCron = assertThrows(InvalidJobConfigException.class,
        () -> worker.register(JobConfig.newBuilder("bad-cron", 1).cron("not a cron").build(), ctx -> { }));
    assertEquals("cron", badCron.getField().orElse(null), badCron.getMessage());
    assertEquals("config.cron", badCron.getRequestField().orElse(null), badCron.getMessage());
    assertEquals(ErrorReasons.INVALID_ARGUMENT, badCron.getReason().orElse(null), badCron.getMessage());
    InvalidJobConfigException badCount = assertThrows(InvalidJobConfigException.class,
        () -> worker.register(JobConfig.newBuilder("bad-count", 0).cron(EVERY_SECOND).build(), ctx -> { }));
    assertEquals("shardingTotalCount", badCount.getField().orElse(null), badCount.getMessage());
    assertEquals("config.sharding_total_count", badCount.getRequestField().orElse(null), badCount.getMessage());
    assertEquals(ErrorReasons.INVALID_ARGUMENT, badCount.getReason().orElse(null), badCount.getMessage());
    assertTrue(worker.getRegistrations().isEmpty());
  }

  /**
   * Two workers that look like two containers sharing the sidecar: both pid 1, each with its own
   * random part (as two JVMs would have). Their instance ids differ, both join one job and both
   * get items; after a sidecar restart both come back under the same ids. Without the suffix the
   * second is refused as a conflict (ALREADY_EXISTS), which is why containers need it.
   */
  @Test
  void workersWithTheSamePidInContainersGetTheirOwnInstanceIdsAndShareAJob() {
    String job = "suffix-job";
    Recorder recorderA = new Recorder();
    Recorder recorderB = new Recorder();
    try (ShardcarWorker a = containerWorker("aaaa0001", recorderA);
        ShardcarWorker b = containerWorker("bbbb0002", recorderB)) {
      JobConfig config = JobConfig.newBuilder(job, 2).cron(EVERY_SECOND).build();
      JobRegistration ra = a.register(config, ctx -> { });
      JobRegistration rb = b.register(config, ctx -> { });
      assertTrue(ra.getInstanceId().endsWith("@-@1-aaaa0001"), ra.getInstanceId());
      assertTrue(rb.getInstanceId().endsWith("@-@1-bbbb0002"), rb.getInstanceId());
      assertEquals(ra.getInstanceId().split("@-@")[0], rb.getInstanceId().split("@-@")[0], "one sidecar ip");

      recorderA.await("worker a answered an item", WAIT, e -> e.kind().equals("Answered") && e.error() == null);
      recorderB.await("worker b answered an item", WAIT, e -> e.kind().equals("Answered") && e.error() == null);

      // The pid alone (what the sidecar uses without a suffix) collides: pid 1 is already live.
      try (ShardcarWorker plain = ShardcarWorker.builder()
          .target(sidecar.target())
          .pid(1)
          .instanceSuffix(ShardcarWorker.InstanceSuffix.NEVER)
          .connectTimeout(Duration.ofSeconds(10))
          .build();
          ShardcarWorker samePid = ShardcarWorker.builder()
              .target(sidecar.target())
              .pid(1)
              .instanceSuffix(ShardcarWorker.InstanceSuffix.NEVER)
              .connectTimeout(Duration.ofSeconds(10))
              .build()) {
        plain.register(job, ctx -> { });
        InstanceConflictException conflict = assertThrows(InstanceConflictException.class,
            () -> samePid.register(job, ctx -> { }));
        assertEquals(ErrorReasons.ALREADY_EXISTS, conflict.getReason().orElse(null), conflict.getMessage());
      }

      // Reconnects send the same suffix: the ids survive a sidecar restart.
      sidecar.restart();
      recorderA.await("worker a registered again", WAIT, 2, e -> e.kind().equals("Registered"));
      recorderB.await("worker b registered again", WAIT, 2, e -> e.kind().equals("Registered"));
      assertEquals(List.of(ra.getInstanceId(), ra.getInstanceId()),
          recorderA.events("Registered").stream().map(Recorder.Event::text).toList());
      assertEquals(List.of(rb.getInstanceId(), rb.getInstanceId()),
          recorderB.events("Registered").stream().map(Recorder.Event::text).toList());
    }
  }

  /** A worker as in a container: pid 1, the suffix forced on, {@code token} as its random part. */
  private ShardcarWorker containerWorker(String token, Recorder listener) {
    return ShardcarWorker.builder()
        .target(sidecar.target())
        .pid(1)
        .instanceSuffix(ShardcarWorker.InstanceSuffix.ALWAYS)
        .instanceSuffixToken(token)
        .connectTimeout(Duration.ofSeconds(10))
        .reconnectBackoff(Duration.ofMillis(100), Duration.ofSeconds(1))
        .drainTimeout(Duration.ofSeconds(2))
        .listener(listener)
        .build();
  }

  @Test
  void subscribingToAnUnknownJobWithoutConfigFails() {
    assertThrows(JobNotFoundException.class, () -> worker.register("no-such-job", ctx -> { }));
  }

  @Test
  void closingARegistrationLetsTheRunningItemFinishAndAnswer() throws Exception {
    CountDownLatch started = new CountDownLatch(1);
    JobRegistration registration = worker.register(
        JobConfig.newBuilder("close-job", 1).cron(EVERY_SECOND).build(), ctx -> {
          started.countDown();
          Thread.sleep(300);
        });
    assertTrue(started.await(20, TimeUnit.SECONDS));
    registration.close();
    assertEquals(JobRegistration.State.CLOSED, registration.getState());
    Set<String> answered = recorder.events("Answered").stream().map(Recorder.Event::executionId)
        .collect(Collectors.toSet());
    assertFalse(answered.isEmpty(), "the running item answered before the stream closed: " + recorder.events());
    assertTrue(worker.getRegistrations().isEmpty());
  }

  private static void sleepBriefly() {
    io.shardcar.client.testing.Processes.sleep(1500);
  }
}
