package io.shardcar.elasticjob;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.client.ShardcarWorker;
import io.shardcar.client.testing.Processes;
import io.shardcar.client.testing.Recorder;
import io.shardcar.client.testing.SidecarAdmin;
import io.shardcar.client.testing.SidecarProcess;
import io.shardcar.client.testing.WorkerMain;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.apache.shardingsphere.elasticjob.api.ShardingContext;
import org.apache.shardingsphere.elasticjob.dataflow.job.DataflowJob;
import org.apache.shardingsphere.elasticjob.dataflow.props.DataflowJobProperties;
import org.apache.shardingsphere.elasticjob.simple.job.SimpleJob;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Unchanged ElasticJob {@link SimpleJob}s and {@link DataflowJob}s run through a real standalone
 * sidecar: streaming via {@code DataflowJobProperties.STREAM_PROCESS_KEY}, and one-off with a
 * failing {@code processData}.
 */
@Tag("integration")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ElasticJobBridgeIntegrationTest {
  private static final Duration WAIT = Duration.ofSeconds(20);

  /** Written against ElasticJob's API only, as an existing job would be. */
  static final class CityJob implements SimpleJob {
    final Map<Integer, ShardingContext> seen = new ConcurrentHashMap<>();

    @Override
    public void execute(ShardingContext shardingContext) {
      seen.putIfAbsent(shardingContext.getShardingItem(), shardingContext);
      if (shardingContext.getShardingParameter().equals("Guangzhou")) {
        throw new IllegalArgumentException("no route to Guangzhou");
      }
    }
  }

  @Test
  void theBootstrapRunsASimpleJobWithItsElasticJobConfiguration() {
    JobConfiguration jobConfig = JobConfiguration.newBuilder("city-job", 3)
        .cron("* * * * * ?")
        .shardingItemParameters("0=Beijing,1=Shanghai,2=Guangzhou")
        .jobParameter("region=cn")
        .failover(true)
        .overwrite(true)
        .build();
    CityJob job = new CityJob();
    Recorder recorder = new Recorder();
    try (SidecarProcess sidecar = SidecarProcess.startStandalone();
        ShardcarWorker worker = ShardcarWorker.builder().target(sidecar.target()).listener(recorder).build()) {
      ShardcarJobBootstrap bootstrap = new ShardcarJobBootstrap(worker, job, jobConfig);
      bootstrap.schedule();
      assertTrue(bootstrap.getRegistration().getEffectiveConfig().isFailover());

      recorder.await("all three items answered", WAIT, 3,
          e -> e.kind().equals("Answered") && e.error() == null && e.executionId() != null);
      recorder.await("every item answered", WAIT,
          e -> job.seen.keySet().containsAll(java.util.Set.of(0, 1, 2)));
      assertEquals("Beijing", job.seen.get(0).getShardingParameter());
      assertEquals("Shanghai", job.seen.get(1).getShardingParameter());
      for (ShardingContext ctx : job.seen.values()) {
        assertEquals("city-job", ctx.getJobName());
        assertEquals(3, ctx.getShardingTotalCount());
        assertEquals("region=cn", ctx.getJobParameter());
        assertTrue(ctx.getTaskId().startsWith("city-job@-@"), ctx.getTaskId());
      }
      Recorder.Event failed = recorder.await("Guangzhou reported failed", WAIT,
          e -> e.kind().equals("Answered") && e.item() == 2);
      assertEquals("java.lang.IllegalArgumentException: no route to Guangzhou", failed.text());
      assertNull(failed.error(), "the sidecar accepted the failure report");
      recorder.await("Beijing completed", WAIT,
          e -> e.kind().equals("Answered") && e.item() == 0 && e.text() == null);

      bootstrap.shutdown();
      assertTrue(worker.getRegistrations().isEmpty());
    }
  }

  @Test
  void runRegistersTheJobOnAGivenWorker() throws Exception {
    CityJob job = new CityJob();
    try (SidecarProcess sidecar = SidecarProcess.startStandalone();
        ShardcarWorker worker = ElasticJobBridge.run(ShardcarWorker.builder().target(sidecar.target()).build(), job,
            JobConfiguration.newBuilder("run-job", 1).cron("* * * * * ?").build())) {
      long deadline = System.nanoTime() + WAIT.toNanos();
      while (job.seen.isEmpty() && System.nanoTime() < deadline) {
        Thread.sleep(50);
      }
      assertEquals(0, job.seen.get(0).getShardingItem());
      assertEquals(1, worker.getRegistrations().size());
    }
  }

  /**
   * Written against ElasticJob's API only: each item has a backlog of orders; a fetch takes at most
   * two of them, a process ships them.
   */
  static final class OrderShippingJob implements DataflowJob<String> {
    final Map<Integer, Deque<String>> backlog = new ConcurrentHashMap<>();
    final List<String> fetches = new CopyOnWriteArrayList<>();
    final Map<Integer, List<String>> shipped = new ConcurrentHashMap<>();
    final List<ShardingContext> contexts = new CopyOnWriteArrayList<>();

    OrderShippingJob(Map<Integer, List<String>> orders) {
      orders.forEach((item, list) -> backlog.put(item, new ConcurrentLinkedDeque<>(list)));
    }

    @Override
    public List<String> fetchData(ShardingContext shardingContext) {
      contexts.add(shardingContext);
      fetches.add(shardingContext.getShardingParameter());
      Deque<String> pending = backlog.get(shardingContext.getShardingItem());
      List<String> batch = new ArrayList<>();
      for (int i = 0; i < 2 && pending != null && !pending.isEmpty(); i++) {
        batch.add(pending.poll());
      }
      return batch;
    }

    @Override
    public void processData(ShardingContext shardingContext, List<String> data) {
      if (data.contains("poison")) {
        throw new IllegalStateException("cannot ship " + data);
      }
      shipped.computeIfAbsent(shardingContext.getShardingItem(), k -> new CopyOnWriteArrayList<>()).addAll(data);
    }
  }

  /** Triggers {@code job} until an execution is answered; returns its answers. */
  private static List<Recorder.Event> triggerAndAwaitAnswers(SidecarAdmin admin, Recorder recorder, String job,
      int items) {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (true) {
      admin.trigger(job);
      try {
        Recorder.Event first = recorder.await("an execution of " + job + " answered", Duration.ofSeconds(5),
            e -> e.kind().equals("Answered"));
        return recorder.await("every item of its execution answered", WAIT, items,
            e -> e.kind().equals("Answered") && first.executionId().equals(e.executionId()));
      } catch (AssertionError e) {
        if (System.nanoTime() - deadline > 0) {
          throw e;
        }
        // not sharded yet: trigger again
      }
    }
  }

  @Test
  void theBootstrapRunsAStreamingDataflowJobUntilItsFetchReturnsNothing() {
    JobConfiguration jobConfig = JobConfiguration.newBuilder("ship-streaming", 2)
        .cron(WorkerMain.NEVER)
        .shardingItemParameters("0=north,1=south")
        .setProperty(DataflowJobProperties.STREAM_PROCESS_KEY, "true")
        .overwrite(true)
        .build();
    OrderShippingJob job = new OrderShippingJob(Map.of(0, List.of("o1", "o2", "o3", "o4", "o5"), 1, List.of("o6")));
    Recorder recorder = new Recorder();
    try (SidecarProcess sidecar = SidecarProcess.startStandalone();
        SidecarAdmin admin = new SidecarAdmin(sidecar);
        ShardcarWorker worker = ShardcarWorker.builder().target(sidecar.target()).listener(recorder).build()) {
      ShardcarJobBootstrap bootstrap = new ShardcarJobBootstrap(worker, job, jobConfig);
      bootstrap.schedule();
      assertTrue(bootstrap.getRegistration().getEffectiveConfig().isStreamingProcess());

      for (Recorder.Event e : triggerAndAwaitAnswers(admin, recorder, "ship-streaming", 2)) {
        assertNull(e.text(), "completed: " + e);
        assertNull(e.error(), "accepted: " + e);
      }
      // One trigger shipped the whole backlog: 3 batches then an empty fetch on item 0, 1 then empty on item 1.
      assertEquals(List.of("o1", "o2", "o3", "o4", "o5"), job.shipped.get(0));
      assertEquals(List.of("o6"), job.shipped.get(1));
      assertEquals(4, job.fetches.stream().filter("north"::equals).count(), job.fetches.toString());
      assertEquals(2, job.fetches.stream().filter("south"::equals).count(), job.fetches.toString());
      for (ShardingContext ctx : job.contexts) {
        assertEquals("ship-streaming", ctx.getJobName());
        assertEquals(2, ctx.getShardingTotalCount());
        assertTrue(ctx.getTaskId().startsWith("ship-streaming@-@"), ctx.getTaskId());
      }
      bootstrap.shutdown();
    }
  }

  @Test
  void aOneOffDataflowJobShipsOneBatchPerTriggerAndAFailingProcessIsReported() {
    JobConfiguration jobConfig = JobConfiguration.newBuilder("ship-one-off", 2)
        .cron(WorkerMain.NEVER)
        .overwrite(true)
        .build();
    OrderShippingJob job = new OrderShippingJob(Map.of(0, List.of("o1", "o2", "o3"), 1, List.of("poison")));
    Recorder recorder = new Recorder();
    try (SidecarProcess sidecar = SidecarProcess.startStandalone();
        SidecarAdmin admin = new SidecarAdmin(sidecar);
        ShardcarWorker worker = ElasticJobBridge.run(
            ShardcarWorker.builder().target(sidecar.target()).listener(recorder).build(), job, jobConfig)) {
      Map<Integer, Recorder.Event> answers = new ConcurrentHashMap<>();
      triggerAndAwaitAnswers(admin, recorder, "ship-one-off", 2).forEach(e -> answers.put(e.item(), e));
      assertNull(answers.get(0).text(), "completed: " + answers.get(0));
      assertEquals("java.lang.IllegalStateException: cannot ship [poison]", answers.get(1).text());
      assertNull(answers.get(1).error(), "the sidecar accepted the failure report");
      assertEquals(List.of("o1", "o2"), job.shipped.get(0), "one fetch, one batch");
      assertEquals(2, job.fetches.size(), job.fetches.toString());
      assertEquals(1, worker.getRegistrations().size());
    }
  }
}
