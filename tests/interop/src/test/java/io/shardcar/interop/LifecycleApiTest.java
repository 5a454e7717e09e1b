package io.shardcar.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.interop.harness.Cluster;
import io.shardcar.interop.harness.Expected;
import io.shardcar.interop.harness.Job;
import io.shardcar.interop.harness.Member;
import io.shardcar.interop.harness.Run;
import io.shardcar.interop.harness.Zk;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.Collectors;
import org.apache.shardingsphere.elasticjob.infra.pojo.JobConfigurationPOJO;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.domain.JobBriefInfo;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.domain.ServerBriefInfo;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.domain.ShardingInfo;
import org.junit.jupiter.api.Test;

/**
 * ElasticJob's own operations API ({@code elasticjob-lite-lifecycle}: JobOperateAPI,
 * JobConfigurationAPI) drives a mixed cluster, and shardcar workers honour it: trigger, disable and
 * enable of a server and of the job, a cron and item-count change, remote shutdown of an instance.
 * JobStatisticsAPI, ServerStatisticsAPI and ShardingStatisticsAPI report shardcar's instances and
 * items as they are.
 *
 * <p>Members: shardcar workers W2 (sidecar 127.0.0.2, creates the job) and W3 (127.0.0.3), and an
 * ElasticJob JVM E. With the host's IP 192.0.2.2 the descending instance order is [E, W3, W2], so
 * AVG_ALLOCATION of 4 items gives E [0, 3], W3 [1], W2 [2] (the owners are computed with
 * ElasticJob's strategy class, {@code Expected}, so another host IP works too).
 */
class LifecycleApiTest {
  private static final String JOB = "opsJob";
  private static final Duration T = Duration.ofSeconds(30);

