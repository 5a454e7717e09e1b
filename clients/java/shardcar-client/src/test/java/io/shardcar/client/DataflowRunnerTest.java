package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/** ElasticJob's {@code DataflowJobExecutor} loop as {@link DataflowRunner} runs it; needs no sidecar. */
class DataflowRunnerTest {
  private static final JobConfig ONE_OFF = JobConfig.newBuilder("df", 1).build();
  private static final JobConfig STREAMING = JobConfig.newBuilder("df", 1).streamingProcess(true).build();

  /** Hands out the given batches in order (then nothing), and records every call. */
  static final class Batches implements DataflowHandler<String> {
    final Deque<List<String>> batches = new ArrayDeque<>();
    final List<String> calls = new ArrayList<>();
    Runnable afterProcess = () -> {};
    Runnable afterFetch = () -> {};

    Batches(List<List<String>> batches) {
      this.batches.addAll(batches);
    }

    @Override
    public List<String> fetch(ShardingContext ctx) {
      List<String> next = batches.isEmpty() ? List.of() : batches.poll();
      calls.add("fetch" + next);
      afterFetch.run();
      return next;
    }

    @Override
    public void process(ShardingContext ctx, List<String> data) {
      calls.add("process" + data);
      afterProcess.run();
    }
  }

  private final AtomicReference<JobConfig> config = new AtomicReference<>(ONE_OFF);
  private final AtomicBoolean stopping = new AtomicBoolean();
  private final AtomicBoolean handedOver = new AtomicBoolean();
  private final AtomicBoolean cancelled = new AtomicBoolean();

  private ShardingContext context() {
    ShardingContext ctx = new ShardingContext("df", "", 1, "", 0, "", "e-1", TriggerSource.MANUAL, 1, Instant.EPOCH);
    ctx.attach(cancelled::get);
    return ctx;
  }

  private void run(DataflowHandler<String> handler) throws Exception {
    run(handler, null);
  }

  private void run(DataflowHandler<String> handler, Boolean explicit) throws Exception {
    new DataflowRunner<>("df", handler, config::get, explicit, stopping::get, ctx -> handedOver.get())
        .execute(context());
  }

  private static Assignment assignment(long epoch, Integer... items) {
    Map<Integer, String> map = new TreeMap<>();
    for (Integer item : items) {
      map.put(item, "");
    }
    return new Assignment(new TreeMap<>(map), false, epoch);
  }

  @Test
  void oneOffFetchesOnceAndProcessesWhatItGot() throws Exception {
    Batches h = new Batches(List.of(List.of("a", "b"), List.of("c")));
    run(h);
    assertEquals(List.of("fetch[a, b]", "process[a, b]"), h.calls);
  }

  @Test
  void oneOffWithNothingFetchedDoesNotProcess() throws Exception {
    Batches h = new Batches(List.of(List.of()));
    run(h);
    assertEquals(List.of("fetch[]"), h.calls);
  }

  @Test
  void aNullFetchIsNoData() throws Exception {
    List<String> calls = new ArrayList<>();
    config.set(STREAMING);
    run(new DataflowHandler<String>() {
      @Override
      public List<String> fetch(ShardingContext ctx) {
        calls.add("fetch");
        return null;
      }

      @Override
      public void process(ShardingContext ctx, List<String> data) {
        calls.add("process");
      }
    });
    assertEquals(List.of("fetch"), calls);
  }

  @Test
  void streamingFetchesAndProcessesUntilAFetchReturnsNothing() throws Exception {
    config.set(STREAMING);
    Batches h = new Batches(List.of(List.of("a", "b"), List.of("c"), List.of(), List.of("never")));
    run(h);
    assertEquals(List.of("fetch[a, b]", "process[a, b]", "fetch[c]", "process[c]", "fetch[]"), h.calls);
  }

  @Test
  void theStreamingPropertyIsReadLikeElasticJob() {
    assertTrue(JobConfig.newBuilder("j", 1).prop(JobConfig.STREAMING_PROCESS, "TRUE").build().isStreamingProcess());
    assertFalse(JobConfig.newBuilder("j", 1).prop(JobConfig.STREAMING_PROCESS, "yes").build().isStreamingProcess());
    assertFalse(ONE_OFF.isStreamingProcess());
    assertEquals("false", JobConfig.newBuilder("j", 1).streamingProcess(false).build().getProps().get("streaming.process"));
  }

  @Test
  void aCancelledItemStopsBeforeItsNextFetch() throws Exception {
    config.set(STREAMING);
    Batches h = new Batches(List.of(List.of("a"), List.of("b"), List.of("c")));
    h.afterProcess = () -> cancelled.set(true);
    run(h);
    assertEquals(List.of("fetch[a]", "process[a]"), h.calls);
  }

  @Test
  void aWorkerShuttingDownStopsTheLoopBeforeItsNextFetch() throws Exception {
    config.set(STREAMING);
    Batches h = new Batches(List.of(List.of("a"), List.of("b"), List.of("c")));
    h.afterProcess = () -> stopping.set(true);
    run(h);
    assertEquals(List.of("fetch[a]", "process[a]"), h.calls);
  }

