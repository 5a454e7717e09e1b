package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.client.testing.Processes;
import io.shardcar.client.testing.Recorder;
import io.shardcar.client.testing.SidecarAdmin;
import io.shardcar.client.testing.SidecarProcess;
import io.shardcar.client.testing.WorkerMain;
import io.shardcar.client.testing.WorkerProcess;
import io.shardcar.v1.ExecutionInfo;
import io.shardcar.v1.ExecutionOutcome;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.Predicate;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@code max_concurrent_executions} against a real standalone sidecar: two workers of one two-item
 * failover job, the worker under test in this JVM and a peer in a child JVM ({@link WorkerMain}
 * mode {@code hold}), each running a long item of its own (one {@code TriggerJob}). The peer is
 * killed (SIGKILL) mid-item. With executor size 2 the worker under test receives the FAILOVER
 * trigger for the peer's item while its own item still runs, runs both and answers both; with
 * executor size 1 the FAILOVER run comes only after its own item finished. Every wait polls with a
 * deadline; the sidecar and the child are killed at the end of every test.
 */
@Tag("integration")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ConcurrentExecutionsIntegrationTest {
  private static final Duration WAIT = Duration.ofSeconds(30);

  /** What the handlers of the worker under test did, in order. */
  private static final class Timeline {
    record Entry(String what, String executionId, int item, TriggerSource source) {}

    private final List<Entry> entries = new ArrayList<>();

    synchronized void add(String what, ShardingContext ctx) {
      entries.add(new Entry(what, ctx.getExecutionId(), ctx.getShardingItem(), ctx.getSource()));
      notifyAll();
    }

    synchronized List<Entry> snapshot() {
      return new ArrayList<>(entries);
    }

    synchronized int indexOf(Predicate<Entry> match) {
      for (int i = 0; i < entries.size(); i++) {
        if (match.test(entries.get(i))) {
          return i;
        }
      }
      return -1;
    }

    synchronized Entry await(String what, Duration timeout, Predicate<Entry> match) {
      long deadline = System.nanoTime() + timeout.toNanos();
      while (true) {
        int i = indexOf(match);
        if (i >= 0) {
          return entries.get(i);
        }
        long left = deadline - System.nanoTime();
        if (left <= 0) {
          throw new AssertionError("timed out after " + timeout + " waiting for " + what + "; handlers did: " + entries);
        }
        try {
          wait(Math.max(1, left / 1_000_000));
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new AssertionError("interrupted", e);
        }
      }
    }
  }

  private SidecarProcess sidecar;
  private SidecarAdmin admin;
  private ShardcarWorker worker;
  private WorkerProcess peer;
  private final Recorder recorder = new Recorder();
  private final Timeline timeline = new Timeline();
  private final CountDownLatch releaseOwn = new CountDownLatch(1);

  @BeforeEach
  void startSidecar() {
    sidecar = SidecarProcess.startStandalone();
    admin = new SidecarAdmin(sidecar);
  }

  @AfterEach
  void stopEverything() {
    releaseOwn.countDown();
    try {
      if (peer != null) {
        peer.close();
      }
      if (worker != null) {
        worker.close();
      }
      admin.close();
    } finally {
      sidecar.close();
    }
  }

  /**
   * Starts the worker under test (executor size {@code itemConcurrency}, in this JVM) and the peer,
   * fires the job once on both, and returns the worker's own first item once both run theirs. The
   * worker's first item blocks until {@link #releaseOwn}; every later one returns at once.
   */
  private Timeline.Entry bothBusy(String job, int itemConcurrency) {
    worker = ShardcarWorker.builder()
        .target(sidecar.target())
        .itemConcurrency(itemConcurrency)
        .connectTimeout(Duration.ofSeconds(10))
        .reconnectBackoff(Duration.ofMillis(100), Duration.ofSeconds(1))
        .drainTimeout(Duration.ofSeconds(2))
        .listener(recorder)
        .build();
    assertEquals(itemConcurrency, worker.getMaxConcurrentExecutions(), "the executor size by default");
    Set<String> first = new HashSet<>();
    JobRegistration registration = worker.register(WorkerMain.failoverJob(job), ctx -> {
      timeline.add("STARTED", ctx);
      boolean mine;
      synchronized (first) {
        mine = first.isEmpty() && first.add(ctx.getExecutionId());
      }
      if (mine && !releaseOwn.await(WorkerMain.BLOCK_SECONDS, TimeUnit.SECONDS)) {
        throw new IllegalStateException("never released");
      }
      timeline.add("ENDED", ctx);
    });
    peer = WorkerProcess.start(sidecar.target(), job, "hold");
    awaitTrue("one item for each of the two instances", () -> registration.getAssignment().itemNumbers().size() == 1);
    List<String> asked = admin.trigger(job);
    assertEquals(2, asked.size(), "TriggerJob asked " + asked);
    Timeline.Entry own = timeline.await("the worker's own item", WAIT, e -> e.what().equals("STARTED"));
    assertEquals(TriggerSource.MANUAL, own.source());
    String peerStarted = peer.await("the peer's own item", WAIT, l -> l.startsWith("BLOCKING "));
    int peerItem = Integer.parseInt(peerStarted.split(" ")[2]);
    assertNotEquals(own.item(), peerItem);
    return own;
  }

  private int peerItem() {
    String line = peer.await("the peer's own item", Duration.ofSeconds(1), l -> l.startsWith("BLOCKING "));
    return Integer.parseInt(line.split(" ")[2]);
  }

  private static void awaitTrue(String what, BooleanSupplier condition) {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("timed out after " + WAIT + " waiting for " + what);
      }
      Processes.sleep(50);
    }
  }

  /**
   * {@code condition} holds at every poll for {@code window}: a bounded observation window for a
   * negative property (something does not happen), never a wait for something to happen.
   */
  private static void holds(String what, Duration window, BooleanSupplier condition) {
    long end = System.nanoTime() + window.toNanos();
    while (System.nanoTime() - end < 0) {
      assertTrue(condition.getAsBoolean(), what + " stopped holding");
      Processes.sleep(50);
    }
  }

  private Recorder.Event accepted(String executionId, int item) {
    Recorder.Event answered = recorder.await("the answer to item " + item + " of " + executionId, WAIT,
        e -> e.kind().equals("Answered") && executionId.equals(e.executionId()) && e.item() == item);
    assertEquals(null, answered.error(), "the sidecar refused the answer: " + answered);
    assertEquals(null, answered.text(), "answered as failed: " + answered);
    return answered;
  }

  private boolean answered(String executionId) {
    return recorder.events("Answered").stream().anyMatch(e -> executionId.equals(e.executionId()));
  }

  private void noItemStartedTwice() {
    List<String> starts = timeline.snapshot().stream()
        .filter(e -> e.what().equals("STARTED"))
        .map(e -> e.executionId() + "/" + e.item())
        .toList();
    assertEquals(new HashSet<>(starts).size(), starts.size(), "an item was delivered twice: " + starts);
  }

  @Test
  void aBusyWorkerRunsTheFailoverBesideItsOwnItem() {
    String job = "fo-busy-java";
    Timeline.Entry own = bothBusy(job, 2);
    int peerItem = peerItem();
    peer.close(); // SIGKILL mid-item
    Timeline.Entry failover = timeline.await("the FAILOVER trigger while the own item runs", WAIT,
        e -> e.what().equals("STARTED") && !e.executionId().equals(own.executionId()));
    assertEquals(TriggerSource.FAILOVER, failover.source());
    assertEquals(peerItem, failover.item());
    accepted(failover.executionId(), failover.item());
    // All of that while the worker's own item still ran, unanswered.
    assertEquals(-1, timeline.indexOf(e -> e.what().equals("ENDED") && e.executionId().equals(own.executionId())),
        "the own item ended before the FAILOVER run: " + timeline.snapshot());
    assertTrue(!answered(own.executionId()), "the own item was answered before it was released");
    releaseOwn.countDown();
    accepted(own.executionId(), own.item());
    noItemStartedTwice();

    ExecutionInfo ownRecord = admin.awaitExecution(job, "the own execution", WAIT,
        e -> e.getExecutionId().equals(own.executionId()));
    ExecutionInfo failoverRecord = admin.awaitExecution(job, "the FAILOVER execution", WAIT,
        e -> e.getExecutionId().equals(failover.executionId()));
    assertEquals(ExecutionOutcome.EXECUTION_OUTCOME_COMPLETED, ownRecord.getOutcome(), ownRecord.toString());
    assertEquals(ExecutionOutcome.EXECUTION_OUTCOME_COMPLETED, failoverRecord.getOutcome(), failoverRecord.toString());
    assertEquals(io.shardcar.v1.TriggerSource.TRIGGER_SOURCE_FAILOVER, failoverRecord.getSource());
    assertEquals(ownRecord.getInstanceId(), failoverRecord.getInstanceId());
  }

  @Test
  void withExecutorSizeOneTheFailoverComesOnlyAfterTheOwnItem() {
    String job = "fo-single-java";
    Timeline.Entry own = bothBusy(job, 1);
    int peerItem = peerItem();
    peer.close(); // SIGKILL mid-item
    awaitTrue("item " + peerItem + " to be flagged for failover",
        () -> admin.items(job).get(peerItem).getFailoverPending());
    // It stays waiting as long as the worker is busy (a worker free for it takes it at once).
    holds("the failover item waiting, with no second execution on the busy worker", Duration.ofSeconds(1),
        () -> admin.items(job).get(peerItem).getFailoverPending()
            && timeline.snapshot().stream().filter(e -> e.what().equals("STARTED")).count() == 1);
    releaseOwn.countDown();
    Timeline.Entry failover = timeline.await("the FAILOVER trigger once idle", WAIT,
        e -> e.what().equals("STARTED") && !e.executionId().equals(own.executionId()));
    int ended = timeline.indexOf(e -> e.what().equals("ENDED") && e.executionId().equals(own.executionId()));
    int started = timeline.indexOf(e -> e.what().equals("STARTED") && e.executionId().equals(failover.executionId()));
    assertTrue(ended >= 0 && ended < started, "the FAILOVER run started before the own item ended: " + timeline.snapshot());
    assertEquals(TriggerSource.FAILOVER, failover.source());
    assertEquals(peerItem, failover.item());
    accepted(own.executionId(), own.item());
    accepted(failover.executionId(), failover.item());
    noItemStartedTwice();
  }
}
