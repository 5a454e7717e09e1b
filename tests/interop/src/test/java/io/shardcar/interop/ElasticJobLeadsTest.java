package io.shardcar.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.interop.harness.Cluster;
import io.shardcar.interop.harness.Expected;
import io.shardcar.interop.harness.Job;
import io.shardcar.interop.harness.Member;
import io.shardcar.interop.harness.Rec;
import io.shardcar.interop.harness.Run;
import io.shardcar.interop.harness.Sidecar;
import io.shardcar.interop.harness.Zk;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * An ElasticJob member leads and a shardcar worker joins: the worker adopts ElasticJob's config and
 * gets its share at ElasticJob's next fire; both run only their own items; each kills the other in
 * the middle of an item and the survivor runs the interrupted items as a failover.
 */
class ElasticJobLeadsTest {
  private static final String JOB = "ejLeads";
  private static final Duration T = Duration.ofSeconds(30);

  @Test
  void shardcarWorkerJoinsAnElasticJobLeaderAndEachTakesOverTheOther() {
    Job ejConfig = Job.named(JOB).total(4).cron("0/2 * * * * ?").params("0=a,1=b,2=c,3=d").jobParameter("from-elasticjob")
        .failover(true).description("written by ElasticJob");
    try (Cluster c = Cluster.start("ElasticJobLeads")) {
      Zk zk = c.zk();
      Member e1 = c.elasticJob("ej1", ejConfig);
      String e1Id = e1.instanceId(JOB);
      c.await(JOB, "ElasticJob leads and, at its first fire, shards every item to itself", T,
          () -> e1Id.equals(zk.leader(JOB)) && zk.owners(JOB).equals(Map.of(0, e1Id, 1, e1Id, 2, e1Id, 3, e1Id)));
      String root = zk.data("/" + JOB);
      String config = zk.data("/" + JOB + "/config");
      assertEquals(ElasticJobClassName.RECORDING_JOB, root, "ElasticJob writes its job class into the root node");

      // A shardcar worker joins with a config of its own: the sidecar adopts ElasticJob's.
      Sidecar s = c.sidecar("127.0.0.2");
      Member w1 = c.shardcar("sc1", s, Job.named(JOB).total(2).cron("0/7 * * * * ?").params("0=x,1=y").jobParameter("mine")
          .withConfig(true));
      String w1Id = w1.instanceId(JOB);
      Rec reg = w1.recs().stream().filter(r -> r.is("registered")).findFirst().orElseThrow();
      assertEquals("4", reg.get("total"), "adopted item count: " + reg);
      assertEquals("0/2 * * * * ?", reg.get("cron"), "adopted cron: " + reg);
      assertEquals("0=a,1=b,2=c,3=d", reg.get("params"), "adopted item parameters: " + reg);
      assertEquals("from-elasticjob", reg.get("jobParameter"), "adopted job parameter: " + reg);
      assertEquals("true", reg.get("failover"), "adopted failover: " + reg);
      assertEquals(config, zk.data("/" + JOB + "/config"), "the config ElasticJob wrote is untouched");
      assertEquals(root, zk.data("/" + JOB), "the root node still holds ElasticJob's class name");

      // It gets its share at ElasticJob's next fire: ElasticJob (still the leader) reshards. With the
      // host's IP 192.0.2.2 (above 127.0.0.2): ElasticJob [0, 1], shardcar [2, 3].
      Map<Integer, String> shares = Expected.avg(JOB, 4, e1Id, w1Id);
      Set<Integer> eItems = Expected.itemsOf(shares, e1Id);
      Set<Integer> wItems = Expected.itemsOf(shares, w1Id);
      c.await(JOB, "ElasticJob's next fire gives the shardcar worker its share " + wItems, T, () -> zk.owners(JOB).equals(shares));
      assertEquals(e1Id, zk.leader(JOB), "ElasticJob still leads, so ElasticJob wrote that sharding");
      Rec firstAssignment = w1.recs().stream().filter(r -> r.is("assignment")).findFirst().orElseThrow();
      assertEquals(Set.of(), firstAssignment.items(), "a shardcar worker that does not lead gets nothing before ElasticJob reshards");
      long resharded = zk.stat("/" + JOB + "/sharding/" + wItems.iterator().next() + "/instance").getMtime();
      assertTrue(zk.stat("/" + JOB + "/instances/" + w1Id).getCtime() <= resharded, "resharded after the worker joined");
      c.await(JOB, "ElasticJob's items start after the reshard", T,
          () -> c.runs(JOB).stream().anyMatch(r -> r.member().equals("ej1") && r.start() >= resharded));
      long firstAfter = c.runs(JOB).stream().filter(r -> r.member().equals("ej1") && r.start() >= resharded)
          .mapToLong(Run::start).min().orElseThrow();
      assertTrue(firstAfter - resharded < 1500,
          "the reshard was part of an ElasticJob fire (its items started right after it, not at a later fire):\n" + c.state(JOB));

      // Both run only their own items, with no overlap.
      long shared = System.currentTimeMillis();
      c.await(JOB, "both sides complete their own items twice", T,
          () -> completed(c, w1, shared, wItems) >= 2 && completed(c, e1, shared, eItems) >= 2);
      for (Run r : c.runs(JOB)) {
        if (r.start() >= shared) {
          Set<Integer> own = r.member().equals("ej1") ? eItems : wItems;
          assertTrue(own.contains(r.item()), "a member ran an item it does not own: " + r + "\n" + c.state(JOB));
        }
      }
      c.assertNoOverlap(JOB);

      // The shardcar worker is SIGKILLed in the middle of its items: ElasticJob runs them as a failover.
      c.slow(w1, true);
      c.await(JOB, "the shardcar worker in the middle of its items", T, () -> openSlowRuns(c, w1).containsAll(wItems));
      long killedW1 = w1.kill();
      c.slow(w1, false);
      c.await(JOB, "ElasticJob runs the worker's items as its failover (sharding/{i}/failovering = its id)", T,
          () -> failoverRunsByElasticJob(c, e1, e1Id, killedW1).containsAll(wItems));
      c.assertNoOverlap(JOB);

      // A new shardcar worker joins (by job name only) and gets its share at ElasticJob's next fire.
      Member w2 = c.shardcar("sc2", s, Job.named(JOB).withConfig(false));
      String w2Id = w2.instanceId(JOB);
      Map<Integer, String> shares2 = Expected.avg(JOB, 4, e1Id, w2Id);
      c.await(JOB, "ElasticJob's next fire gives the new worker its share", T, () -> zk.owners(JOB).equals(shares2));
      long shared2 = System.currentTimeMillis();
      c.await(JOB, "the new worker completes its items", T, () -> completed(c, w2, shared2, Expected.itemsOf(shares2, w2Id)) >= 1);
      Set<Integer> eItems2 = Expected.itemsOf(shares2, e1Id);

      // The ElasticJob member is SIGKILLed in the middle of its items: the shardcar worker runs them as FAILOVER.
      c.slow(e1, true);
      c.await(JOB, "ElasticJob in the middle of its items", T, () -> openSlowRuns(c, e1).containsAll(eItems2));
      long killedE1 = e1.kill();
      c.await(JOB, "the shardcar worker runs ElasticJob's items with source FAILOVER after ElasticJob's session expired", T,
          () -> c.runsOf(JOB, w2, killedE1).stream().filter(r -> "FAILOVER".equals(r.source()) && r.finished())
              .map(Run::item).collect(java.util.stream.Collectors.toSet()).containsAll(eItems2));
      c.assertNoOverlap(JOB);
      c.await(JOB, "shardcar leads and holds every item", T,
          () -> w2Id.equals(zk.leader(JOB)) && zk.owners(JOB).equals(Map.of(0, w2Id, 1, w2Id, 2, w2Id, 3, w2Id)));
      c.assertNoOverlap(JOB);
    }
  }

