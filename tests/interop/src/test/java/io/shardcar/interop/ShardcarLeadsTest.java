package io.shardcar.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.interop.harness.Cluster;
import io.shardcar.interop.harness.Expected;
import io.shardcar.interop.harness.Job;
import io.shardcar.interop.harness.Member;
import io.shardcar.interop.harness.Run;
import io.shardcar.interop.harness.Sidecar;
import io.shardcar.interop.harness.Zk;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/**
 * shardcar leads and an ElasticJob member joins without a config of its own: it reads shardcar's
 * (item parameters included), gets its items from the shardcar leader with no fire at all, runs
 * them, and when it stops shardcar takes every item back.
 */
class ShardcarLeadsTest {
  private static final String JOB = "scLeads";
  private static final Duration T = Duration.ofSeconds(30);

  @Test
  void elasticJobMemberJoinsAShardcarLeaderAndGivesItsItemsBackWhenItStops() {
    try (Cluster c = Cluster.start("ShardcarLeads")) {
      Zk zk = c.zk();
      Sidecar s = c.sidecar("127.0.0.2");
      // The job never fires on its cron during the test: every run below comes from a trigger.
      Member w = c.shardcar("sc1", s, Job.named(JOB).total(3).cron(Job.NEVER).params("0=alpha,1=beta,2=gamma")
          .jobParameter("from-shardcar").failover(true).description("written by shardcar").withConfig(true));
      String wId = w.instanceId(JOB);
      c.await(JOB, "shardcar leads and holds every item", T,
          () -> wId.equals(zk.leader(JOB)) && zk.owners(JOB).equals(Map.of(0, wId, 1, wId, 2, wId)));
      String config = zk.data("/" + JOB + "/config");
      assertEquals("", zk.data("/" + JOB), "shardcar creates the job root empty");

      // The ElasticJob member brings only a placeholder (1 item, no parameters, another cron): ZooKeeper's config wins.
      Member e = c.elasticJob("ej1", Job.named(JOB).total(1).cron("0/1 * * * * ?"));
      String eId = e.instanceId(JOB);
      assertEquals(config, zk.data("/" + JOB + "/config"), "ElasticJob did not write its placeholder config");

      // Its items come from the shardcar leader at once: no fire is needed (none can happen: the cron is in 2099).
      // AVG_ALLOCATION over [192.0.2.2@-@…, 127.0.0.2@-@…] (descending), 3 items: ElasticJob [0, 2], shardcar [1].
      Map<Integer, String> shares = Expected.avg(JOB, 3, eId, wId);
      Set<Integer> eItems = Expected.itemsOf(shares, eId);
      Set<Integer> wItems = Expected.itemsOf(shares, wId);
      c.await(JOB, "the shardcar leader gives the ElasticJob member its share without any fire", T,
          () -> zk.owners(JOB).equals(shares) && zk.shardingSettled(JOB));
      assertEquals(wId, zk.leader(JOB), "shardcar still leads");
      assertEquals(List.of(), c.runs(JOB), "nothing ran: the sharding came without a fire");
      c.await(JOB, "the shardcar worker is told it keeps " + wItems + " only", T, () -> wItems.equals(w.assignment(JOB).orElse(null)));

      // It runs them, with shardcar's item parameters, item count and job parameter.
      long triggered = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      c.await(JOB, "each side runs its own items", T,
          () -> items(c.runsOf(JOB, e, triggered)).equals(eItems) && items(c.runsOf(JOB, w, triggered)).equals(wItems));
      Map<Integer, String> params = Map.of(0, "alpha", 1, "beta", 2, "gamma");
      for (Run r : c.runsOf(JOB, e, triggered)) {
        assertEquals(params.get(r.item()), r.startRec().get("param"), "shardcar's item parameter: " + r);
        assertEquals("3", r.startRec().get("total"), "shardcar's item count: " + r);
        assertEquals("from-shardcar", r.startRec().get("jobParameter"), "shardcar's job parameter: " + r);
      }
      for (Run r : c.runsOf(JOB, w, triggered)) {
        assertEquals(params.get(r.item()), r.startRec().get("param"));
        assertEquals("MANUAL", r.source());
      }
      c.await(JOB, "every run finished", T, () -> c.runs(JOB).stream().allMatch(Run::finished));

      // It stops (SIGTERM: ElasticJob's own shutdown hook removes its instance): shardcar takes every item back.
      e.terminate();
      assertTrue(e.waitFor(Duration.ofSeconds(30)) >= 0, "the ElasticJob member exits on SIGTERM");
      c.await(JOB, "shardcar takes every item back", T,
          () -> zk.owners(JOB).equals(Map.of(0, wId, 1, wId, 2, wId)) && zk.shardingSettled(JOB)
              && Set.of(0, 1, 2).equals(w.assignment(JOB).orElse(null)));
      long again = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      c.await(JOB, "the shardcar worker runs all three items", T,
          () -> items(c.runsOf(JOB, w, again)).equals(Set.of(0, 1, 2)) && c.runsOf(JOB, w, again).stream().allMatch(Run::finished));
      assertTrue(zk.instances(JOB).equals(List.of(wId)), "only the shardcar worker is left: " + zk.instances(JOB));
      c.assertNoOverlap(JOB);
    }
  }

  static Set<Integer> items(List<Run> runs) {
    return runs.stream().map(Run::item).collect(Collectors.toSet());
  }
}
