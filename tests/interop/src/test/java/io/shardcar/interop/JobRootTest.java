package io.shardcar.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.interop.harness.Cluster;
import io.shardcar.interop.harness.Job;
import io.shardcar.interop.harness.Member;
import io.shardcar.interop.harness.Rec;
import io.shardcar.interop.harness.Run;
import io.shardcar.interop.harness.Sidecar;
import io.shardcar.interop.harness.Zk;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/**
 * The job root node ({@code /{job}}, whose data ElasticJob sets to the job's class and checks at
 * start: "Job conflict" when it names another class). shardcar never overwrites a class name
 * ElasticJob wrote (not even when a worker subscribes with {@code overwrite}, nor on
 * {@code ctl job put}), and ElasticJob starts on a job shardcar created, also with its own
 * {@code overwrite}, after which shardcar follows ElasticJob's config.
 */
class JobRootTest {
  private static final String EJ_JOB = "ejRoot";
  private static final String SC_JOB = "scRoot";
  private static final Duration T = Duration.ofSeconds(30);

  @Test
  void shardcarKeepsElasticJobsClassNameAndElasticJobStartsOnShardcarsJob() throws IOException {
    try (Cluster c = Cluster.start("JobRoot")) {
      Zk zk = c.zk();
      Member e1 = c.elasticJob("ej1", Job.named(EJ_JOB).total(2).cron(Job.NEVER));
      assertEquals(ElasticJobClassName.RECORDING_JOB, zk.data("/" + EJ_JOB), "ElasticJob writes its class into the root");

      // A shardcar worker replaces ElasticJob's config (overwrite) and creates a job of its own.
      Sidecar s = c.sidecar("127.0.0.2");
      Member w = c.shardcar("sc", s,
          Job.named(EJ_JOB).total(3).cron(Job.NEVER).params("0=x,1=y,2=z").overwrite(true).withConfig(true),
          Job.named(SC_JOB).total(2).cron(Job.NEVER).withConfig(true));
      assertTrue(zk.data("/" + EJ_JOB + "/config").contains("shardingTotalCount: 3\n"), "shardcar's overwrite replaced the config");
      assertEquals(ElasticJobClassName.RECORDING_JOB, zk.data("/" + EJ_JOB), "an overwriting shardcar worker keeps the class name");
      assertEquals("", zk.data("/" + SC_JOB), "shardcar creates its job's root empty");

      // ctl job put replaces the config again: the class name stays.
      Path file = c.dir().resolve("ejRoot.yaml");
      Files.writeString(file, "jobName: " + EJ_JOB + "\ncron: " + Job.NEVER + "\nshardingTotalCount: 4\n");
      s.ctlOk("job", "put", file.toString());
      assertTrue(zk.data("/" + EJ_JOB + "/config").contains("shardingTotalCount: 4\n"), zk.data("/" + EJ_JOB + "/config"));
      assertEquals(ElasticJobClassName.RECORDING_JOB, zk.data("/" + EJ_JOB), "ctl job put keeps the class name");

      // A second ElasticJob JVM starts on both jobs: no "Job conflict" on either. On shardcar's job it
      // overwrites the config (3 items, parameters): ElasticJob then writes its class into that root too.
      Member e2 = c.elasticJob("ej2", Job.named(EJ_JOB).total(1).cron(Job.NEVER),
          Job.named(SC_JOB).total(3).cron(Job.NEVER).params("0=p,1=q,2=r").overwrite(true));
      assertTrue(e2.recs().stream().noneMatch(r -> r.is("startFailed")), "ElasticJob started on both jobs: " + e2.recs());
      assertEquals(ElasticJobClassName.RECORDING_JOB, zk.data("/" + SC_JOB), "ElasticJob's overwrite writes its class");
      assertTrue(zk.data("/" + SC_JOB + "/config").contains("shardingTotalCount: 3\n"), zk.data("/" + SC_JOB + "/config"));

      // Both jobs work across both sides with the latest config.
      String wA = w.instanceId(EJ_JOB);
      String wB = w.instanceId(SC_JOB);
      Set<String> membersA = Set.of(e1.instanceId(EJ_JOB), e2.instanceId(EJ_JOB), wA);
      Set<String> membersB = Set.of(e2.instanceId(SC_JOB), wB);
      // ElasticJob leads ejRoot, so it shards at its next fire: a trigger.
      long t0 = System.currentTimeMillis();
      c.operateApi().trigger(EJ_JOB);
      c.await(EJ_JOB, "4 items over E1, E2 and W (ElasticJob shards at the triggered fire)", T,
          () -> zk.shardingSettled(EJ_JOB) && zk.owners(EJ_JOB).size() == 4
          && new HashSet<>(zk.owners(EJ_JOB).values()).equals(membersA));
      c.await(SC_JOB, "3 items over E2 and W (shardcar follows ElasticJob's overwrite)", T, () -> zk.shardingSettled(SC_JOB)
          && zk.owners(SC_JOB).size() == 3 && new HashSet<>(zk.owners(SC_JOB).values()).equals(membersB));
      // Every item of that fire has started and ended. Awaiting only "no run unfinished" would pass
      // before the first run starts, and the next trigger would then land in this fire: a member that
      // has not started yet runs once for both triggers.
      c.await(EJ_JOB, "the triggered fire runs every item and its runs end", T,
          () -> items(c, EJ_JOB, t0).equals(Set.of(0, 1, 2, 3)) && c.runs(EJ_JOB).stream().allMatch(Run::finished));
      long t = System.currentTimeMillis();
      c.operateApi().trigger(EJ_JOB);
      c.operateApi().trigger(SC_JOB);
      c.await(EJ_JOB, "every item of both jobs runs once", T, () -> items(c, EJ_JOB, t).equals(Set.of(0, 1, 2, 3))
          && items(c, SC_JOB, t).equals(Set.of(0, 1, 2)) && c.runs(EJ_JOB).stream().allMatch(Run::finished)
          && c.runs(SC_JOB).stream().allMatch(Run::finished));
      for (Run r : c.runs(EJ_JOB)) {
        assertEquals("4", r.startRec().get("total"), "ctl's item count: " + r);
      }
      Map<Integer, String> params = Map.of(0, "p", 1, "q", 2, "r");
      for (Run r : c.runs(SC_JOB)) {
        assertEquals("3", r.startRec().get("total"), "ElasticJob's item count: " + r);
        assertEquals(params.get(r.item()), r.startRec().get("param"), "ElasticJob's item parameter: " + r);
      }
      Rec wRun = w.recs().stream().filter(r -> r.is("start") && SC_JOB.equals(r.job())).findFirst().orElseThrow();
      assertEquals("MANUAL", wRun.get("source"));
      assertEquals(ElasticJobClassName.RECORDING_JOB, zk.data("/" + EJ_JOB));
      assertEquals(ElasticJobClassName.RECORDING_JOB, zk.data("/" + SC_JOB));
      c.assertNoOverlap(EJ_JOB);
      c.assertNoOverlap(SC_JOB);
    }
  }

  static Set<Integer> items(Cluster c, String job, long since) {
    return c.runs(job).stream().filter(r -> r.start() >= since).map(Run::item).collect(Collectors.toSet());
  }
}