  @Test
  void elasticJobsLifecycleApiDrivesShardcarWorkers() {
    try (Cluster c = Cluster.start("LifecycleApi")) {
      Zk zk = c.zk();
      Member w2 = c.shardcar("sc2", c.sidecar("127.0.0.2"), Job.named(JOB).total(4).cron(Job.NEVER).failover(true)
          .description("ops").withConfig(true));
      Member w3 = c.shardcar("sc3", c.sidecar("127.0.0.3"), Job.named(JOB).withConfig(false));
      Member e = c.elasticJob("ej", Job.named(JOB).total(1).cron(Job.NEVER));
      String w2Id = w2.instanceId(JOB);
      String w3Id = w3.instanceId(JOB);
      String eId = e.instanceId(JOB);
      String eIp = eId.substring(0, eId.indexOf("@-@"));
      Map<Integer, String> start = Expected.avg(JOB, 4, eId, w2Id, w3Id);
      int w2Item = Expected.itemsOf(start, w2Id).iterator().next();
      int w3Item = Expected.itemsOf(start, w3Id).iterator().next();
      c.await(JOB, "E [0, 3], W3 [1], W2 [2]", T, () -> zk.shardingSettled(JOB) && zk.owners(JOB).equals(start));

      // ---- statistics: what ElasticJob's console would show ---------------------------------
      JobBriefInfo brief = c.jobStatsApi().getJobBriefInfo(JOB);
      assertEquals(3, brief.getInstanceCount(), "instances");
      assertEquals(4, brief.getShardingTotalCount(), "items");
      assertEquals(Job.NEVER, brief.getCron());
      assertEquals("ops", brief.getDescription());
      assertEquals(JobBriefInfo.JobStatus.OK, brief.getStatus());
      assertEquals(1, c.jobStatsApi().getJobsTotalCount(), "jobs in the namespace");
      List<JobBriefInfo> onW2 = List.copyOf(c.jobStatsApi().getJobsBriefInfo("127.0.0.2"));
      assertEquals(1, onW2.size());
      assertEquals(1, onW2.get(0).getInstanceCount(), "instances on 127.0.0.2");
      assertEquals(JobBriefInfo.JobStatus.OK, onW2.get(0).getStatus());
      Map<String, ServerBriefInfo> servers = c.serverStatsApi().getAllServersBriefInfo().stream()
          .collect(Collectors.toMap(ServerBriefInfo::getServerIp, s -> s));
      assertEquals(Set.of("127.0.0.2", "127.0.0.3", eIp), servers.keySet());
      assertEquals(Set.of(w2Id), servers.get("127.0.0.2").getInstances());
      assertEquals(Set.of(w3Id), servers.get("127.0.0.3").getInstances());
      assertEquals(Set.of(JOB), servers.get("127.0.0.3").getJobNames());
      assertEquals(0, servers.get("127.0.0.3").getDisabledJobsNum().get());
      Map<Integer, ShardingInfo> items = sharding(c);
      assertEquals(Set.of(0, 1, 2, 3), items.keySet());
      assertEquals(w2Id, items.get(w2Item).getInstanceId());
      assertEquals("127.0.0.2", items.get(w2Item).getServerIp());
      assertEquals(w3Id, items.get(w3Item).getInstanceId());
      assertEquals("127.0.0.3", items.get(w3Item).getServerIp());
      start.forEach((i, owner) -> assertEquals(owner, items.get(i).getInstanceId(), "ShardingStatisticsAPI: owner of " + i));
      items.values().forEach(i -> assertEquals(ShardingInfo.ShardingStatus.PENDING, i.getStatus(), "idle item " + i.getItem()));

      // ---- trigger: every instance runs its items once (the shardcar workers: source MANUAL) --
      c.slow(w2, true);
      long t1 = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      c.await(JOB, "a triggered run of every item", T, () -> ran(c, w2, t1).equals(Set.of(w2Item)) && ran(c, w3, t1).equals(Set.of(w3Item))
          && ran(c, e, t1).equals(Expected.itemsOf(start, eId)));
      assertTrue(c.runsOf(JOB, w2, t1).stream().allMatch(r -> "MANUAL".equals(r.source())));
      assertTrue(c.runsOf(JOB, w3, t1).stream().allMatch(r -> "MANUAL".equals(r.source())));
      c.await(JOB, "ShardingStatisticsAPI reports W2's item RUNNING on 127.0.0.2", T,
          () -> sharding(c).get(w2Item).getStatus() == ShardingInfo.ShardingStatus.RUNNING);
      assertEquals("127.0.0.2", sharding(c).get(w2Item).getServerIp());
      c.slow(w2, false);
      c.await(JOB, "the triggered runs end", T, () -> c.runs(JOB).stream().allMatch(Run::finished) && noRunning(zk));

      // ---- disable / enable a server ----------------------------------------------------------
      c.operateApi().disable(JOB, "127.0.0.3");
      Map<Integer, String> without3 = Expected.avg(JOB, 4, eId, w2Id);
      c.await(JOB, "W3 (server 127.0.0.3 disabled) gives its items up: E [0, 1], W2 [2, 3]", T,
          () -> zk.shardingSettled(JOB) && zk.owners(JOB).equals(without3)
              && Set.of().equals(w3.assignment(JOB).orElse(null)));
      assertEquals(1, c.serverStatsApi().getAllServersBriefInfo().stream().filter(s -> s.getServerIp().equals("127.0.0.3"))
          .findFirst().orElseThrow().getDisabledJobsNum().get(), "ServerStatisticsAPI: one disabled job on 127.0.0.3");
      long t2 = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      c.await(JOB, "E and W2 run their items, W3 consumed the trigger", T, () -> ran(c, w2, t2).equals(Expected.itemsOf(without3, w2Id))
          && ran(c, e, t2).equals(Expected.itemsOf(without3, eId)) && zk.children("/" + JOB + "/trigger").isEmpty() && allFinished(c, t2));
      assertEquals(Set.of(), ran(c, w3, t2), "W3's server is disabled: it runs nothing");
      c.operateApi().enable(JOB, "127.0.0.3");
      c.await(JOB, "W3 (server enabled) gets its item back", T,
          () -> zk.shardingSettled(JOB) && zk.owners(JOB).equals(start) && Set.of(w3Item).equals(w3.assignment(JOB).orElse(null)));

      // ---- configuration change: cron and item count ------------------------------------------
      JobConfigurationPOJO pojo = c.configApi().getJobConfiguration(JOB);
      pojo.setCron("0/1 * * * * ?");
      pojo.setShardingTotalCount(6);
      long t3 = System.currentTimeMillis();
      c.configApi().updateJobConfiguration(pojo);
      Map<Integer, String> six = Expected.avg(JOB, 6, eId, w2Id, w3Id);
      c.await(JOB, "6 items: E [0, 1], W3 [2, 3], W2 [4, 5]", T,
          () -> zk.shardingSettled(JOB) && zk.owners(JOB).equals(six) && Expected.itemsOf(six, w2Id).equals(w2.assignment(JOB).orElse(null)));
      c.await(JOB, "every member fires on the new cron with the new item count", T,
          () -> cronRuns(c, w2, t3).containsAll(Expected.itemsOf(six, w2Id)) && cronRuns(c, w3, t3).containsAll(Expected.itemsOf(six, w3Id))
              && cronRuns(c, e, t3).containsAll(Expected.itemsOf(six, eId)));
      for (Run r : c.runs(JOB)) {
        if (r.start() > t3 && !"MANUAL".equals(r.source())) {
          assertEquals("6", r.startRec().get("total"), "a run after the change sees 6 items: " + r);
        }
      }
      pojo.setCron(Job.NEVER);
      c.configApi().updateJobConfiguration(pojo);
      long quiet = System.currentTimeMillis() + 1500;
      c.await(JOB, "the cron change back to 2099 quiets the cluster", T,
          () -> System.currentTimeMillis() > quiet && allFinished(c, 0) && noRunning(zk));

      // ---- disable / enable the job --------------------------------------------------------------
      c.operateApi().disable(JOB, null);
      c.await(JOB, "every server DISABLED; the shardcar workers hold nothing", T,
          () -> zk.children("/" + JOB + "/servers").stream().allMatch(s -> "DISABLED".equals(zk.data("/" + JOB + "/servers/" + s)))
              && Set.of().equals(w2.assignment(JOB).orElse(null)) && Set.of().equals(w3.assignment(JOB).orElse(null)));
      assertEquals(JobBriefInfo.JobStatus.DISABLED, c.jobStatsApi().getJobBriefInfo(JOB).getStatus());
      long t4 = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      c.await(JOB, "every instance consumed the trigger", T, () -> zk.children("/" + JOB + "/trigger").isEmpty());
      assertEquals(List.of(), c.runs(JOB).stream().filter(r -> r.start() >= t4).toList(), "a disabled job runs nothing");
      c.operateApi().enable(JOB, null);
      // Whoever wins the election now leads: a sidecar reshards at once, ElasticJob at its next fire.
      // ElasticJob's fire may shard on server statuses its cache has not updated yet (every item to
      // itself); a sidecar left without items then sets the resharding flag, and the leader
      // reshards at the fire after: while the flag is up and no request is pending, trigger again.
      c.operateApi().trigger(JOB);
      String flag = "/" + JOB + "/leader/sharding/necessary";
      c.await(JOB, "the job enabled: sharded over the three, the shardcar workers told their items", T, () -> {
        if (zk.exists(flag) && zk.children("/" + JOB + "/trigger").isEmpty()) {
          c.operateApi().trigger(JOB);
        }
        return zk.shardingSettled(JOB) && zk.owners(JOB).equals(Expected.avg(JOB, 6, eId, w2Id, w3Id))
            && Expected.itemsOf(six, w2Id).equals(w2.assignment(JOB).orElse(null))
            && Expected.itemsOf(six, w3Id).equals(w3.assignment(JOB).orElse(null)) && allFinished(c, 0);
      });
      long enabled = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      // The runs' answers recorded too (their running nodes gone), not only their handlers
      // returned: the remote shutdown below revokes what W3 still runs, and an answer it has not
      // sent yet would then be refused, as the contract says.
      c.await(JOB, "after enabling, a trigger runs the shardcar workers' items, their answers recorded", T,
          () -> ran(c, w2, enabled).equals(w2.assignment(JOB).orElse(Set.of())) && ran(c, w3, enabled).equals(w3.assignment(JOB).orElse(Set.of()))
              && allFinished(c, enabled) && noRunning(zk));

      // ---- remote shutdown of an instance (by its server IP) ------------------------------------
      c.operateApi().shutdown(JOB, "127.0.0.3");
      assertTrue(w3.waitFor(T) >= 0, "W3 stops after its sidecar's Shutdown:\n" + w3.logTail(3000));
      assertTrue(w3.recs().stream().anyMatch(r -> r.is("shutdown")), "W3 was sent Shutdown: " + w3.recs());
      assertTrue(w3.recs().stream().anyMatch(r -> r.is("exit")), "W3's worker ended");
      c.operateApi().trigger(JOB); // lets an ElasticJob leader (if it won the re-election) reshard at its fire
      c.await(JOB, "W3's items go to E and W2", T, () -> zk.shardingSettled(JOB) && !zk.instances(JOB).contains(w3Id)
          && zk.owners(JOB).size() == 6 && Set.of(eId, w2Id).containsAll(zk.owners(JOB).values()));
      assertEquals(2, c.jobStatsApi().getJobBriefInfo(JOB).getInstanceCount());
      c.assertNoOverlap(JOB);
      assertTrue(c.recs().stream().noneMatch(r -> r.is("refused")), "no answer was refused: " + c.recs().stream().filter(r -> r.is("refused")).toList());
    }
  }

  private static Map<Integer, ShardingInfo> sharding(Cluster c) {
    Map<Integer, ShardingInfo> m = new TreeMap<>();
    c.shardingStatsApi().getShardingInfo(JOB).forEach(i -> m.put(i.getItem(), i));
    return m;
  }

  static Set<Integer> ran(Cluster c, Member m, long since) {
    return c.runsOf(JOB, m, since).stream().map(Run::item).collect(Collectors.toSet());
  }

  static Set<Integer> cronRuns(Cluster c, Member m, long since) {
    return c.runsOf(JOB, m, since).stream().filter(r -> r.finished() && !"MANUAL".equals(r.source())).map(Run::item)
        .collect(Collectors.toSet());
  }

  static boolean allFinished(Cluster c, long since) {
    return c.runs(JOB).stream().filter(r -> r.start() >= since).allMatch(Run::finished);
  }

  static boolean noRunning(Zk zk) {
    return zk.children("/" + JOB + "/sharding").stream().noneMatch(i -> zk.exists("/" + JOB + "/sharding/" + i + "/running"));
  }
}
