package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.client.testing.Processes;
import io.shardcar.client.testing.Recorder;
import io.shardcar.client.testing.SidecarAdmin;
import io.shardcar.client.testing.SidecarProcess;
import io.shardcar.client.testing.WorkerMain;
import io.shardcar.v1.ExecutionInfo;
import io.shardcar.v1.ExecutionOutcome;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import java.util.function.Function;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Dataflow jobs ({@link DataflowHandler}) against a real standalone sidecar: ElasticJob's one-off
 * and streaming loops, failures, and every way a streaming loop must stop before its next fetch:
 * one-off, an empty fetch, streaming until a fetch returns nothing (explicit, and a stored
 * {@code streaming.process} read back when subscribing by name), a throwing fetch or process
 * reported failed, data fetched after a revoke not processed; a loop that streams until its stop
 * condition holds ends without another fetch on a revoke (execution timeout), on a lease lost with
 * the sidecar frozen, and on a sidecar drain (answered, and the worker subscribes again); on a
 * resharding (a second instance, {@code DisableJob}) only the items taken away stop.
 * Triggers come from {@code AdminService.TriggerJob} (the jobs' cron never fires); every wait has
 * a deadline and every process is killed, even on failure.
 */
@Tag("integration")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class DataflowIntegrationTest {
  private static final Duration WAIT = Duration.ofSeconds(30);

  /**
   * Records every fetch and process per {@code execution/item}; a fetch answers with {@code batches}
   * of the item (then nothing), a process runs {@code onProcess} after recording.
   */
  static final class Flow implements DataflowHandler<String> {
    final Map<String, AtomicInteger> fetches = new ConcurrentHashMap<>();
    final Map<String, List<List<String>>> processed = new ConcurrentHashMap<>();
    final Map<Integer, Deque<List<String>>> batches = new ConcurrentHashMap<>();
    final List<String> executions = new CopyOnWriteArrayList<>();
    final Function<ShardingContext, List<String>> source;
    volatile ProcessHook onProcess = (ctx, data) -> {};

    interface ProcessHook {
      void run(ShardingContext ctx, List<String> data) throws Exception;
    }

    /** Fetches hand out the batches given per item, then nothing. */
    Flow() {
      this.source = null;
    }

    /** Fetches call {@code source}. */
    Flow(Function<ShardingContext, List<String>> source) {
      this.source = source;
    }

    Flow batches(int item, List<List<String>> perFetch) {
      batches.put(item, new ArrayDeque<>(perFetch));
      return this;
    }

    static String key(ShardingContext ctx) {
      return ctx.getExecutionId() + "/" + ctx.getShardingItem();
    }

    @Override
    public List<String> fetch(ShardingContext ctx) {
      if (!executions.contains(ctx.getExecutionId())) {
        executions.add(ctx.getExecutionId());
      }
      fetches.computeIfAbsent(key(ctx), k -> new AtomicInteger()).incrementAndGet();
      if (source != null) {
        return source.apply(ctx);
      }
      Deque<List<String>> queue = batches.get(ctx.getShardingItem());
      synchronized (this) {
        return queue == null || queue.isEmpty() ? List.of() : queue.poll();
      }
    }

    @Override
    public void process(ShardingContext ctx, List<String> data) throws Exception {
      processed.computeIfAbsent(key(ctx), k -> new CopyOnWriteArrayList<>()).add(List.copyOf(data));
      onProcess.run(ctx, data);
    }

    int fetchCount(String execution, int item) {
      AtomicInteger n = fetches.get(execution + "/" + item);
      return n == null ? 0 : n.get();
    }

    List<List<String>> processed(String execution, int item) {
      return processed.getOrDefault(execution + "/" + item, List.of());
    }
  }

  /** A sidecar, an admin client and a worker, all closed at the end. */
  private static final class Rig implements AutoCloseable {
    final SidecarProcess sidecar;
    final SidecarAdmin admin;
    final Recorder recorder = new Recorder();
    final ShardcarWorker worker;

    Rig(List<String> sidecarArgs) {
      sidecar = SidecarProcess.start(sidecarArgs);
      SidecarAdmin a = null;
      ShardcarWorker w = null;
      try {
        a = new SidecarAdmin(sidecar);
        w = worker("worker-a", recorder);
      } catch (RuntimeException e) {
        if (a != null) {
          a.close();
        }
        sidecar.close();
        throw e;
      }
      admin = a;
      worker = w;
    }

    ShardcarWorker worker(String instanceId, Recorder listener) {
      return ShardcarWorker.builder()
          .target(sidecar.target())
          .instanceId(instanceId)
          .connectTimeout(Duration.ofSeconds(10))
          .reconnectBackoff(Duration.ofMillis(100), Duration.ofSeconds(1))
          .drainTimeout(Duration.ofSeconds(2))
          .listener(listener)
          .build();
    }

    /** Triggers the job until {@code flow} sees an execution it had not seen; returns its id. */
    String triggerNewExecution(String job, Flow flow) {
      Set<String> known = Set.copyOf(flow.executions);
      long deadline = System.nanoTime() + WAIT.toNanos();
      while (true) {
        admin.trigger(job);
        long retryAt = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (System.nanoTime() - retryAt < 0) {
          for (String e : flow.executions) {
            if (!known.contains(e)) {
              return e;
            }
          }
          Processes.sleep(20);
        }
        if (System.nanoTime() - deadline > 0) {
          throw new AssertionError("no execution of " + job + " started; recorded: " + recorder.events());
        }
        // not sharded yet: trigger again
      }
    }

    /** Waits until every item of {@code execution} was answered (the sidecar ruled) and returns those events. */
    List<Recorder.Event> awaitAnswered(String execution, int items) {
      return recorder.await("the " + items + " item(s) of " + execution + " answered", WAIT, items,
          e -> e.kind().equals("Answered") && execution.equals(e.executionId()));
    }

    @Override
    public void close() {
      try {
        worker.close();
      } finally {
        try {
          admin.close();
        } finally {
          sidecar.close();
        }
      }
    }
  }

  private static JobConfig.Builder job(String name, int items) {
    return JobConfig.newBuilder(name, items).cron(WorkerMain.NEVER).overwrite(true);
  }

  @Test
  void oneOffFetchesOnceAndProcessesWhatItGot() {
    Flow flow = new Flow()
        .batches(0, List.of(List.of("a", "b"), List.of("not fetched: one-off")))
        .batches(1, List.of(List.of("c"), List.of("not fetched: one-off")));
    try (Rig rig = new Rig(List.of())) {
      JobRegistration registration = rig.worker.register(job("df-one-off", 2).build(), flow);
      assertFalse(registration.getEffectiveConfig().isStreamingProcess());
      String execution = rig.triggerNewExecution("df-one-off", flow);
      for (Recorder.Event e : rig.awaitAnswered(execution, 2)) {
        assertNull(e.text(), "completed: " + e);
        assertNull(e.error(), "the sidecar accepted the completion: " + e);
      }
      assertEquals(1, flow.fetchCount(execution, 0));
      assertEquals(1, flow.fetchCount(execution, 1));
      assertEquals(List.of(List.of("a", "b")), flow.processed(execution, 0));
      assertEquals(List.of(List.of("c")), flow.processed(execution, 1));
    }
  }

  @Test
  void anEmptyOrNullFetchCompletesWithoutProcessing() {
    Flow flow = new Flow(ctx -> ctx.getShardingItem() == 0 ? List.of() : null);
    try (Rig rig = new Rig(List.of())) {
      rig.worker.register(job("df-empty", 2).build(), flow);
      String execution = rig.triggerNewExecution("df-empty", flow);
      for (Recorder.Event e : rig.awaitAnswered(execution, 2)) {
        assertNull(e.text(), "completed: " + e);
        assertNull(e.error(), e.toString());
      }
      assertEquals(1, flow.fetchCount(execution, 0));
      assertEquals(1, flow.fetchCount(execution, 1));
      assertTrue(flow.processed.isEmpty(), "nothing processed: " + flow.processed);
    }
  }

  @Test
  void streamingFetchesAndProcessesUntilAFetchReturnsNothing() {
    Flow flow = new Flow()
        .batches(0, List.of(List.of("a", "b"), List.of("c"), List.of(), List.of("never fetched")))
        .batches(1, List.of(List.of("d"), List.of()));
    try (Rig rig = new Rig(List.of())) {
      // The explicit option writes streaming.process, and the sidecar stores it.
      JobRegistration registration = rig.worker.register(job("df-streaming", 2).build(), flow, true);
      assertEquals("true", registration.getEffectiveConfig().getProps().get(JobConfig.STREAMING_PROCESS));
      String execution = rig.triggerNewExecution("df-streaming", flow);
      for (Recorder.Event e : rig.awaitAnswered(execution, 2)) {
        assertNull(e.text(), "completed: " + e);
        assertNull(e.error(), e.toString());
      }
      assertEquals(3, flow.fetchCount(execution, 0), "fetched until a fetch returned nothing");
      assertEquals(List.of(List.of("a", "b"), List.of("c")), flow.processed(execution, 0));
      assertEquals(2, flow.fetchCount(execution, 1));
      assertEquals(List.of(List.of("d")), flow.processed(execution, 1));
    }
  }

  @Test
  void aStoredStreamingPropertyIsHonouredWhenSubscribingByName() throws Exception {
    Flow flow = new Flow().batches(0, List.of(List.of("a"), List.of("b"), List.of()));
    try (Rig rig = new Rig(List.of())) {
      // Creates the job with the property (as ElasticJob's own JobConfiguration would), then leaves.
      JobRegistration creator = rig.worker.register(
          job("df-stored", 1).prop(JobConfig.STREAMING_PROCESS, "true").build(), new Flow());
      creator.close();
      try (ShardcarWorker reader = rig.worker("worker-b", rig.recorder)) {
        JobRegistration registration = reader.register("df-stored", flow);
        assertTrue(registration.getEffectiveConfig().isStreamingProcess(), registration.getEffectiveConfig().toString());
        String execution = rig.triggerNewExecution("df-stored", flow);
        assertNull(rig.awaitAnswered(execution, 1).get(0).text());
        assertEquals(3, flow.fetchCount(execution, 0), "streamed: " + flow.processed);
        assertEquals(List.of(List.of("a"), List.of("b")), flow.processed(execution, 0));
      }
    }
  }

  @Test
  void aThrowingFetchOrProcessIsReportedFailed() {
    Flow flow = new Flow(ctx -> {
      if (ctx.getShardingItem() == 0) {
        throw new IllegalStateException("source down");
      }
      return List.of("x");
    });
    flow.onProcess = (ctx, data) -> {
      throw new IllegalArgumentException("cannot process " + data);
    };
    try (Rig rig = new Rig(List.of())) {
      rig.worker.register(job("df-failing", 2).streamingProcess(true).build(), flow);
      String execution = rig.triggerNewExecution("df-failing", flow);
      Map<Integer, Recorder.Event> answers = new ConcurrentHashMap<>();
      rig.awaitAnswered(execution, 2).forEach(e -> answers.put(e.item(), e));
      assertEquals("java.lang.IllegalStateException: source down", answers.get(0).text());
      assertEquals("java.lang.IllegalArgumentException: cannot process [x]", answers.get(1).text());
      answers.values().forEach(e -> assertNull(e.error(), "the sidecar accepted the failure report: " + e));
      assertEquals(1, flow.fetchCount(execution, 1), "the loop ended with the exception");
      ExecutionInfo info = rig.admin.awaitExecution("df-failing", "the failed execution", WAIT,
          e -> e.getExecutionId().equals(execution));
      assertEquals(ExecutionOutcome.EXECUTION_OUTCOME_FAILED, info.getOutcome(), info.toString());
    }
  }

  /** Blocks a process call until {@code condition} holds; fails the item if it never does. */
  private static void awaitInHandler(String what, BooleanSupplier condition) {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("the handler waited in vain for " + what);
      }
      // Not Thread.sleep: an interrupt must not end the process call, the loop's own check must.
      java.util.concurrent.locks.LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(5));
    }
  }

  @Test
  void aRevokeStopsTheStreamingLoopBeforeItsNextFetch() {
    Flow flow = new Flow(ctx -> List.of("endless"));
    flow.onProcess = (ctx, data) -> awaitInHandler("the revoke", ctx::isCancelled);
    try (Rig rig = new Rig(List.of())) {
      // An item still running after executionTimeoutSeconds is taken back with a Revoke.
      rig.worker.register(job("df-revoke", 1).streamingProcess(true).executionTimeoutSeconds(1).build(), flow);
      String execution = rig.triggerNewExecution("df-revoke", flow);
      Recorder.Event cancelled = rig.recorder.await("the revoke", WAIT,
          e -> e.kind().equals("Cancelled") && execution.equals(e.executionId()));
      assertTrue(cancelled.text().startsWith("revoked: "), cancelled.toString());
      // Declined once the handler returned: the loop has ended by then.
      Recorder.Event declined = rig.recorder.await("the item given back", WAIT,
          e -> e.kind().equals("Declined") && execution.equals(e.executionId()));
      assertTrue(declined.text().contains("revoked"), declined.toString());
      assertEquals(1, flow.fetchCount(execution, 0), "no fetch after the revoke");
      assertEquals(1, flow.processed(execution, 0).size());
      assertTrue(rig.recorder.events("Answered").stream().noneMatch(e -> execution.equals(e.executionId())),
          "a revoked item is never answered: " + rig.recorder.events());
    }
  }

  @Test
  void dataFetchedAfterARevokeIsNotProcessedAndTheItemIsDeclined() {
    Flow flow = new Flow(ctx -> {
      awaitInHandler("the revoke", ctx::isCancelled);
      return List.of("fetched after the revoke");
    });
    try (Rig rig = new Rig(List.of())) {
      rig.worker.register(job("df-late-data", 1).executionTimeoutSeconds(1).build(), flow);
      String execution = rig.triggerNewExecution("df-late-data", flow);
      Recorder.Event declined = rig.recorder.await("the item given back", WAIT,
          e -> e.kind().equals("Declined") && execution.equals(e.executionId()));
      assertTrue(declined.text().contains("revoked"), declined.toString());
      assertEquals(1, flow.fetchCount(execution, 0));
      assertTrue(flow.processed.isEmpty(), "nothing processed: " + flow.processed);
      assertTrue(rig.recorder.events("Answered").stream().noneMatch(e -> execution.equals(e.executionId())),
          "a revoked item is never answered: " + rig.recorder.events());
    }
  }

  @Test
  void aLostLeaseStopsTheStreamingLoopBeforeItsNextFetch() {
    CountDownLatch processing = new CountDownLatch(1);
    Flow flow = new Flow(ctx -> List.of("endless"));
    flow.onProcess = (ctx, data) -> {
      processing.countDown();
      awaitInHandler("the lease to run out", ctx::isCancelled);
    };
    // A 1 s lease; a keepalive so long that the frozen sidecar keeps the stream: only the lease stops the item.
    try (Rig rig = new Rig(List.of("--lease", "1000ms", "--keepalive-timeout", "120s"))) {
      rig.worker.register(job("df-lease", 1).streamingProcess(true).build(), flow);
      String execution = rig.triggerNewExecution("df-lease", flow);
      awaitLatch(processing);
      rig.sidecar.pause();
      try {
        Recorder.Event cancelled = rig.recorder.await("the lease to run out", WAIT,
            e -> e.kind().equals("Cancelled") && execution.equals(e.executionId()));
        assertTrue(cancelled.text().contains("lease"), cancelled.toString());
      } finally {
        rig.sidecar.resume();
      }
      // Declined (or, had the stream ended meanwhile, dropped) once the handler returned.
      rig.recorder.await("the item given back", WAIT,
          e -> (e.kind().equals("Declined") || e.kind().equals("AnswerDropped")) && execution.equals(e.executionId()));
      assertEquals(1, flow.fetchCount(execution, 0), "no fetch after the lease ran out");
      assertTrue(rig.recorder.events("Answered").stream().noneMatch(e -> execution.equals(e.executionId())),
          "an item stopped by the lease is never answered: " + rig.recorder.events());
    }
  }

  /**
   * ElasticJob's streaming loop ends when a resharding is due; shardcar reshards at once, so the
   * loop ends before the next fetch once an assignment no longer holds the item: a second worker
   * joining takes one of two items, or {@code DisableJob} takes both (the epoch stays the same).
   * An item taken away is answered {@code Complete} (it stopped by itself, its batches were
   * processed); an item kept goes on fetching until the worker closes (a drain), and is then
   * answered {@code Complete} too.
   */
  @ParameterizedTest
  @ValueSource(strings = {"second-worker", "disable-job"})
  void aReshardingStopsFetchingTheItemsItTookAwayAndOnlyThose(String how) {
    String job = "df-handover-" + how;
    Flow flow = new Flow(ctx -> List.of("endless"));
    flow.onProcess = (ctx, data) -> java.util.concurrent.locks.LockSupport.parkNanos(
        TimeUnit.MILLISECONDS.toNanos(20));
    try (Rig rig = new Rig(List.of())) {
      JobRegistration a = rig.worker.register(job(job, 2).streamingProcess(true).build(), flow);
      String execution = rig.triggerNewExecution(job, flow);
      awaitCondition("both items to stream",
          () -> flow.fetchCount(execution, 0) >= 2 && flow.fetchCount(execution, 1) >= 2);
      Assignment before = a.getAssignment();
      assertEquals(Set.of(0, 1), before.itemNumbers(), before.toString());
      Recorder other = new Recorder();
      ShardcarWorker b = null;
      try {
        if (how.equals("second-worker")) {
          b = rig.worker("worker-b", other);
          b.register(job, new Flow());
        } else {
          rig.admin.disableJob(job);
        }
        int keep = how.equals("second-worker") ? 1 : 0;
        Assignment moved = rig.recorder.await("the resharding to reach worker-a", WAIT,
            e -> e.kind().equals("Assignment") && e.assignment().epoch() >= before.epoch()
                && e.assignment().itemNumbers().size() == keep).assignment();
        // The epoch grows whenever the items change, DisableJob (which moves no owner) included.
        assertTrue(moved.epoch() > before.epoch(), "the epoch grows: " + before + " -> " + moved);
        // The handover is visible to the loops before the listener hears of the assignment.
        Map<Integer, Integer> fetchedThen = Map.of(
            0, flow.fetchCount(execution, 0), 1, flow.fetchCount(execution, 1));
        Set<Integer> kept = moved.itemNumbers();
        for (int item : kept) {
          awaitCondition("the kept item " + item + " to go on streaming",
              () -> flow.fetchCount(execution, item) >= fetchedThen.get(item) + 5);
        }
        for (int item : Set.of(0, 1)) {
          if (kept.contains(item)) {
            continue;
          }
          Recorder.Event answered = rig.recorder.await("the lost item " + item + " answered", WAIT,
              e -> e.kind().equals("Answered") && execution.equals(e.executionId()) && e.item() == item);
          assertNull(answered.text(), "the loop ended by itself: " + answered);
          assertNull(answered.error(), "the sidecar accepted it: " + answered);
          // The iteration under way when the assignment came may finish; no further fetch.
          assertTrue(flow.fetchCount(execution, item) <= fetchedThen.get(item) + 1,
              "item " + item + " fetched " + flow.fetchCount(execution, item) + " times, "
                  + fetchedThen.get(item) + " when it was handed over");
        }
        rig.worker.close(); // a drain: the kept item's loop ends before its next fetch
        List<Recorder.Event> answers = rig.awaitAnswered(execution, 2);
        answers.forEach(e -> {
          assertNull(e.text(), "completed: " + e);
          assertNull(e.error(), "the sidecar accepted it: " + e);
        });
        ExecutionInfo info = rig.admin.awaitExecution(job, "the execution", WAIT,
            e -> e.getExecutionId().equals(execution));
        assertEquals(ExecutionOutcome.EXECUTION_OUTCOME_COMPLETED, info.getOutcome(), info.toString());
        info.getItemResultsList().forEach(r ->
            assertEquals(ExecutionOutcome.EXECUTION_OUTCOME_COMPLETED, r.getOutcome(), info.toString()));
        assertEquals(2, info.getItemResultsCount(), info.toString());
        assertTrue(rig.recorder.events("Cancelled").isEmpty(), "nothing cancelled: " + rig.recorder.events());
      } finally {
        if (b != null) {
          b.close();
        }
      }
    }
  }

  @Test
  void aSidecarDrainEndsTheStreamingLoopAndTheItemIsAnswered() {
    CountDownLatch processing = new CountDownLatch(1);
    Flow flow = new Flow(ctx -> List.of("endless"));
    try (Rig rig = new Rig(List.of())) {
      flow.onProcess = (ctx, data) -> {
        processing.countDown();
        awaitInHandler("the sidecar's Shutdown", () -> !rig.recorder.events("Shutdown").isEmpty());
      };
      rig.worker.register(job("df-drain", 1).streamingProcess(true).build(), flow);
      String execution = rig.triggerNewExecution("df-drain", flow);
      awaitLatch(processing);
      Processes.signal(rig.sidecar.process(), "TERM");
      Recorder.Event answered = rig.awaitAnswered(execution, 1).get(0);
      assertNull(answered.text(), "completed: " + answered);
      assertNull(answered.error(), "the sidecar accepted it during the drain: " + answered);
      assertEquals(1, flow.fetchCount(execution, 0), "no fetch once the worker was told to shut down");
      // The drain is over once nothing runs: the sidecar exits. The worker stays: a drain is a
      // sidecar restart, so it subscribes again (refused while nothing listens).
      awaitCondition("the sidecar to exit after its drain", () -> !rig.sidecar.process().isAlive());
      rig.recorder.await("the worker subscribing again after the drain", WAIT, e -> e.kind().equals("Disconnected"));
      assertEquals(1, rig.worker.getRegistrations().size(), "the worker outlives the drain");
    }
  }

  private static void awaitLatch(CountDownLatch latch) {
    try {
      if (!latch.await(WAIT.toMillis(), TimeUnit.MILLISECONDS)) {
        throw new AssertionError("timed out after " + WAIT);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new AssertionError("interrupted", e);
    }
  }

  /** Polls {@code condition} until it holds; fails after {@link #WAIT}. */
  private static void awaitCondition(String what, BooleanSupplier condition) {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("timed out after " + WAIT + " waiting for " + what);
      }
      Processes.sleep(10);
    }
  }
}
