package io.shardcar.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.interop.harness.Cluster;
import io.shardcar.interop.harness.Job;
import io.shardcar.interop.harness.Member;
import io.shardcar.interop.harness.Run;
import io.shardcar.interop.harness.Sidecar;
import io.shardcar.interop.harness.Zk;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/**
 * Operations from {@code shardcar ctl} are honoured by ElasticJob members: trigger, disable and
 * enable of an item, of a server and of the job, a config change ({@code job put}: cron and item
 * count), remote shutdown of an ElasticJob instance, and removing the job ({@code job rm}).
 *
 * <p>Members: a shardcar worker W (sidecar 127.0.0.2, creates the job, so shardcar leads) and two
 * ElasticJob JVMs E1, E2 (one server, the host's IP).
 */
class CtlTest {
  private static final String JOB = "ctlJob";
  private static final Duration T = Duration.ofSeconds(30);

  @Test
  void elasticJobMembersHonourShardcarCtl() throws IOException {
    try (Cluster c = Cluster.start("Ctl")) {
      Zk zk = c.zk();
      Sidecar s = c.sidecar("127.0.0.2");
      Member w = c.shardcar("sc", s, Job.named(JOB).total(4).cron(Job.NEVER).failover(true).withConfig(true));
      Member e1 = c.elasticJob("ej1", Job.named(JOB).total(1).cron(Job.NEVER));
      Member e2 = c.elasticJob("ej2", Job.named(JOB).total(1).cron(Job.NEVER));
      String wId = w.instanceId(JOB);
      String e1Id = e1.instanceId(JOB);
      String e2Id = e2.instanceId(JOB);
      String eIp = e1Id.substring(0, e1Id.indexOf("@-@"));
      Set<String> all = Set.of(wId, e1Id, e2Id);
      c.await(JOB, "the shardcar leader shards 4 items over W, E1 and E2", T,
          () -> zk.shardingSettled(JOB) && zk.owners(JOB).size() == 4 && new HashSet<>(zk.owners(JOB).values()).equals(all));

      // ---- ctl trigger: each ElasticJob member runs its own items once ---------------------------
      long t1 = System.currentTimeMillis();
      s.ctlOk("trigger", JOB);
      c.await(JOB, "every member runs its items", T, () -> ranAll(c, zk, t1, w, e1, e2) && finished(c, t1));

      // ---- ctl disable/enable --item: the ElasticJob member skips the disabled item ----------------
      int item = zk.itemsOf(JOB, e1Id).get(0);
      s.ctlOk("disable", JOB, "--item", Integer.toString(item));
      assertTrue(zk.exists("/" + JOB + "/sharding/" + item + "/disabled"), "ctl wrote ElasticJob's item-disabled node");
      long t2 = System.currentTimeMillis();
      s.ctlOk("trigger", JOB);
      Set<Integer> e1Rest = new HashSet<>(zk.itemsOf(JOB, e1Id));
      e1Rest.remove(item);
      c.await(JOB, "E1 runs its items but the disabled one, the others theirs", T,
          () -> ran(c, e1, t2).equals(e1Rest) && ran(c, e2, t2).equals(Set.copyOf(zk.itemsOf(JOB, e2Id)))
              && ran(c, w, t2).equals(Set.copyOf(zk.itemsOf(JOB, wId))) && finished(c, t2) && triggersConsumed(zk));
      s.ctlOk("enable", JOB, "--item", Integer.toString(item));
      assertFalse(zk.exists("/" + JOB + "/sharding/" + item + "/disabled"));
      long t3 = System.currentTimeMillis();
      s.ctlOk("trigger", JOB);
      c.await(JOB, "E1 runs the item again once enabled", T, () -> ran(c, e1, t3).contains(item) && finished(c, t3));

      // ---- ctl disable/enable --server: the ElasticJob server gives its items up -------------------
      s.ctlOk("disable", JOB, "--server", eIp);
      assertEquals("DISABLED", zk.data("/" + JOB + "/servers/" + eIp));
      c.await(JOB, "with the ElasticJob server disabled, W holds every item", T, () -> zk.shardingSettled(JOB)
          && zk.owners(JOB).equals(Map.of(0, wId, 1, wId, 2, wId, 3, wId)) && Set.of(0, 1, 2, 3).equals(w.assignment(JOB).orElse(null)));
      long t4 = System.currentTimeMillis();
      s.ctlOk("trigger", JOB);
      c.await(JOB, "W runs all four items, the ElasticJob members consumed the trigger", T,
          () -> ran(c, w, t4).equals(Set.of(0, 1, 2, 3)) && finished(c, t4) && triggersConsumed(zk));
      assertEquals(Set.of(), ran(c, e1, t4), "a disabled ElasticJob server runs nothing");
      assertEquals(Set.of(), ran(c, e2, t4), "a disabled ElasticJob server runs nothing");
      s.ctlOk("enable", JOB, "--server", eIp);
      c.await(JOB, "the ElasticJob server enabled, its members get items back", T,
          () -> zk.shardingSettled(JOB) && zk.owners(JOB).size() == 4 && new HashSet<>(zk.owners(JOB).values()).equals(all));

      // ---- ctl job put: cron and item count --------------------------------------------------------
      Path file = c.dir().resolve("ctlJob.yaml");
      Files.writeString(file, "jobName: " + JOB + "\ncron: 0/1 * * * * ?\nshardingTotalCount: 6\nfailover: true\n");
      long t5 = System.currentTimeMillis();
      s.ctlOk("job", "put", file.toString());
      c.await(JOB, "6 items sharded over the three members", T, () -> zk.shardingSettled(JOB) && zk.owners(JOB).size() == 6
          && new HashSet<>(zk.owners(JOB).values()).equals(all));
      c.await(JOB, "both ElasticJob members fire on the new cron with 6 items", T,
          () -> c.runsOf(JOB, e1, t5).stream().anyMatch(r -> r.finished() && "6".equals(r.startRec().get("total")))
              && c.runsOf(JOB, e2, t5).stream().anyMatch(r -> r.finished() && "6".equals(r.startRec().get("total"))));
      Files.writeString(file, "jobName: " + JOB + "\ncron: " + Job.NEVER + "\nshardingTotalCount: 6\nfailover: true\n");
      s.ctlOk("job", "put", file.toString());
      long quiet = System.currentTimeMillis() + 1500;
      c.await(JOB, "the cron back in 2099, every run ends", T, () -> System.currentTimeMillis() > quiet && finished(c, 0));

      // ---- ctl disable/enable of the job --------------------------------------------------------------
      s.ctlOk("disable", JOB);
      c.await(JOB, "every server DISABLED", T, () -> zk.children("/" + JOB + "/servers").stream()
          .allMatch(ip -> "DISABLED".equals(zk.data("/" + JOB + "/servers/" + ip))));
      long t6 = System.currentTimeMillis();
      s.ctlOk("trigger", JOB);
      c.await(JOB, "every member consumed the trigger", T, () -> triggersConsumed(zk));
      assertEquals(List.of(), c.runs(JOB).stream().filter(r -> r.start() >= t6).toList(), "a disabled job runs nothing");
      s.ctlOk("enable", JOB);
      // Whoever wins the election now leads: a sidecar reshards at once, ElasticJob at its next fire.
      // Every member runs its new items at that fire (a member waits for a pending reshard first),
      // and all of those runs end before the next trigger: a busy member drops a trigger.
      long t7 = System.currentTimeMillis();
      s.ctlOk("trigger", JOB);
      c.await(JOB, "the job enabled, sharded over the three members again, and each ran its items", T,
          () -> new HashSet<>(zk.owners(JOB).values()).equals(all) && zk.shardingSettled(JOB)
              && zk.children("/" + JOB + "/servers").stream().allMatch(ip -> "ENABLED".equals(zk.data("/" + JOB + "/servers/" + ip)))
              && ranAtLeast(c, zk, t7, w, e1, e2) && finished(c, 0));
      long enabled = System.currentTimeMillis();
      s.ctlOk("trigger", JOB);
      c.await(JOB, "after enabling, every member runs its items", T, () -> ranAll(c, zk, enabled, w, e1, e2) && finished(c, enabled));

      // ---- ctl shutdown of an ElasticJob instance --------------------------------------------------------
      s.ctlOk("shutdown", e2Id, "--job", JOB);
      c.await(JOB, "ElasticJob shuts E2's job down (remote shutdown)", T, () -> e2.recs().stream().anyMatch(r -> r.is("shutdown")));
      assertTrue(e2.waitFor(T) >= 0, "E2 exits once its only job is shut down");
      s.ctlOk("trigger", JOB);
      c.await(JOB, "E2's items go to W and E1", T, () -> zk.shardingSettled(JOB) && !zk.instances(JOB).contains(e2Id)
          && zk.owners(JOB).size() == 6 && Set.of(wId, e1Id).containsAll(zk.owners(JOB).values()));

      // ---- ctl job rm: every instance shut down, then the job removed -----------------------------------
      c.await(JOB, "every run ends", T, () -> finished(c, 0));
      s.ctlOk("job", "rm", JOB);
      c.await(JOB, "ElasticJob shuts E1's job down, W gets Shutdown", T, () -> e1.recs().stream().anyMatch(r -> r.is("shutdown"))
          && w.recs().stream().anyMatch(r -> r.is("shutdown")));
      assertTrue(e1.waitFor(T) >= 0, "E1 exits");
      assertTrue(w.waitFor(T) >= 0, "W exits");
      c.await(JOB, "the job is gone", T, () -> !zk.exists("/" + JOB));
      c.assertNoOverlap(JOB);
    }
  }

  static Set<Integer> ran(Cluster c, Member m, long since) {
    return c.runsOf(JOB, m, since).stream().map(Run::item).collect(Collectors.toSet());
  }

  static boolean ranAll(Cluster c, Zk zk, long since, Member... members) {
    for (Member m : members) {
      if (!ran(c, m, since).equals(Set.copyOf(zk.itemsOf(JOB, m.instanceId(JOB))))) {
        return false;
      }
    }
    return true;
  }

  /** Each member ran at least the items it owns now since {@code since}. */
  static boolean ranAtLeast(Cluster c, Zk zk, long since, Member... members) {
    for (Member m : members) {
      if (!ran(c, m, since).containsAll(zk.itemsOf(JOB, m.instanceId(JOB)))) {
        return false;
      }
    }
    return true;
  }

  static boolean finished(Cluster c, long since) {
    return c.runs(JOB).stream().filter(r -> r.start() >= since).allMatch(Run::finished);
  }

  static boolean triggersConsumed(Zk zk) {
    return zk.children("/" + JOB + "/trigger").isEmpty();
  }
}