  @Test
  void dataFetchedAfterACancelIsNotProcessed() throws Exception {
    config.set(STREAMING);
    Batches streaming = new Batches(List.of(List.of("a"), List.of("b"), List.of("c")));
    streaming.afterFetch = () -> cancelled.set(streaming.calls.size() >= 3); // during the second fetch
    run(streaming);
    assertEquals(List.of("fetch[a]", "process[a]", "fetch[b]"), streaming.calls);

    cancelled.set(false);
    config.set(ONE_OFF);
    Batches oneOff = new Batches(List.of(List.of("a")));
    oneOff.afterFetch = () -> cancelled.set(true);
    run(oneOff);
    assertEquals(List.of("fetch[a]"), oneOff.calls);
  }

  @Test
  void anItemAReshardingTookAwayStopsBeforeItsNextFetch() throws Exception {
    config.set(STREAMING);
    Batches h = new Batches(List.of(List.of("a"), List.of("b"), List.of("c")));
    h.afterProcess = () -> handedOver.set(true);
    run(h);
    assertEquals(List.of("fetch[a]", "process[a]"), h.calls);
  }

  @Test
  void aReshardingTakesAnItemAwayWhenTheLatestAssignmentNoLongerHoldsIt() {
    Assignment both = assignment(3, 0, 1);
    // Another instance joined: a new epoch without item 1; item 0 stays.
    assertTrue(JobRegistration.handedOver(1, both, assignment(4, 0)));
    assertFalse(JobRegistration.handedOver(0, both, assignment(4, 0)), "an item still held keeps streaming");
    // DisableJob: the items are gone, the epoch is the same.
    assertTrue(JobRegistration.handedOver(0, both, assignment(3)));
    assertTrue(JobRegistration.handedOver(1, both, assignment(3)));
    // Nothing changed.
    assertFalse(JobRegistration.handedOver(0, both, both));
    // A failover item (not this instance's): only another sharding hands it over.
    assertFalse(JobRegistration.handedOver(2, both, both));
    assertTrue(JobRegistration.handedOver(2, both, assignment(4, 0, 1)));
    // Triggered before its stream's first assignment: handed over unless the latest holds it.
    assertTrue(JobRegistration.handedOver(0, Assignment.NONE, assignment(3, 1)));
    assertFalse(JobRegistration.handedOver(0, Assignment.NONE, assignment(3, 0)));
    // Not started by a registration, or no assignment yet on the current stream: never.
    assertFalse(JobRegistration.handedOver(0, null, assignment(4)));
    assertFalse(JobRegistration.handedOver(0, both, null));
  }

  @Test
  void theStreamingPropertyIsReadOnceWhenTheItemStarts() throws Exception {
    config.set(STREAMING);
    Batches streaming = new Batches(List.of(List.of("a"), List.of("b"), List.of()));
    streaming.afterFetch = () -> config.set(ONE_OFF);
    run(streaming);
    assertEquals(List.of("fetch[a]", "process[a]", "fetch[b]", "process[b]", "fetch[]"), streaming.calls);

    Batches oneOff = new Batches(List.of(List.of("a"), List.of("b")));
    oneOff.afterFetch = () -> config.set(STREAMING);
    run(oneOff);
    assertEquals(List.of("fetch[a]", "process[a]"), oneOff.calls);
  }

  @Test
  void theEffectiveConfigurationWinsOverTheExplicitMode() throws Exception {
    config.set(ONE_OFF); // stored without the property; registered with streaming=true
    Batches h = new Batches(List.of(List.of("a"), List.of("b")));
    run(h, true);
    assertEquals(List.of("fetch[a]", "process[a]"), h.calls);

    config.set(STREAMING);
    Batches s = new Batches(List.of(List.of("a"), List.of("b")));
    run(s, false);
    assertEquals(List.of("fetch[a]", "process[a]", "fetch[b]", "process[b]", "fetch[]"), s.calls);
  }

  @Test
  void whatFetchOrProcessThrowsEndsTheItem() {
    config.set(STREAMING);
    IllegalStateException boom = new IllegalStateException("boom");
    Batches h = new Batches(List.of(List.of("a"), List.of("b"), List.of("c")));
    h.afterProcess = () -> {
      if (h.calls.size() > 2) {
        throw boom;
      }
    };
    assertSame(boom, assertThrows(IllegalStateException.class, () -> run(h)));
    assertEquals(List.of("fetch[a]", "process[a]", "fetch[b]", "process[b]"), h.calls);

    DataflowHandler<String> failingFetch = new DataflowHandler<>() {
      @Override
      public List<String> fetch(ShardingContext ctx) throws Exception {
        throw new java.io.IOException("source down");
      }

      @Override
      public void process(ShardingContext ctx, List<String> data) {}
    };
    assertEquals("source down", assertThrows(java.io.IOException.class, () -> run(failingFetch)).getMessage());
  }
}
