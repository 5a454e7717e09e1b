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
import org.junit.jupiter.api.Test;

/**
 * {@code shardcar ctl trigger JOB --parameter P} in a job a shardcar worker shares with an ElasticJob
 * member: P is the data of every {@code trigger/{instance}} node; the worker's run carries it as its
 * job parameter; the ElasticJob member, which ignores the node's data, still runs the trigger (with
 * the job's own parameter) and deletes its node as always.
 *
 * <p>Members: an ElasticJob JVM E (creates the job, leads) and a shardcar worker W (sidecar 127.0.0.2),
 * two items, one each.
 */
class TriggerParameterTest {
  private static final String JOB = "triggerParam";
  private static final Duration T = Duration.ofSeconds(30);
  private static final String OWN = "from-elasticjob";
  /** Spaces, '=', a non-ASCII letter: the node's data is the parameter's UTF-8 bytes. */
  private static final String PARAMETER = "from-ctl x=1 two words é";

  @Test
  void aTriggersParameterReachesTheWorkerWhileElasticJobRunsTheTriggerWithTheJobsOwn() {
    try (Cluster c = Cluster.start("TriggerParameter")) {
      Zk zk = c.zk();
      Member e = c.elasticJob("ej", Job.named(JOB).total(2).cron(Job.NEVER).params("0=a,1=b").jobParameter(OWN));
      String eId = e.instanceId(JOB);
      c.await(JOB, "ElasticJob leads", T, () -> eId.equals(zk.leader(JOB)));
      String config = zk.data("/" + JOB + "/config");
      Sidecar s = c.sidecar("127.0.0.2");
      Member w = c.shardcar("sc", s, Job.named(JOB).withConfig(false));
      String wId = w.instanceId(JOB);

      // ElasticJob's next fire (its lifecycle API's trigger) gives the worker its item.
      Map<Integer, String> shares = Expected.avg(JOB, 2, eId, wId);
      Map<Member, Integer> own = Map.of(e, Expected.itemsOf(shares, eId).iterator().next(),
          w, Expected.itemsOf(shares, wId).iterator().next());
      long t0 = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      // At this fire ElasticJob's leader may also run the item it has just given away (its #2195): at least its own.
      c.await(JOB, "ElasticJob's fire gives each member one item and each runs it", T,
          () -> zk.owners(JOB).equals(shares) && zk.shardingSettled(JOB) && own.entrySet().stream()
              .allMatch(o -> c.runsOf(JOB, o.getKey(), t0).stream().anyMatch(r -> r.item() == o.getValue())) && c.idle(JOB));

      // ---- ctl trigger --parameter P: E is frozen for the moment it takes to read its node ------------
      e.pause();
      long t1 = System.currentTimeMillis();
      String eNode;
      List<String> nodes;
      long resumed;
      try {
        s.ctlOk("trigger", JOB, "--parameter", PARAMETER);
        nodes = zk.children("/" + JOB + "/trigger");
        eNode = zk.data("/" + JOB + "/trigger/" + eId);
      } finally {
        resumed = System.currentTimeMillis();
        e.resume();
      }
      System.err.println("ElasticJob frozen for " + (resumed - t1) + " ms while its trigger node was read; nodes then: " + nodes);
      assertEquals(PARAMETER, eNode, "P is the data of ElasticJob's trigger node (nodes then: " + nodes + ")");
      c.await(JOB, "each member runs its item and every trigger node is deleted", T,
          () -> ranOwnItems(c, t1, own) && c.idle(JOB));
      Run wRun = c.runsOf(JOB, w, t1).get(0);
      Run eRun = c.runsOf(JOB, e, t1).get(0);
      assertEquals(PARAMETER, wRun.startRec().get("jobParameter"), "the worker's run carries P: " + wRun);
      assertEquals("MANUAL", wRun.source(), wRun.toString());
      assertEquals(OWN, eRun.startRec().get("jobParameter"), "ElasticJob runs the trigger with the job's own parameter: " + eRun);
      assertTrue(eRun.start() >= resumed, "ElasticJob ran it once resumed: " + eRun);
      assertEquals(config, zk.data("/" + JOB + "/config"), "the job's parameter is not changed");

      // ---- a trigger without a parameter: the job's own parameter on both sides again ------------------
      long t2 = System.currentTimeMillis();
      s.ctlOk("trigger", JOB);
      c.await(JOB, "each member runs its item again", T, () -> ranOwnItems(c, t2, own) && c.idle(JOB));
      for (Run r : List.of(c.runsOf(JOB, w, t2).get(0), c.runsOf(JOB, e, t2).get(0))) {
        assertEquals(OWN, r.startRec().get("jobParameter"), "the next trigger carries the job's own parameter: " + r);
      }

      // ---- ElasticJob's own trigger (empty nodes) after it: the same --------------------------------------
      long t3 = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      c.await(JOB, "each member runs its item on ElasticJob's trigger", T, () -> ranOwnItems(c, t3, own) && c.idle(JOB));
      for (Run r : List.of(c.runsOf(JOB, w, t3).get(0), c.runsOf(JOB, e, t3).get(0))) {
        assertEquals(OWN, r.startRec().get("jobParameter"), r.toString());
      }
      assertEquals(config, zk.data("/" + JOB + "/config"), "the config is untouched, byte for byte");
      assertEquals(Set.of(eId, wId), Set.copyOf(zk.instances(JOB)), "both instances are still there");
      c.assertNoOverlap(JOB);
    }
  }

  /** Each member ran its one item, once, since {@code since}. */
  static boolean ranOwnItems(Cluster c, long since, Map<Member, Integer> own) {
    for (Map.Entry<Member, Integer> e : own.entrySet()) {
      List<Run> runs = c.runsOf(JOB, e.getKey(), since);
      if (runs.size() != 1 || runs.get(0).item() != e.getValue()) {
        return false;
      }
    }
    return true;
  }
}
