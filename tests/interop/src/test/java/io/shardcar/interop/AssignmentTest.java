package io.shardcar.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.shardcar.interop.harness.Cluster;
import io.shardcar.interop.harness.Job;
import io.shardcar.interop.harness.Member;
import io.shardcar.interop.harness.Rec;
import io.shardcar.interop.harness.Zk;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * What the sidecars tell their workers about the sharding that ElasticJob's leader and shardcar's
 * leader write, checked against the contract ({@code proto/shardcar/v1/shardcar.proto}: an
 * {@code Assignment} holds "the items this instance owns now" and its {@code epoch} "grows with
 * every change of the job's sharding"). Each leader commits a new sharding in one multi-op; a
 * worker on another host must never be told a sharding that did not exist.
 *
 * <p>Members: ElasticJob JVM E (leads first), shardcar workers W2 and W3 on two sidecars. ElasticJob
 * shards the three (at a triggered fire); the ElasticJob server is disabled (a sidecar leads and
 * reshards over W2 and W3) and enabled again (the sidecar reshards over all three).
 */
class AssignmentTest {
  private static final String JOB = "epochJob";
  private static final Duration T = Duration.ofSeconds(30);

  @Test
  void assignmentsFollowEveryShardingAsAWholeWithAGrowingEpoch() {
    try (Cluster c = Cluster.start("Assignment")) {
      Zk zk = c.zk();
      Member e = c.elasticJob("ej", Job.named(JOB).total(6).cron(Job.NEVER));
      String eId = e.instanceId(JOB);
      String eIp = eId.substring(0, eId.indexOf("@-@"));
      c.await(JOB, "ElasticJob leads", T, () -> eId.equals(zk.leader(JOB)));
      Member w2 = c.shardcar("sc2", c.sidecar("127.0.0.2"), Job.named(JOB).withConfig(false));
      Member w3 = c.shardcar("sc3", c.sidecar("127.0.0.3"), Job.named(JOB).withConfig(false));
      Set<String> all = Set.of(eId, w2.instanceId(JOB), w3.instanceId(JOB));
      Set<String> workers = Set.of(w2.instanceId(JOB), w3.instanceId(JOB));

      c.operateApi().trigger(JOB);
      c.await(JOB, "ElasticJob shards over the three", T, () -> settledOver(zk, all));
      c.await(JOB, "the workers are told ElasticJob's sharding", T, () -> told(zk, w2, w3));
      c.operateApi().disable(JOB, eIp);
      c.await(JOB, "a sidecar shards over the two workers", T, () -> settledOver(zk, workers) && told(zk, w2, w3));
      c.operateApi().enable(JOB, eIp);
      c.await(JOB, "a sidecar shards over the three again", T, () -> settledOver(zk, all) && told(zk, w2, w3));

      List<String> violations = new ArrayList<>();
      Map<Long, Map<Integer, String>> ownerByEpoch = new HashMap<>();
      for (Member w : List.of(w2, w3)) {
        Rec previous = null;
        for (Rec a : w.recs()) {
          if (!a.is("assignment")) {
            continue;
          }
          long epoch = Long.parseLong(a.get("epoch"));
          if (previous != null) {
            long before = Long.parseLong(previous.get("epoch"));
            if (epoch < before) {
              violations.add("epoch went down: " + previous + "  ->  " + a);
            } else if (epoch == before && !a.items().equals(previous.items())) {
              violations.add("items changed under one epoch: " + previous + "  ->  " + a);
            }
          }
          for (int item : a.items()) {
            String other = ownerByEpoch.computeIfAbsent(epoch, k -> new HashMap<>()).putIfAbsent(item, w.member());
            if (other != null && !other.equals(w.member())) {
              violations.add("item " + item + " told to both " + other + " and " + w.member() + " at epoch " + epoch);
            }
          }
          previous = a;
        }
      }
      StringBuilder zxids = new StringBuilder("owner nodes' mzxid (one multi-op writes one zxid):");
      for (int i = 0; i < 6; i++) {
        zxids.append(" ").append(i).append("=").append(zk.stat("/" + JOB + "/sharding/" + i + "/instance").getMzxid());
      }
      assertEquals(List.of(), violations, "Assignments that were no sharding ZooKeeper ever held\n" + zxids + "\n" + c.state(JOB));
    }
  }

  private static boolean settledOver(Zk zk, Set<String> members) {
    return zk.shardingSettled(JOB) && zk.owners(JOB).size() == 6 && new HashSet<>(zk.owners(JOB).values()).equals(members);
  }

  private static boolean told(Zk zk, Member... workers) {
    for (Member w : workers) {
      if (!Set.copyOf(zk.itemsOf(JOB, w.instanceId(JOB))).equals(w.assignment(JOB).orElse(null))) {
        return false;
      }
    }
    return true;
  }
}
