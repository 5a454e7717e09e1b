package io.shardcar.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.interop.harness.Cluster;
import io.shardcar.interop.harness.Job;
import io.shardcar.interop.harness.Member;
import io.shardcar.interop.harness.Zk;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;

/**
 * AVG_ALLOCATION, ODEVITY and ROUND_ROBIN over one mixed membership (two ElasticJob JVMs, two
 * shardcar workers on two sidecars): the owners shardcar's leader writes are the owners ElasticJob's
 * leader wrote for the very same instances. ElasticJob shards first (it leads; a trigger makes it
 * fire); then the ElasticJob server is disabled (ElasticJob abdicates, a sidecar is elected) and
 * enabled again, so that shardcar reshards the same four instances.
 *
 * <p>Then an all-ElasticJob cluster (four ElasticJob JVMs, another namespace) shards the same jobs:
 * instance ids differ there (one host, four pids), so owners are compared by rank, the place of
 * an instance in the descending order of ids (the order ElasticJob hands its strategies): the
 * i-th instance of the all-ElasticJob cluster gets the items the i-th instance of the mixed one got.
 *
 * <p>The job names are chosen for their Java {@code String.hashCode}: {@code demoJob} is even
 * (ODEVITY reverses the instance list), {@code payJob} odd and negative (no reversal),
 * {@code orderJob} and {@code rrJob} rotate ROUND_ROBIN's list by 3 and by 1 of 4.
 */
class StrategiesTest {
  private static final Duration T = Duration.ofSeconds(40);

  private static final List<Job> JOBS = List.of(
      Job.named("avgJob").total(7).strategy("AVG_ALLOCATION"),
      Job.named("demoJob").total(5).strategy("ODEVITY"),
      Job.named("payJob").total(6).strategy("ODEVITY"),
      Job.named("orderJob").total(7).strategy("ROUND_ROBIN"),
      Job.named("rrJob").total(9).strategy("ROUND_ROBIN"));

  @Test
  void shardcarGivesTheOwnersElasticJobGivesForTheSameMixedMembership() {
    Map<String, List<Set<Integer>>> mixedByRank = new HashMap<>();
    try (Cluster c = Cluster.start("Strategies")) {
      Zk zk = c.zk();
      Job[] configs = JOBS.stream().map(j -> j.copy().cron(Job.NEVER)).toArray(Job[]::new);
      Job[] byName = JOBS.stream().map(j -> Job.named(j.name()).withConfig(false)).toArray(Job[]::new);

      Member e1 = c.elasticJob("ej1", configs);
      for (Job j : JOBS) {
        c.await(j.name(), "ElasticJob leads " + j.name(), T, () -> e1.instanceId(j.name()).equals(zk.leader(j.name())));
      }
      Member e2 = c.elasticJob("ej2", configs);
      Member w2 = c.shardcar("sc2", c.sidecar("127.0.0.2"), byName);
      Member w3 = c.shardcar("sc3", c.sidecar("127.0.0.3"), byName);
      List<Member> all = List.of(e1, e2, w2, w3);

      // 1. ElasticJob's leader shards the four instances (at the fire a trigger causes).
      Map<String, Map<Integer, String>> byElasticJob = new HashMap<>();
      for (Job j : JOBS) {
        String job = j.name();
        Set<String> ids = ids(all, job);
        c.await(job, "four instances in " + job, T, () -> new HashSet<>(zk.instances(job)).equals(ids));
        c.operateApi().trigger(job);
        c.await(job, "ElasticJob shards " + job + " over the four instances", T,
            () -> zk.shardingSettled(job) && zk.owners(job).size() == j.total() && new HashSet<>(zk.owners(job).values()).equals(ids));
        assertEquals(e1.instanceId(job), zk.leader(job), "ElasticJob led while " + job + " was sharded");
        byElasticJob.put(job, zk.owners(job));
      }

      // 2. The ElasticJob server is disabled: ElasticJob abdicates and a sidecar leads.
      c.operateApi().disable(null, ip(e1, JOBS.get(0).name()));
      Set<String> shardcarIds = new HashSet<>();
      for (Job j : JOBS) {
        String job = j.name();
        Set<String> sc = new HashSet<>(List.of(w2.instanceId(job), w3.instanceId(job)));
        shardcarIds.addAll(sc);
        c.await(job, "a sidecar leads " + job + " and shards it over the shardcar workers", T,
            () -> sc.contains(zk.leader(job)) && zk.shardingSettled(job) && sc.containsAll(zk.owners(job).values())
                && zk.owners(job).size() == j.total());
      }

      // 3. Enabled again: shardcar's leader reshards the same four instances.
      c.operateApi().enable(null, ip(e1, JOBS.get(0).name()));
      for (Job j : JOBS) {
        String job = j.name();
        Set<String> ids = ids(all, job);
        c.await(job, "shardcar shards " + job + " over the four instances", T,
            () -> zk.shardingSettled(job) && zk.owners(job).size() == j.total() && new HashSet<>(zk.owners(job).values()).equals(ids));
        assertTrue(shardcarIds.contains(zk.leader(job)), "shardcar led while " + job + " was resharded");
        assertEquals(byElasticJob.get(job), zk.owners(job), job + ": shardcar's owners differ from "
            + "ElasticJob's for the same instances " + ids + "\n" + c.state(job));
        mixedByRank.put(job, byRank(zk.owners(job)));
      }
    }

    // An all-ElasticJob cluster of four: the same items per rank.
    try (Cluster c = Cluster.start("StrategiesAllElasticJob")) {
      Zk zk = c.zk();
      Job[] configs = JOBS.stream().map(j -> j.copy().cron(Job.NEVER)).toArray(Job[]::new);
      List<Member> members = new ArrayList<>();
      for (int i = 1; i <= 4; i++) {
        members.add(c.elasticJobStarting("ej" + i, configs));
      }
      for (Member m : members) {
        c.await(JOBS.get(0).name(), m + " ready", T, () -> JOBS.stream().allMatch(j -> m.readyInstance(j.name()).isPresent()));
      }
      for (Job j : JOBS) {
        String job = j.name();
        Set<String> ids = ids(members, job);
        c.await(job, "four instances in " + job, T, () -> new HashSet<>(zk.instances(job)).equals(ids));
        c.operateApi().trigger(job);
        c.await(job, "ElasticJob shards " + job + " over its four instances", T,
            () -> zk.shardingSettled(job) && zk.owners(job).size() == j.total() && new HashSet<>(zk.owners(job).values()).equals(ids));
        assertEquals(mixedByRank.get(job), byRank(zk.owners(job)), job + ": items by rank (descending instance ids) of the "
            + "mixed cluster differ from an all-ElasticJob cluster's\n" + c.state(job));
      }
    }
  }

  /** The items of each owner, owners in descending order of their ids (Java's String order). */
  private static List<Set<Integer>> byRank(Map<Integer, String> owners) {
    Map<String, Set<Integer>> byOwner = new TreeMap<>(Comparator.reverseOrder());
    owners.forEach((item, owner) -> byOwner.computeIfAbsent(owner, k -> new TreeSet<>()).add(item));
    return new ArrayList<>(byOwner.values());
  }

  private static Set<String> ids(List<Member> members, String job) {
    Set<String> s = new HashSet<>();
    members.forEach(m -> s.add(m.instanceId(job)));
    return s;
  }

  private static String ip(Member m, String job) {
    String id = m.instanceId(job);
    return id.substring(0, id.indexOf("@-@"));
  }
}