  /**
   * A shardcar host freezes (its sidecar SIGSTOPped) in the middle of an item: its worker's lease
   * runs out and the worker stops the item before the sidecar's ZooKeeper session can expire; then
   * ElasticJob sees the instance gone and runs the item as its failover. The two runs never overlap.
   */
  @Test
  void elasticJobTakesOverFromAFrozenShardcarHostOnlyAfterTheWorkerStopped() {
    String job = "hostJob";
    try (Cluster c = Cluster.start("FrozenHost")) {
      Zk zk = c.zk();
      Member e1 = c.elasticJob("ej1", Job.named(job).total(2).cron("0/2 * * * * ?").failover(true));
      String e1Id = e1.instanceId(job);
      c.await(job, "ElasticJob leads", T, () -> e1Id.equals(zk.leader(job)));
      Sidecar s = c.sidecar("127.0.0.2");
      Member w = c.shardcar("sc", s, Job.named(job).withConfig(false));
      String wId = w.instanceId(job);
      Map<Integer, String> shares = Expected.avg(job, 2, e1Id, wId);
      int item = Expected.itemsOf(shares, wId).iterator().next();
      c.await(job, "ElasticJob's next fire gives the worker one item", T, () -> zk.owners(job).equals(shares));
      // Not at the fire that resharded: ElasticJob's leader reads the owners back from its cache
      // right after writing them, and a stale read there runs the item it just gave away (its
      // issue #2195), overwriting and then deleting the worker's `running` node, so that the
      // freeze below would leave nothing for ElasticJob's crash handling to fail over. Once
      // each side has completed a run of its own item at a later fire, the sharding is settled.
      long resharded = zk.stat("/" + job + "/sharding/" + item + "/instance").getMtime();
      int eItem = Expected.itemsOf(shares, e1Id).iterator().next();
      c.await(job, "each side completes a run of its own item at a fire after the reshard", T,
          () -> c.runsOf(job, w, resharded).stream().anyMatch(r -> r.item() == item && r.finished() && r.start() > resharded + 1000)
              && c.runsOf(job, e1, resharded).stream().anyMatch(r -> r.item() == eItem && r.finished() && r.start() > resharded + 1000));
      c.slow(w, true);
      c.await(job, "the shardcar worker in the middle of its item, its running node in place", T,
          () -> c.runsOf(job, w, 0).stream().anyMatch(r -> r.item() == item && !r.finished() && "true".equals(r.startRec().get("slow")))
              && wId.equals(zk.data("/" + job + "/sharding/" + item + "/running")));
      s.pause();
      long frozen = System.currentTimeMillis();
      c.await(job, "ElasticJob runs the item as its failover once the frozen sidecar's session expired", T,
          () -> c.runsOf(job, e1, frozen).stream().anyMatch(r -> r.item() == item && e1Id.equals(r.startRec().get("failovering"))));
      Run stopped = c.runsOf(job, w, 0).stream().filter(r -> r.item() == item && "true".equals(r.startRec().get("slow")))
          .findFirst().orElseThrow();
      assertTrue(stopped.finished(), "the worker stopped its item when its lease ran out: " + stopped + "\n" + c.state(job));
      c.assertNoOverlap(job);
      s.kill();
    }
  }

  /** How many runs of {@code m} of each of {@code items} completed since {@code since} (the minimum over the items). */
  static long completed(Cluster c, Member m, long since, Set<Integer> items) {
    long min = Long.MAX_VALUE;
    for (int item : items) {
      min = Math.min(min, c.runsOf(JOB, m, since).stream().filter(r -> r.item() == item && r.finished()).count());
    }
    return min;
  }

  /** Items {@code m} is in the middle of, in a slow run. */
  static Set<Integer> openSlowRuns(Cluster c, Member m) {
    return c.runsOf(JOB, m, 0).stream().filter(r -> !r.finished() && "true".equals(r.startRec().get("slow")))
        .map(Run::item).collect(java.util.stream.Collectors.toSet());
  }

  /** Items ElasticJob ran, completed, after {@code since}, on a failover claim of its own. */
  static Set<Integer> failoverRunsByElasticJob(Cluster c, Member e, String eId, long since) {
    List<Run> runs = c.runsOf(JOB, e, since);
    return runs.stream().filter(r -> r.finished() && eId.equals(r.startRec().get("failovering")))
        .map(Run::item).collect(java.util.stream.Collectors.toSet());
  }
}
