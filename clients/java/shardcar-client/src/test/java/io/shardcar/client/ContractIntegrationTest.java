package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.shardcar.client.testing.Processes;
import io.shardcar.client.testing.Recorder;
import io.shardcar.client.testing.SidecarAdmin;
import io.shardcar.client.testing.SidecarProcess;
import io.shardcar.client.testing.WorkerMain;
import io.shardcar.client.testing.WorkerProcess;
import io.shardcar.v1.ExecutionInfo;
import io.shardcar.v1.ExecutionOutcome;
import io.shardcar.v1.ItemInfo;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The worker contract (rules 1, 2 and 5 of {@code shardcar.proto}) against a real sidecar. A
 * worker that must be frozen runs in a child JVM ({@link WorkerProcess}); every step waits for
 * the event it needs, with generous deadlines, and every process is killed even on failure.
 *
 * <p>(a) A worker frozen (SIGSTOP) past its lease in the middle of an item: its first
 * {@code isCancelled()} after the pause is true, the item is declined, never answered; frozen past
 * the keepalive timeout too, nothing sent before or during the freeze runs, and the item runs
 * again once it has subscribed again; a handler blocked in {@code Thread.sleep} or
 * {@code CountDownLatch.await} that never checks {@code isCancelled()} is interrupted before its
 * final write. (c) A trigger read behind a void lease is declined. (b) A drain (SIGTERM to the
 * sidecar) lets the running item finish and be answered; the worker then subscribes again until a
 * new sidecar listens on the same port, or stops with {@code stopOnDrain(true)}. (b') A remote
 * {@code ShutdownInstance} stops the worker for good while the sidecar runs on.
 */
@Tag("integration")
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class ContractIntegrationTest {
  private static final Duration WAIT = Duration.ofSeconds(30);
  private static final long LEASE_MS = 1_000;
  /** A 1 s lease, and a keepalive so long that a frozen worker keeps its stream: only the lease stops it. */
  private static final List<String> SHORT_LEASE =
      List.of("--lease", LEASE_MS + "ms", "--keepalive-timeout", "120s");
  /**
   * A 1 s lease, and keepalive pings every 500 ms that a worker must answer within 1 s: a frozen
   * worker loses its connection too.
   */
  private static final List<String> SHORT_LEASE_AND_KEEPALIVE =
      List.of("--lease", LEASE_MS + "ms", "--keepalive-interval", "500ms", "--keepalive-timeout", "1s");

  /**
   * (a) A worker JVM frozen (SIGSTOP) past its lease in the middle of an item, then resumed: the
   * handler's first {@code isCancelled()} after the pause already says cancelled, the item is
   * declined, and no answer is ever sent for it.
   */
  @Test
  void aWorkerFrozenPastItsLeaseSeesCancelledAtItsFirstCheckAndNeverAnswers() {
    long freezeMs = 3 * LEASE_MS;
    String job = "frozen-worker-job";
    try (SidecarProcess sidecar = SidecarProcess.start(SHORT_LEASE);
        SidecarAdmin admin = new SidecarAdmin(sidecar);
        WorkerProcess worker = WorkerProcess.start(sidecar.target(), job, "spin")) {
      String execution = triggerAndAwaitStart(admin, worker, job, Set.of());
      worker.await("a first check saying not cancelled", WAIT, l -> l.equals("CHECK_FALSE " + execution + " 0"));

      worker.pause();
      long frozenAt = System.nanoTime();
      try {
        Processes.sleep(freezeMs);
      } finally {
        worker.resume();
      }
      long frozenMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - frozenAt);

      String seen = worker.await("the handler seeing itself cancelled", WAIT,
          l -> l.startsWith("CANCELLED_SEEN " + execution + " 0 "));
      long sinceLastFalse = Long.parseLong(seen.replaceAll(".*sinceLastFalseMs=(\\d+).*", "$1"));
      // Every check before the pause said false, and the handler checks every 2 ms: had any check
      // after the pause said false, the last false one would be milliseconds old, not a pause old.
      assertTrue(sinceLastFalse >= freezeMs - 500,
          "the first check after a " + frozenMs + " ms pause said cancelled (" + seen + "); lines: " + worker.lines());

      worker.await("the stopped item declined", WAIT,
          l -> l.startsWith("DECLINED " + execution + " [0] refused=null reason=stopped: "));
      ExecutionInfo info = admin.awaitExecution(job, "the execution to end", WAIT,
          e -> e.getExecutionId().equals(execution));
      assertEquals(ExecutionOutcome.EXECUTION_OUTCOME_REVOKED, info.getOutcome(), info.toString());
      assertTrue(info.getError().contains("declined by the worker"), info.toString());

      Processes.sleep(1_000);
      System.out.println("frozen " + frozenMs + " ms; worker lines: " + worker.lines());
      assertTrue(worker.lines().stream().noneMatch(l -> l.startsWith("ANSWERED " + execution)),
          "no answer was sent for the item stopped by the lease: " + worker.lines());
    }
  }

  /**
   * (a') A worker JVM frozen (SIGSTOP) past its lease and past the sidecar's keepalive timeout,
   * with a trigger sent to it while frozen: the sidecar drops the connection and gives the
   * execution up. Resumed, the worker runs nothing it was sent before or during the freeze (the
   * renewals it may still read from its socket are void, the stream is gone), subscribes again,
   * and the item runs again on the new stream.
   */
  @Test
  void aWorkerFrozenPastItsLeaseAndTheKeepaliveRunsNoStaleWork() {
    long freezeMs = 5_000; // past the 1 s lease and the 1 s keepalive timeout (pings every 500 ms)
    String job = "stale-connection-job";
    try (SidecarProcess sidecar = SidecarProcess.start(SHORT_LEASE_AND_KEEPALIVE);
        SidecarAdmin admin = new SidecarAdmin(sidecar);
        WorkerProcess worker = WorkerProcess.start(sidecar.target(), job, "quick")) {
      String first = triggerAndAwaitStart(admin, worker, job, Set.of());
      worker.await("the first execution answered", WAIT,
          l -> l.equals("ANSWERED " + first + " 0 failure=null refused=null"));

      int mark = worker.lines().size();
      List<String> asked;
      worker.pause();
      try {
        // Sent at once, while the sidecar still holds the connection: it waits in the socket.
        asked = admin.trigger(job);
        Processes.sleep(freezeMs); // the fault itself
      } finally {
        worker.resume();
      }
      assertEquals(List.of(worker.instanceId()), asked, "the frozen worker was triggered");

      // The sidecar gave up the execution it sent to the frozen worker (the worker left).
      ExecutionInfo stale = admin.awaitExecution(job, "the execution sent while frozen to end", WAIT,
          e -> !e.getExecutionId().equals(first));
      String staleId = stale.getExecutionId();
      assertEquals(ExecutionOutcome.EXECUTION_OUTCOME_REVOKED, stale.getOutcome(), stale.toString());

      // Resumed: the stream is lost, the worker subscribes again.
      int lost = worker.awaitIndex("the lost stream", WAIT, mark, l -> l.startsWith("DISCONNECTED "));
      int registered = worker.awaitIndex("a new subscription", WAIT, lost,
          l -> l.equals("REGISTERED " + worker.instanceId()));

      // The item runs again, on the new stream, and is answered.
      String next = triggerAndAwaitStart(admin, worker, job, Set.of(first, staleId));
      worker.await("the item run again answered", WAIT,
          l -> l.equals("ANSWERED " + next + " 0 failure=null refused=null"));
      ExecutionInfo again = admin.awaitExecution(job, "the new execution to end", WAIT,
          e -> e.getExecutionId().equals(next));
      assertEquals(ExecutionOutcome.EXECUTION_OUTCOME_COMPLETED, again.getOutcome(), again.toString());

      List<String> lines = worker.lines();
      System.out.println("frozen " + freezeMs + " ms; worker lines: " + lines);
      for (int i = mark; i < lines.size(); i++) {
        String line = lines.get(i);
        if (line.startsWith("STARTED ") || line.startsWith("ANSWERED ")) {
          assertTrue(i > registered && line.split(" ")[1].equals(next),
              "only the execution triggered on the new stream ran and was answered, not \"" + line + "\": " + lines);
        }
      }
      assertTrue(lines.stream().noneMatch(l -> l.contains(" " + staleId + " ") && (l.startsWith("STARTED ")
          || l.startsWith("ANSWERED "))), "the execution sent while frozen never ran: " + lines);
    }
  }

  /**
   * (a'') A handler that relies on thread interruption (it blocks in {@code Thread.sleep} or
   * {@code CountDownLatch.await} and never asks {@code isCancelled()}), in a worker JVM frozen past
   * its lease in the middle of the item: once resumed it is interrupted before its final write,
   * it sees itself cancelled, and although it then returns normally its item is declined, never
   * answered.
   */
  @ParameterizedTest(name = "blocked in {0}")
  @ValueSource(strings = {"sleep", "await"})
  void aBlockedHandlerFrozenPastItsLeaseIsInterruptedBeforeItsFinalWriteAndNeverAnswered(String mode) {
    long freezeMs = 3 * LEASE_MS;
    String job = "frozen-" + mode + "-job";
    try (SidecarProcess sidecar = SidecarProcess.start(SHORT_LEASE);
        SidecarAdmin admin = new SidecarAdmin(sidecar);
        WorkerProcess worker = WorkerProcess.start(sidecar.target(), job, mode)) {
      String execution = triggerAndAwaitStart(admin, worker, job, Set.of());
      String item = execution + " 0";
      worker.await("the handler blocking", WAIT, l -> l.equals("BLOCKING " + item));

      int mark = worker.lines().size();
      worker.pause();
      try {
        Processes.sleep(freezeMs); // the fault itself
      } finally {
        worker.resume();
      }
      // This run's item only: under CPU load an earlier trigger can meet a lapsed 1 s lease and be
      // cancelled and declined before it starts (triggerAndAwaitStart then triggers again).
      assertTrue(worker.lines().subList(0, mark).stream()
              .noneMatch(l -> l.startsWith("CANCELLED " + item + " ") || l.startsWith("INTERRUPTED " + item + " ")),
          "the item ran undisturbed until the freeze: " + worker.lines());

      // Blocked for minutes otherwise: only the lapse's interrupt ends the block this soon.
      String interrupted = worker.await("the handler interrupted", WAIT, l -> l.startsWith("INTERRUPTED " + item + " "));
      assertEquals("INTERRUPTED " + item + " cancelled=true", interrupted);
      String cancelled = worker.await("the item cancelled", WAIT, l -> l.startsWith("CANCELLED " + item + " "));
      assertTrue(cancelled.contains("lease"), "cancelled by the lease: " + cancelled);
      worker.await("the stopped item declined", WAIT,
          l -> l.startsWith("DECLINED " + execution + " [0] refused=null reason=stopped: "));
      ExecutionInfo info = admin.awaitExecution(job, "the execution to end", WAIT,
          e -> e.getExecutionId().equals(execution));
      assertEquals(ExecutionOutcome.EXECUTION_OUTCOME_REVOKED, info.getOutcome(), info.toString());
      assertTrue(info.getError().contains("declined by the worker"), info.toString());

      // The worker works again (a fresh lease); by then the stopped item's fate is long settled.
      String next = triggerAndAwaitStart(admin, worker, job, Set.of(execution));
      worker.await("a later execution answered", WAIT, l -> l.equals("ANSWERED " + next + " 0 failure=null refused=null"));
      List<String> lines = worker.lines();
      System.out.println(mode + ": frozen " + freezeMs + " ms; worker lines: " + lines);
      assertTrue(lines.stream().noneMatch(l -> l.startsWith("FINAL_WRITE ")), "no final write: " + lines);
      assertTrue(lines.stream().noneMatch(l -> l.startsWith("ANSWERED " + execution + " ")),
          "no answer for the interrupted item: " + lines);
    }
  }

  /**
   * (c) A trigger that reaches the worker without a valid lease is declined at once, never run:
   * the worker is frozen while the sidecar sends a lease and a trigger, and resumed after that
   * lease's {@code expires_at}, so it reads the lease as void and then the trigger.
   *
   * <p>The decline checked must be that of the trigger sent during the freeze. Under CPU load the
   * test once took another one for it: {@link #triggerAndAwaitStart} used to repeat its
   * {@code TriggerJob} after 5 s without a start; the sidecar held that second request while the
   * first execution ran and sent it the moment that one was answered, just before the freeze. The
   * worker read it under a valid lease and started it, the freeze outlasted that lease, and the
   * worker rightly declined it with "stopped: the lease ran out without renewal". And it failed
   * so once more with that fixed, on the trigger sent during the freeze: {@code kill -STOP} returns
   * before every thread of a JVM has stopped, and the worker's network thread read the trigger
   * under its lease milliseconds after the "freeze" began. Now each execution comes from one
   * {@code TriggerJob}, {@link WorkerProcess#pause()} returns only once every thread has stopped,
   * the freeze is counted from the sidecar's claim of the run (its running node, written just
   * before the trigger is sent), and the sidecar's record of the declined execution must show its
   * trigger sent during the freeze and more than a lease before the resume.
   */
  @Test
  void aTriggerReadWithoutAValidLeaseIsDeclinedNotRun() {
    String job = "no-lease-trigger-job";
    try (SidecarProcess sidecar = SidecarProcess.start(SHORT_LEASE);
        SidecarAdmin admin = new SidecarAdmin(sidecar);
        WorkerProcess worker = WorkerProcess.start(sidecar.target(), job, "quick")) {
      // Under a valid lease the item runs and is answered.
      String first = triggerAndAwaitStart(admin, worker, job, Set.of());
      worker.await("the first execution answered", WAIT,
          l -> l.equals("ANSWERED " + first + " 0 failure=null refused=null"));

      List<String> asked;
      long resumedAtMillis;
      worker.pause();
      long pausedAtMillis = System.currentTimeMillis();
      try {
        asked = admin.trigger(job);
        awaitRunning(admin, job, worker.instanceId());
        // The trigger and every lease sent before it wait in the socket; resume after they expired.
        Processes.sleep(LEASE_MS * 5 / 2);
      } finally {
        resumedAtMillis = System.currentTimeMillis();
        worker.resume();
      }
      assertEquals(List.of(worker.instanceId()), asked, "the frozen worker was triggered");

      String declined = worker.await("the trigger declined", WAIT,
          l -> l.startsWith("DECLINED ") && !l.startsWith("DECLINED " + first + " "));
      String execution = declined.split(" ")[1];
      ExecutionInfo info = admin.awaitExecution(job, "the declined execution to end", WAIT,
          e -> e.getExecutionId().equals(execution));
      long sentAtMillis = info.getEventsList().stream()
          .filter(e -> e.getName().equals("trigger sent"))
          .mapToLong(e -> e.getAt().getSeconds() * 1000 + e.getAt().getNanos() / 1_000_000)
          .findFirst().orElseThrow(() -> new AssertionError("no trigger sent in " + info));
      assertTrue(sentAtMillis >= pausedAtMillis && sentAtMillis + LEASE_MS < resumedAtMillis, "the premise: the "
          + "trigger was sent to the frozen worker, and every lease sent before it had expired when the worker "
          + "resumed (paused at " + pausedAtMillis + ", trigger sent at " + sentAtMillis + ", resumed at "
          + resumedAtMillis + ")");
      assertTrue(declined.endsWith(" [0] refused=null reason=the trigger arrived without a valid lease"), declined);
      assertEquals(ExecutionOutcome.EXECUTION_OUTCOME_REVOKED, info.getOutcome(), info.toString());

      // Once a renewal arrives the worker works again.
      String next = triggerAndAwaitStart(admin, worker, job, Set.of(first, execution));
      worker.await("a later execution answered", WAIT, l -> l.equals("ANSWERED " + next + " 0 failure=null refused=null"));
      System.out.println("worker lines: " + worker.lines());
      assertTrue(worker.lines().stream().noneMatch(l -> l.startsWith("STARTED " + execution + " ")),
          "the trigger without a lease never ran: " + worker.lines());
      assertTrue(worker.lines().stream().noneMatch(l -> l.startsWith("ANSWERED " + execution + " ")),
          "nor was it answered: " + worker.lines());
    }
  }

  /**
   * Waits until the sidecar has claimed a run of item 0 for {@code instanceId} (its running node
   * is written), which it does just before it sends the trigger.
   */
  private static void awaitRunning(SidecarAdmin admin, String job, String instanceId) {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (true) {
      ItemInfo item = admin.items(job).get(0);
      if (item != null && item.getRunning() && item.getRunningInstance().equals(instanceId)) {
        return;
      }
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("the sidecar never claimed item 0 for " + instanceId + ": " + item);
      }
      Processes.sleep(10);
    }
  }

  /**
   * (b) Drain: SIGTERM to the sidecar (a restart, an upgrade) while an item runs. The worker gets
   * {@code Shutdown}, the item finishes and its answer is accepted, the sidecar ends the stream
   * and exits. By default the worker outlives it: the registration subscribes again with the
   * reconnect backoff (refused while nothing listens), and once a new sidecar process listens on
   * the same port it registers there and runs the job's triggers. With {@code stopOnDrain(true)}
   * it stops instead: the registration closes and {@code awaitTermination()} returns.
   */
  @ParameterizedTest(name = "stopOnDrain={0}")
  @ValueSource(booleans = {false, true})
  void aDrainLetsTheRunningItemFinishAndBeAnsweredThenTheWorkerSubscribesAgain(boolean stopOnDrain) throws Exception {
    String job = "drain-job";
    Recorder recorder = new Recorder();
    CountDownLatch started = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    AtomicReference<String> execution = new AtomicReference<>();
    AtomicBoolean cancelledAtEnd = new AtomicBoolean(true);
    try (SidecarProcess sidecar = SidecarProcess.startStandalone();
        SidecarAdmin admin = new SidecarAdmin(sidecar);
        ShardcarWorker worker = ShardcarWorker.builder()
            .target(sidecar.target())
            .connectTimeout(Duration.ofSeconds(10))
            .reconnectBackoff(Duration.ofMillis(100), Duration.ofSeconds(1))
            .stopOnDrain(stopOnDrain)
            .listener(recorder)
            .build()) {
      JobRegistration registration = worker.register(
          JobConfig.newBuilder(job, 1).cron(WorkerMain.NEVER).build(),
          ctx -> {
            if (execution.compareAndSet(null, ctx.getExecutionId())) {
              started.countDown();
              assertTrue(release.await(60, TimeUnit.SECONDS));
              cancelledAtEnd.set(ctx.isCancelled());
            }
          });
      long deadline = System.nanoTime() + WAIT.toNanos();
      while (started.getCount() > 0 && System.nanoTime() - deadline < 0) {
        admin.trigger(job);
        started.await(5, TimeUnit.SECONDS);
      }
      assertEquals(0, started.getCount(), "the item started; recorded: " + recorder.events());

      Processes.signal(sidecar.process(), "TERM");
      recorder.await("the sidecar's Shutdown", WAIT, e -> e.kind().equals("Shutdown"));
      assertEquals(JobRegistration.State.ACTIVE, registration.getState(), "the stream stays open while the item runs");
      release.countDown();

      Recorder.Event answered = recorder.await("the running item answered", WAIT,
          e -> e.kind().equals("Answered") && e.executionId().equals(execution.get()));
      assertNull(answered.error(), "the sidecar accepted the answer during its drain: " + answered);
      assertNull(answered.text(), "it completed");
      assertFalse(cancelledAtEnd.get(), "the item was not cancelled by the drain");
      assertTrue(sidecar.process().waitFor(30, TimeUnit.SECONDS), "the sidecar exited after its drain");
      assertTrue(recorder.events("Cancelled").isEmpty(), "nothing cancelled: " + recorder.events());

      if (stopOnDrain) {
        assertTrue(registration.awaitClosed(WAIT), "the registration stopped once the sidecar ended the stream");
        assertEquals(JobRegistration.State.CLOSED, registration.getState());
        assertTrue(worker.awaitTermination(WAIT), "the worker stopped");
        assertTrue(worker.getRegistrations().isEmpty());
        assertTrue(recorder.events("Disconnected").isEmpty(), "no reconnect: " + recorder.events());
        assertEquals(1, recorder.events("Registered").size(), "subscribed once: " + recorder.events());
        return;
      }

      // The drained stream's end, then a subscription refused while no sidecar listens: both
      // followed by a new subscription after the backoff.
      recorder.await("a subscription refused after the drain, and tried again", WAIT, 2,
          e -> e.kind().equals("Disconnected"));
      assertNotEquals(JobRegistration.State.CLOSED, registration.getState());
      sidecar.startAgain();
      recorder.await("the worker registered with the new sidecar", WAIT, 2, e -> e.kind().equals("Registered"));
      try (SidecarAdmin again = new SidecarAdmin(sidecar)) {
        String first = execution.get();
        long until = System.nanoTime() + WAIT.toNanos();
        while (true) {
          again.trigger(job);
          try {
            recorder.await("an execution of the new sidecar answered", Duration.ofSeconds(5),
                e -> e.kind().equals("Answered") && !e.executionId().equals(first));
            break;
          } catch (AssertionError e) {
            if (System.nanoTime() - until > 0) {
              throw e;
            }
            // not sharded yet on the new sidecar: trigger again
          }
        }
      }
      assertEquals(JobRegistration.State.ACTIVE, registration.getState());
      assertEquals(List.of(registration), worker.getRegistrations());
      assertFalse(worker.awaitTermination(Duration.ZERO), "the worker outlived the drain");
    }
  }

  /**
   * (b') Remote shutdown ({@code AdminService.ShutdownInstance}) while an item runs: the worker
   * gets {@code Shutdown} and starts no new work, and it stops for good (an operator's decision,
   * unlike a drain, and whatever {@code stopOnDrain} says): the registration closes without
   * reconnecting and {@code awaitTermination()} returns, while the sidecar keeps running. Unlike a drain, the sidecar takes the removed instance's running execution back, so
   * the item ends by the contract in one of several ways (revoked and never answered, or its
   * answer refused as {@code FAILED_PRECONDITION}), all checked.
   */
  @Test
  void aRemoteShutdownInstanceStopsTheWorkerOnceTheRunningItemHasEnded() throws Exception {
    String job = "remote-shutdown-job";
    Recorder recorder = new Recorder();
    CountDownLatch started = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    AtomicReference<String> execution = new AtomicReference<>();
    AtomicInteger runs = new AtomicInteger();
    AtomicInteger heldItem = new AtomicInteger(-1);
    AtomicBoolean cancelledAtEnd = new AtomicBoolean(true);
    try (SidecarProcess sidecar = SidecarProcess.startStandalone();
        SidecarAdmin admin = new SidecarAdmin(sidecar);
        ShardcarWorker worker = ShardcarWorker.builder()
            .target(sidecar.target())
            .connectTimeout(Duration.ofSeconds(10))
            .reconnectBackoff(Duration.ofMillis(100), Duration.ofSeconds(1))
            .listener(recorder)
            .build()) {
      JobRegistration registration = worker.register(
          JobConfig.newBuilder(job, 2).cron(WorkerMain.NEVER).build(),
          ctx -> {
            runs.incrementAndGet();
            if (execution.compareAndSet(null, ctx.getExecutionId())) {
              heldItem.set(ctx.getShardingItem());
              started.countDown();
              assertTrue(release.await(60, TimeUnit.SECONDS));
              cancelledAtEnd.set(ctx.isCancelled());
            }
          });
      long deadline = System.nanoTime() + WAIT.toNanos();
      while (started.getCount() > 0 && System.nanoTime() - deadline < 0) {
        admin.trigger(job);
        started.await(5, TimeUnit.SECONDS);
      }
      assertEquals(0, started.getCount(), "the item started; recorded: " + recorder.events());
      // The other item of the execution returns at once; only the first one is held.
      recorder.await("the other item answered", WAIT,
          e -> e.kind().equals("Answered") && e.executionId().equals(execution.get()) && e.item() != heldItem.get());
      int runsBefore = runs.get();

      assertEquals(List.of(job), admin.shutdownInstance(job, registration.getInstanceId()));
      recorder.await("the sidecar's Shutdown", WAIT, e -> e.kind().equals("Shutdown"));
      // No new work after the Shutdown: a trigger now is not run. The sidecar refuses it (the
      // instance is no longer live: FAILED_PRECONDITION), or the worker would decline it.
      try {
        admin.trigger(job);
      } catch (StatusRuntimeException e) {
        assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatus().getCode(), e.toString());
      }
      release.countDown();

      assertTrue(registration.awaitClosed(WAIT), "the registration stopped once the sidecar ended the stream");
      assertEquals(JobRegistration.State.CLOSED, registration.getState());
      assertTrue(worker.awaitTermination(WAIT), "the worker stopped by default; recorded: " + recorder.events());
      assertTrue(worker.getRegistrations().isEmpty());
      assertEquals(runsBefore, runs.get(), "nothing started after the Shutdown; recorded: " + recorder.events());
      assertTrue(recorder.events("Disconnected").isEmpty(), "no reconnect: " + recorder.events());
      assertEquals(1, recorder.events("Registered").size(), "subscribed once: " + recorder.events());
      List<Recorder.Event> answers = recorder.events("Answered").stream()
          .filter(e -> e.executionId().equals(execution.get()) && e.item() == heldItem.get()).toList();
      boolean revoked = recorder.events("Cancelled").stream()
          .anyMatch(e -> e.executionId().equals(execution.get()) && e.item() == heldItem.get());
      // This sidecar takes the removed instance's executions back: the running item is revoked
      // (stopped, never answered), or its answer, sent while the stream was open, is refused as
      // FAILED_PRECONDITION; either way it is answered at most once, never after a cancel.
      assertTrue(answers.size() <= 1, "answered at most once: " + recorder.events());
      if (revoked) {
        assertTrue(answers.isEmpty(), "a revoked item is never answered: " + recorder.events());
      } else if (!answers.isEmpty()) {
        Recorder.Event answer = answers.get(0);
        assertNull(answer.text(), "it completed: " + answer);
        assertFalse(cancelledAtEnd.get(), "an answered item was not cancelled");
        if (answer.error() != null) {
          assertEquals(ErrorReasons.FAILED_PRECONDITION, answer.error().getReason().orElse(null), answer.toString());
        }
      }
      assertTrue(sidecar.process().isAlive(), "a remote shutdown stops the worker, not the sidecar");
    }
  }

  /**
   * Triggers the job by hand once the worker holds item 0, and waits until a new execution starts
   * on the worker; returns its id. One {@code TriggerJob} per execution: a second request made
   * while the first one's execution runs is held and sent the moment that execution is answered,
   * a stray execution that a test freezing the worker right after the answer would take for the
   * one it sends during the freeze. It triggers again only when a request ran nothing: the worker
   * was not among the instances asked, or it declined the trigger.
   */
  private static String triggerAndAwaitStart(SidecarAdmin admin, WorkerProcess worker, String job, Set<String> known) {
    long deadline = System.nanoTime() + WAIT.toNanos();
    Set<String> seen = new java.util.HashSet<>(known);
    while (true) {
      awaitItemZero(worker, deadline);
      int from = worker.lines().size();
      if (admin.trigger(job).contains(worker.instanceId())) {
        int at = worker.awaitIndex("a new execution started", Duration.ofNanos(Math.max(1, deadline - System.nanoTime())),
            from, l -> (l.startsWith("STARTED ") || l.startsWith("DECLINED ")) && !seen.contains(l.split(" ")[1]));
        String line = worker.lines().get(at);
        if (line.startsWith("STARTED ")) {
          return line.split(" ")[1];
        }
        seen.add(line.split(" ")[1]); // declined: it ran nothing
      } else {
        Processes.sleep(100); // the worker's instance is not live yet
      }
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("no execution started on the worker within " + WAIT + ": " + worker.lines());
      }
    }
  }

  /** Waits until the latest assignment of the worker's current stream holds item 0. */
  private static void awaitItemZero(WorkerProcess worker, long deadline) {
    while (true) {
      List<String> lines = worker.lines();
      String assignment = null;
      for (String line : lines) {
        if (line.startsWith("REGISTERED ")) {
          assignment = null; // a new stream: its own assignments follow
        } else if (line.startsWith("ASSIGNMENT ")) {
          assignment = line;
        }
      }
      if ("ASSIGNMENT [0]".equals(assignment)) {
        return;
      }
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("item 0 never assigned to the worker: " + lines);
      }
      Processes.sleep(20);
    }
  }
}
