package io.shardcar.elasticjob;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.client.ShardcarWorker;
import io.shardcar.client.testing.Recorder;
import io.shardcar.client.testing.SidecarProcess;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.apache.shardingsphere.elasticjob.api.ShardingContext;
import org.apache.shardingsphere.elasticjob.simple.job.SimpleJob;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** An unchanged ElasticJob {@link SimpleJob} run through a real standalone sidecar. */
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
}
