package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.client.testing.Processes;
import io.shardcar.client.testing.SidecarAdmin;
import io.shardcar.client.testing.SidecarProcess;
import io.shardcar.v1.ExecutionEvent;
import io.shardcar.v1.ExecutionInfo;
import io.shardcar.v1.ExecutionOutcome;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Resident jobs against a real standalone {@code shardcar run} process. Every handler records when
 * it started and when it returned (one clock, this JVM's), so the tests check from the workers' side
 * what the sidecar promises:
 *
 * <ul>
 *   <li>A join hands the moved items over without overlap: worker A holds the job's four items; B
 *       joins; the two items that move are revoked on A, declined by the client (the sidecar's
 *       history shows the decline after the revoke), and only then held by B, under a larger fencing
 *       token; the two that stay with A are never interrupted. Closing A gives its holds back at
 *       once (not after the drain timeout, and without holds started on A again meanwhile), and
 *       B holds all four, again never two at once.
 *   <li>A hold whose handler returns is answered {@code Complete} and started again after the job's
 *       backoffs (0.2 s doubling), not in a tight loop; {@code getAttempt()} counts the restarts.
 *   <li>A hold whose handler throws is answered {@code ReportFailure} (the history has the error)
 *       and is started again after its backoff as well.
 *   <li>{@code registerResident} on a job stored as not resident throws, naming {@code resident}.
 * </ul>
 */
@Tag("integration")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ResidentIntegrationTest {
  private static final Duration WAIT = Duration.ofSeconds(20);
  /** The restart backoffs: 0.2 s, 0.4 s, 0.8 s, ... (maxAttempts 2 so that the sidecar keeps the policy). */
  private static final RetryPolicy RESTARTS = RetryPolicy.newBuilder(2).initialBackoff(Duration.ofMillis(200))
      .maxBackoff(Duration.ofSeconds(5)).multiplier(2.0).build();
  /** How much sooner than its backoff a restart may be seen (the sidecar schedules in wall-clock ms). */
  private static final long SLACK_NANOS = TimeUnit.MILLISECONDS.toNanos(30);

  private SidecarProcess sidecar;
  private SidecarAdmin admin;
  private final List<ShardcarWorker> workers = new ArrayList<>();
  private final List<Hold> holds = new CopyOnWriteArrayList<>();

  /** One hold as its handler recorded it; {@code end} is 0 while it runs. */
  static final class Hold {
    final String worker;
    final int item;
    final String executionId;
    final long token;
    final int attempt;
    final TriggerSource source;
    final long start = System.nanoTime();
    volatile long end;
    volatile boolean cancelled;

    Hold(String worker, ShardingContext ctx) {
      this.worker = worker;
      this.item = ctx.getShardingItem();
      this.executionId = ctx.getExecutionId();
      this.token = ctx.getFencingToken();
      this.attempt = ctx.getAttempt();
      this.source = ctx.getSource();
    }

    @Override
    public String toString() {
      return worker + ":" + item + "@" + token + "#" + attempt + "[" + start + ".." + end + (cancelled ? " cancelled" : "")
          + "]";
    }
  }

  @BeforeEach
  void start() {
    sidecar = SidecarProcess.startStandalone();
    admin = new SidecarAdmin(sidecar);
  }

  @AfterEach
  void stop() {
    try {
      workers.forEach(ShardcarWorker::close);
      if (admin != null) {
        admin.close();
      }
    } finally {
      sidecar.close();
    }
  }

  private ShardcarWorker worker(String name) {
    ShardcarWorker worker = ShardcarWorker.builder()
        .target(sidecar.target())
        .instanceId("127.0.0.1@-@" + name)
        .connectTimeout(Duration.ofSeconds(10))
        .drainTimeout(Duration.ofSeconds(10))
        .build();
    workers.add(worker);
    return worker;
  }

  /** A handler that holds its item until cancelled. */
  private ResidentHandler holding(String worker) {
    return ctx -> {
      Hold hold = new Hold(worker, ctx);
      holds.add(hold);
      try {
        while (!ctx.awaitCancelled(Duration.ofSeconds(1))) {
          // polling the partition
        }
      } finally {
        hold.cancelled = ctx.isCancelled();
        hold.end = System.nanoTime();
      }
    };
  }

  /** A handler that ends its hold at once by itself: {@code then} returns or throws. */
  private ResidentHandler ending(String worker, ResidentHandler then) {
    return ctx -> {
      Hold hold = new Hold(worker, ctx);
      holds.add(hold);
      try {
        then.hold(ctx);
      } finally {
        hold.end = System.nanoTime();
      }
    };
  }

  private List<Hold> of(String worker) {
    return holds.stream().filter(h -> h.worker.equals(worker)).toList();
  }

  private Set<Integer> held(String worker) {
    return of(worker).stream().filter(h -> h.end == 0).map(h -> h.item).collect(Collectors.toCollection(TreeSet::new));
  }

  /** No two holds of an item overlap: each starts after the one before it ended, under a larger token. */
  private void assertNoOverlap() {
    Map<Integer, List<Hold>> byItem = holds.stream().collect(Collectors.groupingBy(h -> h.item));
    byItem.forEach((item, list) -> {
      List<Hold> sorted = list.stream().sorted(Comparator.comparingLong(h -> h.start)).toList();
      for (int i = 1; i < sorted.size(); i++) {
        Hold before = sorted.get(i - 1);
        Hold after = sorted.get(i);
        assertTrue(before.end != 0 && before.end <= after.start, "overlap: " + before + " " + after);
        assertTrue(after.token > before.token, "token not larger: " + before + " " + after);
      }
    });
  }

  private static void await(String what, BooleanSupplier done) {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (!done.getAsBoolean()) {
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("timed out after " + WAIT + " waiting for " + what);
      }
      Processes.sleep(20);
    }
  }

  @Test
  void aJoinHandsTheMovedItemsOverWithoutOverlap() {
    JobConfig config = JobConfig.newBuilder("partitions", 4).build();
    ShardcarWorker a = worker("a");
    a.registerResident(config, holding("a"));
    await("A holding all four items", () -> held("a").equals(Set.of(0, 1, 2, 3)));
    of("a").forEach(h -> assertEquals(TriggerSource.RESIDENT, h.source));
    of("a").forEach(h -> assertEquals(0, h.attempt));

    long joined = System.nanoTime();
    worker("b").registerResident(config, holding("b"));
    await("a 2/2 split of the holds", () -> held("a").size() == 2 && held("b").size() == 2);
    Set<Integer> moved = held("b");
    List<Hold> aHolds = new ArrayList<>(of("a"));
    assertEquals(4, aHolds.size(), aHolds.toString());
    for (Hold h : aHolds) {
      if (moved.contains(h.item)) {
        assertTrue(h.end != 0 && h.cancelled, "a moved item's hold was revoked: " + h);
      } else {
        assertEquals(0, h.end, "an item that did not move was interrupted: " + h);
      }
    }
    assertNoOverlap();
    of("b").forEach(h -> assertTrue(h.start - joined < TimeUnit.SECONDS.toNanos(5), "slow hand-off: " + h));
    // The client declined what was revoked: the sidecar recorded the decline after its revoke.
    for (Hold h : aHolds) {
      if (moved.contains(h.item)) {
        ExecutionInfo e = admin.awaitExecution("partitions", "the revoked hold of item " + h.item, WAIT,
            x -> x.getExecutionId().equals(h.executionId) && names(x).contains("decline"));
        List<String> names = names(e);
        assertTrue(names.indexOf("revoke") >= 0 && names.indexOf("revoke") < names.indexOf("decline"), names.toString());
        assertEquals(ExecutionOutcome.EXECUTION_OUTCOME_REVOKED, e.getOutcome());
      }
    }

    // Closing A gives its holds back at once, and B holds every item.
    long closing = System.nanoTime();
    a.close();
    assertTrue(System.nanoTime() - closing < TimeUnit.SECONDS.toNanos(5), "the close waited for the drain timeout");
    await("B holding all four items", () -> held("b").equals(Set.of(0, 1, 2, 3)));
    of("a").forEach(h -> assertTrue(h.end != 0 && h.cancelled, "not given back: " + h));
    assertNoOverlap();
    // Given back by the end of A's stream, not by declines the sidecar would answer with new holds
    // on A, again and again until the stream ended: A's executions are its four holds.
    List<ExecutionInfo> ofA = admin.executions("partitions").stream()
        .filter(e -> e.getInstanceId().equals("127.0.0.1@-@a")).toList();
    assertEquals(4, ofA.size(), ofA.toString());
  }

  private static List<String> names(ExecutionInfo e) {
    return e.getEventsList().stream().map(ExecutionEvent::getName).toList();
  }

  /** Each hold after the first started its backoff (0.2 s doubling) after the one before it ended. */
  private static void assertRestartedAfterBackoffs(List<Hold> list) {
    for (int n = 1; n < list.size(); n++) {
      Hold before = list.get(n - 1);
      Hold after = list.get(n);
      assertEquals(n, after.attempt, list.toString());
      long backoff = TimeUnit.MILLISECONDS.toNanos(200L << (n - 1));
      assertTrue(after.start - before.end >= backoff - SLACK_NANOS,
          "restart " + n + " after " + (after.start - before.end) / 1_000_000 + " ms, not " + backoff / 1_000_000);
    }
  }

  @Test
  void aHoldThatReturnsIsCompletedAndStartedAgainAfterABackoff() {
    worker("a").registerResident(JobConfig.newBuilder("returns", 1).retry(RESTARTS).build(), ending("a", ctx -> { }));
    // 0.2 + 0.4 + 0.8 s of backoff for four holds: a tight loop would have made hundreds.
    await("four holds of the item", () -> holds.size() >= 4);
    assertTrue(holds.size() <= 5, holds.toString());
    List<Hold> first = List.copyOf(holds.subList(0, 4));
    assertRestartedAfterBackoffs(first);
    for (Hold h : first) {
      ExecutionInfo e = admin.awaitExecution("returns", "the completed hold " + h, WAIT,
          x -> x.getExecutionId().equals(h.executionId) && x.getOutcome() == ExecutionOutcome.EXECUTION_OUTCOME_COMPLETED);
      assertEquals(io.shardcar.v1.TriggerSource.TRIGGER_SOURCE_RESIDENT, e.getSource());
    }
  }

  @Test
  void aHoldThatThrowsReportsFailureAndIsStartedAgain() {
    worker("a").registerResident(JobConfig.newBuilder("fails", 1).retry(RESTARTS).build(), ending("a", ctx -> {
      throw new IllegalStateException("partition " + ctx.getShardingItem() + " broke on attempt " + ctx.getAttempt());
    }));
    await("three holds of the item", () -> holds.size() >= 3);
    List<Hold> first = List.copyOf(holds.subList(0, 3));
    assertRestartedAfterBackoffs(first);
    List<ExecutionInfo> failed = new ArrayList<>();
    for (Hold h : first) {
      failed.add(admin.awaitExecution("fails", "the failed hold " + h, WAIT,
          x -> x.getExecutionId().equals(h.executionId) && x.getOutcome() == ExecutionOutcome.EXECUTION_OUTCOME_FAILED));
    }
    assertEquals(List.of(0, 1, 2), failed.stream().map(ExecutionInfo::getAttempt).toList());
    assertTrue(failed.get(1).getError().contains("partition 0 broke on attempt 1"), failed.get(1).getError());
  }

  @Test
  void registerResidentOnAJobThatIsNotResidentThrowsNamingResident() {
    worker("plain").register(JobConfig.newBuilder("plain", 1).build(), ctx -> { });
    ShardcarWorker wrong = worker("wrong");
    InvalidJobConfigException e = assertThrows(InvalidJobConfigException.class,
        () -> wrong.registerResident("plain", holding("wrong")));
    assertEquals("resident", e.getField().orElse(null), e.getMessage());
    assertTrue(e.getMessage().contains("is not resident"), e.getMessage());
    assertTrue(holds.isEmpty(), holds.toString());
    assertTrue(wrong.getRegistrations().isEmpty());
  }
}
