package io.shardcar.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.interop.harness.Await;
import io.shardcar.interop.harness.Cluster;
import io.shardcar.interop.harness.Job;
import io.shardcar.interop.harness.Member;
import io.shardcar.interop.harness.Rec;
import io.shardcar.interop.harness.Run;
import io.shardcar.interop.harness.Sidecar;
import io.shardcar.interop.harness.Zk;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.apache.shardingsphere.elasticjob.infra.env.IpUtils;
import org.apache.zookeeper.data.Stat;
import org.junit.jupiter.api.Test;

/**
 * A resident job (shardcar's: each item held by one worker until it is revoked) and an ElasticJob
 * JVM that starts on the same job name. ElasticJob knows nothing of holds, so shardcar's leaders
 * give it no items (docs/elasticjob-compat.md, "Resident jobs"); an instance counts as a sidecar's
 * when its node belongs to the session of a {@code shardcar/sidecars/{ip}} node of the job, not
 * when a sidecar runs on its host.
 *
 * <p>The JVM comes as an ElasticJob application would: a {@code ScheduleJobBootstrap} for a job of
 * that name, with a cron of its own and {@code overwrite} false (ElasticJob's default). ElasticJob
 * adopts the stored config (no cron), registers the instance (leader election, {@code servers/},
 * {@code instances/}) in the bootstrap's constructor, and only then does {@code schedule()} refuse
 * it: "Cron can not be empty.". The JVM stays up (it runs another job here; a {@code main} that
 * lets the exception escape stays up too, on Quartz's and Curator's threads), so its instance stays
 * a live member of the resident job.
 *
 * <p>The ElasticJob JVM registers the host's IP as ElasticJob's {@code IpUtils} picks it, never a
 * loopback one (it skips loopback interfaces and addresses), so a JVM cannot be put on a sidecar's
 * 127.0.0.x; a sidecar can be put on the JVM's IP instead ({@code --advertise-ip}), as a sidecar on
 * the same host would be.
 */
class ResidentTest {
  private static final String JOB = "residentJob";
  /** The ElasticJob JVM's own job, which keeps it running. */
  private static final String OTHER = "elasticJobsOwn";
  private static final int ITEMS = 4;
  private static final Duration T = Duration.ofSeconds(30);

  @Test
  void anElasticJobJvmInAResidentJobIsGivenNoItemsAndInterruptsNoHoldOnItsOwnHostOrASidecars() {
    try (Cluster c = Cluster.start("Resident")) {
      Zk zk = c.zk();
      Sidecar a = c.sidecar("127.0.0.2");
      Sidecar b = c.sidecar("127.0.0.3");
      Member wa = c.shardcar("wa", a, Job.named(JOB).total(ITEMS).params("0=p0,1=p1,2=p2,3=p3").jobParameter("resident")
          .resident(true).withConfig(true));
      Member wb = c.shardcar("wb", b, Job.named(JOB).resident(true).withConfig(false));
      Map<String, Member> byInstance = new HashMap<>(Map.of(wa.instanceId(JOB), wa, wb.instanceId(JOB), wb));
      c.await(JOB, "two shardcar workers hold two items each", T,
          () -> heldByOwners(c, zk, byInstance) && shareCounts(zk).equals(List.of(2, 2)));
      String config = zk.data("/" + JOB + "/config");
      Stat configStat = zk.stat("/" + JOB + "/config");
      String root = zk.data("/" + JOB);
      String extras = zk.data("/" + JOB + "/shardcar");
      System.err.println("resident job config:\n" + config + "shardcar node:\n" + extras);
      assertTrue(extras.contains("resident: true"), "the job is resident:\n" + extras);
      assertEquals("", root, "shardcar created the job root empty");
      for (Run r : c.runs(JOB)) {
        assertEquals("RESIDENT", r.source(), "every hold starts with a RESIDENT trigger: " + r);
      }
      Map<Integer, Run> holds = openHolds(c);
      Map<Integer, Stat> owners = ownerStats(zk);

      // ---- an ElasticJob JVM starts on the job, on a host with no sidecar ---------------------------------------
      String jvmIp = IpUtils.getIp(); // what ElasticJob's JobInstance registers, by the same code the JVM runs
      assertFalse(jvmIp.startsWith("127."), "ElasticJob never picks a loopback IP: " + jvmIp);
      long joined = System.currentTimeMillis();
      Member e = c.elasticJobStarting("ej", Job.named(JOB).total(1).cron(Job.NEVER).overwrite(false),
          Job.named(OTHER).total(1).cron(Job.NEVER));
      Rec refused = awaitRefusedButRegistered(c, e);
      String eId = refused.get("instance");
      assertTrue(refused.get("error").contains("Cron can not be empty."), "ElasticJob refuses to schedule it: " + refused);
      assertTrue(eId.startsWith(jvmIp + "@-@"), "the JVM's instance is on the host's IP: " + eId);
      c.await(JOB, "the JVM's instance is a live member of the resident job", T, () -> zk.instances(JOB).contains(eId));
      assertEquals(jvmIp, zk.data("/" + JOB + "/instances/" + eId).lines().filter(l -> l.startsWith("serverIp:"))
          .map(l -> l.substring("serverIp:".length()).trim()).findFirst().orElse(""), "its instance node names its IP");
      assertTrue(zk.exists("/" + JOB + "/servers/" + jvmIp), "ElasticJob registered its server");
      assertFalse(zk.exists("/" + JOB + "/shardcar/sidecars/" + jvmIp), "no sidecar on the JVM's host yet");
      String ejLine = "  " + eId + " (ElasticJob)";
      for (Sidecar s : List.of(a, b)) {
        String show = s.ctlOk("job", "show", JOB);
        String line = instanceLine(show, eId);
        assertTrue(line.startsWith(ejLine), "ctl job show on " + s.ip() + " flags the JVM:\n" + show);
        assertEquals("-", lastColumn(line), "and lists no items of it:\n" + show);
      }

      // ElasticJob's own trigger reaches the JVM too: it has no items, so it runs nothing; the sidecars drop theirs.
      c.operateApi().trigger(JOB);
      c.await(JOB, "every trigger node is consumed", T, () -> zk.children("/" + JOB + "/trigger").isEmpty());

      // ---- a sidecar starts on the JVM's host and its worker joins: the leader reshards, the JVM still gets nothing
      assertUntouched(c, zk, holds, owners, joined, "since the JVM joined");
      Sidecar onJvmHost = c.sidecar(jvmIp);
      long third = System.currentTimeMillis();
      Member wc = c.shardcar("wc", onJvmHost, Job.named(JOB).resident(true).withConfig(false));
      String wcId = wc.instanceId(JOB);
      assertTrue(wcId.startsWith(jvmIp + "@-@"), "the new worker's instance is on the JVM's IP too: " + wcId);
      byInstance.put(wcId, wc);
      // The JVM and the new worker: one server, one IP, two sessions; only the worker's is the sidecar's.
      long sidecarSession = zk.stat("/" + JOB + "/shardcar/sidecars/" + jvmIp).getEphemeralOwner();
      assertEquals(sidecarSession, zk.stat("/" + JOB + "/instances/" + wcId).getEphemeralOwner(),
          "the worker's instance node is on its sidecar's session");
      assertNotEquals(sidecarSession, zk.stat("/" + JOB + "/instances/" + eId).getEphemeralOwner(),
          "the JVM's instance node is on a session of its own");
      c.await(JOB, "the leader gives the new worker its share and it holds it", T,
          () -> heldByOwners(c, zk, byInstance) && shareCounts(zk).equals(List.of(1, 1, 2)) && zk.itemsOf(JOB, wcId).size() == 1);

      // Only the one item the new worker had to take moved, once: no owner node was written twice (the JVM was never
      // given an item and had it taken back), every other hold is the one held before the JVM came.
      Map<Integer, Stat> after = ownerStats(zk);
      int moved = zk.itemsOf(JOB, wcId).get(0);
      for (int i = 0; i < ITEMS; i++) {
        assertEquals(owners.get(i).getCzxid(), after.get(i).getCzxid(), "sharding/" + i + "/instance was not recreated");
        assertEquals(i == moved ? 1 : 0, after.get(i).getVersion() - owners.get(i).getVersion(),
            "sharding/" + i + "/instance written " + (i == moved ? "once" : "never") + " since the JVM came\n" + c.state(JOB));
      }
      assertFalse(zk.owners(JOB).containsValue(eId), "no item is the JVM's: " + zk.owners(JOB));
      Map<Integer, Run> now = openHolds(c);
      for (int i = 0; i < ITEMS; i++) {
        if (i != moved) {
          assertEquals(holds.get(i).startRec().get("run"), now.get(i).startRec().get("run"),
              "item " + i + " is still held by the hold it had before the JVM came: " + now.get(i));
        }
      }
      Run before = holds.get(moved);
      Run handedOff = c.runs(JOB).stream().filter(r -> r.startRec().get("run").equals(before.startRec().get("run")))
          .findFirst().orElseThrow();
      Run taken = now.get(moved);
      assertEquals("cancelled", handedOff.outcome(), "the old holder stopped on the revoke: " + handedOff);
      assertTrue(handedOff.end() >= third, "the item moved on the worker's join, not on the JVM's: " + handedOff);
      assertTrue(handedOff.end() <= taken.start(), "the new hold starts after the old one stopped:\n  " + handedOff + "\n  " + taken);
      assertEquals("wc", taken.member(), taken.toString());
      assertEquals("RESIDENT", taken.source(), taken.toString());
      assertTrue(Long.parseLong(taken.startRec().get("token")) > Long.parseLong(handedOff.startRec().get("token")),
          "the new holder has a higher fencing token:\n  " + handedOff + "\n  " + taken);
      List<Run> ended = c.runs(JOB).stream().filter(r -> !going(r) && r.end() >= joined).toList();
      assertEquals(List.of(handedOff.startRec().get("run")), ended.stream().map(r -> r.startRec().get("run")).toList(),
          "no other hold stopped since the JVM came: " + ended);

      // ctl, now that a sidecar runs on the JVM's host: the JVM's instance node is on its own session, not on that
      // sidecar's, so it keeps its mark.
      for (Sidecar s : List.of(a, onJvmHost)) {
        String show = s.ctlOk("job", "show", JOB);
        String line = instanceLine(show, eId);
        System.err.println("ctl job show on " + s.ip() + ", the JVM's line: " + line);
        assertTrue(line.startsWith(ejLine), "ctl on " + s.ip() + " marks the JVM on a sidecar's host:\n" + show);
      }

      // ---- the JVM stops (SIGTERM: ElasticJob's shutdown hook removes its instance), then the new worker ----------
      // The JVM's leave moves nothing; the worker's leave, which the leader reads after it, moves its one item back.
      Map<Integer, Run> held = openHolds(c);
      Map<Integer, Stat> ownersNow = ownerStats(zk);
      long left = System.currentTimeMillis();
      e.terminate();
      assertTrue(e.waitFor(Duration.ofSeconds(30)) >= 0, "the ElasticJob JVM exits on SIGTERM");
      c.await(JOB, "the JVM's instance is gone", T, () -> !zk.instances(JOB).contains(eId));
      wc.terminate();
      c.await(JOB, "the leader gives the worker's item back to the others, who hold it", T,
          () -> !zk.instances(JOB).contains(wcId) && heldByOwners(c, zk, byInstance) && shareCounts(zk).equals(List.of(2, 2)));
      Map<Integer, Stat> last = ownerStats(zk);
      Map<Integer, Run> finalHolds = openHolds(c);
      for (int i = 0; i < ITEMS; i++) {
        assertEquals(i == moved ? 1 : 0, last.get(i).getVersion() - ownersNow.get(i).getVersion(),
            "sharding/" + i + "/instance written " + (i == moved ? "once" : "never") + " since the JVM left\n" + c.state(JOB));
        if (i != moved) {
          assertEquals(held.get(i).startRec().get("run"), finalHolds.get(i).startRec().get("run"),
              "item " + i + " is still held by the same hold: " + finalHolds.get(i));
        }
      }
      assertEquals(List.of(taken.startRec().get("run")), c.runs(JOB).stream().filter(r -> !going(r) && r.end() >= left)
          .map(r -> r.startRec().get("run")).toList(), "only the leaving worker's hold stopped since the JVM left");
      assertEquals(List.of(), e.recs().stream().filter(r -> r.is("start")).toList(), "the JVM ran nothing");
      assertEquals(config, zk.data("/" + JOB + "/config"), "the resident config is unchanged, byte for byte");
      assertEquals(configStat.getMzxid(), zk.stat("/" + JOB + "/config").getMzxid(), "and was never written");
      assertEquals(root, zk.data("/" + JOB), "the job root is unchanged");
      assertEquals(extras, zk.data("/" + JOB + "/shardcar"), "shardcar's node is unchanged");
      c.assertNoOverlap(JOB);
    }
  }

  /**
   * An ElasticJob JVM that becomes the resident job's leader reshards nothing: ElasticJob shards
   * only at a fire of its own, and it has none. Here the leading worker dies while the only other
   * sidecar is frozen for a moment, so that the JVM is the one candidate of the election. The live
   * worker's holds go on untouched; the dead worker's items stay its, unheld; a worker that joins
   * gets nothing, and its leave changes nothing either. Once the JVM leaves, a sidecar leads and
   * gives the dead worker's items to the live one, whose holds go on. (ElasticJob's trigger is left
   * out: it makes such a leader shard the job itself, or wait for the holds to end; see README.md.)
   */
  @Test
  void anElasticJobLeaderReshardsNothingWhileTheLiveHoldsGoOnAndShardcarTakesOverWhenItLeaves() {
    try (Cluster c = Cluster.start("ResidentElasticJobLeader")) {
      Zk zk = c.zk();
      Sidecar a = c.sidecar("127.0.0.2");
      Sidecar b = c.sidecar("127.0.0.3");
      Member wa = c.shardcar("wa", a, Job.named(JOB).total(ITEMS).resident(true).withConfig(true));
      String waId = wa.instanceId(JOB);
      c.await(JOB, "the worker that created the job leads", T, () -> waId.equals(zk.leader(JOB)));
      Member wb = c.shardcar("wb", b, Job.named(JOB).resident(true).withConfig(false));
      String wbId = wb.instanceId(JOB);
      Map<String, Member> byInstance = new HashMap<>(Map.of(waId, wa, wbId, wb));
      c.await(JOB, "two shardcar workers hold two items each", T,
          () -> heldByOwners(c, zk, byInstance) && shareCounts(zk).equals(List.of(2, 2)));
      String config = zk.data("/" + JOB + "/config");
      Member e = c.elasticJobStarting("ej", Job.named(JOB).total(1).cron(Job.NEVER).overwrite(false),
          Job.named(OTHER).total(1).cron(Job.NEVER));
      String eId = awaitRefusedButRegistered(c, e).get("instance");
      c.await(JOB, "the JVM's instance is a live member of the resident job", T, () -> zk.instances(JOB).contains(eId));
      List<Integer> waItems = zk.itemsOf(JOB, waId);
      List<Integer> wbItems = zk.itemsOf(JOB, wbId);
      Map<Integer, Run> wbHolds = new TreeMap<>(openHolds(c));
      wbHolds.keySet().retainAll(wbItems);

      // The election. Sidecar b is frozen far shorter than its workers' lease (2 s, renewed every third of it),
      // so that wb's holds do not lapse; its session (4 s) lives on.
      long frozen = System.currentTimeMillis();
      b.pause();
      try {
        wa.kill();
        c.await(JOB, "the JVM is elected leader", T, () -> eId.equals(zk.leader(JOB)));
      } finally {
        b.resume();
      }
      System.err.println("sidecar 127.0.0.3 was frozen for " + (System.currentTimeMillis() - frozen) + " ms");
      // As ElasticJob's leader it flags the job for resharding on the instance's leave: it has read it.
      c.await(JOB, "the JVM, leading, flags the job for resharding", T, () -> zk.exists("/" + JOB + "/leader/sharding/necessary"));
      c.await(JOB, "the dead worker's holds are released", T,
          () -> waItems.stream().noneMatch(i -> zk.exists("/" + JOB + "/sharding/" + i + "/running")));
      Map<Integer, Stat> owners = ownerStats(zk);
      long led = System.currentTimeMillis();

      // A worker joins, then leaves: nobody reshards. Each state is watched for two leases, as no event follows.
      Sidecar s3 = c.sidecar("127.0.0.4");
      Member wc = c.shardcar("wc", s3, Job.named(JOB).resident(true).withConfig(false));
      String wcId = wc.instanceId(JOB);
      Await.sleep(4000);
      assertNothingMoved(c, zk, owners, waId, waItems, wbHolds, led, "with the JVM leading and a worker joined");
      assertEquals(Optional.of(Set.of()), wc.assignment(JOB).map(Set::copyOf), "the joined worker is given nothing");
      String show = s3.ctlOk("job", "show", JOB);
      System.err.println("ctl job show with the JVM leading:\n" + show);
      assertTrue(show.contains("leader:      " + eId + "\n"), show);
      assertTrue(show.contains("resharding pending"), show);
      assertTrue(instanceLine(show, eId).matches("  " + Pattern.quote(eId) + " \\(ElasticJob\\)\\s+\\S+\\s+yes\\s+-"),
          "the JVM is marked, leads, has no items:\n" + show);
      wc.terminate();
      c.await(JOB, "the joined worker is gone", T, () -> !zk.instances(JOB).contains(wcId));
      Await.sleep(4000);
      assertNothingMoved(c, zk, owners, waId, waItems, wbHolds, led, "with the JVM leading and the worker gone");

      // ---- the JVM leaves: a sidecar leads and hands the dead worker's items to the live one ----------------
      long left = System.currentTimeMillis();
      e.terminate();
      assertTrue(e.waitFor(Duration.ofSeconds(30)) >= 0, "the ElasticJob JVM exits on SIGTERM");
      c.await(JOB, "a shardcar worker leads and holds every item", T,
          () -> wbId.equals(zk.leader(JOB)) && heldByOwners(c, zk, byInstance) && zk.itemsOf(JOB, wbId).size() == ITEMS);
      Map<Integer, Run> now = openHolds(c);
      for (int i : wbItems) {
        assertEquals(wbHolds.get(i).startRec().get("run"), now.get(i).startRec().get("run"), "wb's hold of " + i + " went on throughout");
      }
      for (int i : waItems) {
        Run r = now.get(i);
        assertTrue(r.start() >= left, "item " + i + " is held again only after the JVM left: " + r);
        assertEquals("RESIDENT", r.source(), r.toString());
      }
      assertEquals(List.of(), e.recs().stream().filter(r -> r.is("start")).toList(), "the JVM ran nothing");
      assertEquals(config, zk.data("/" + JOB + "/config"), "the resident config is unchanged, byte for byte");
      c.assertNoOverlap(JOB);
    }
  }

  /**
   * Under the JVM's leadership nothing moved since {@code since}: no owner node written, the dead
   * worker's items still its and unheld, the live worker's holds the ones it had, no other hold.
   */
  static void assertNothingMoved(Cluster c, Zk zk, Map<Integer, Stat> owners, String dead, List<Integer> deadItems,
      Map<Integer, Run> liveHolds, long since, String when) {
    Map<Integer, Stat> stats = ownerStats(zk);
    for (int i = 0; i < ITEMS; i++) {
      assertEquals(owners.get(i).getMzxid(), stats.get(i).getMzxid(), "sharding/" + i + "/instance not written " + when
          + "\n" + c.state(JOB));
    }
    for (int i : deadItems) {
      assertEquals(dead, zk.data("/" + JOB + "/sharding/" + i + "/instance"), "item " + i + " still the dead worker's " + when);
      assertFalse(zk.exists("/" + JOB + "/sharding/" + i + "/running"), "item " + i + " unheld " + when);
    }
    Map<Integer, Run> open = openHolds(c);
    assertEquals(liveHolds.keySet(), open.keySet(), "only the live worker's items are held " + when + "\n" + c.state(JOB));
    liveHolds.forEach((i, r) -> assertEquals(r.startRec().get("run"), open.get(i).startRec().get("run"),
        "the live worker's hold of " + i + " goes on " + when));
    assertEquals(List.of(), c.runs(JOB).stream().filter(r -> r.start() >= since).toList(), "no hold started " + when);
  }

  /**
   * Waits until the ElasticJob member refused to schedule {@link #JOB} but registered an instance for
   * it, and started {@link #OTHER}; returns the refusal's record.
   */
  static Rec awaitRefusedButRegistered(Cluster c, Member e) {
    Rec[] refused = new Rec[1];
    c.await(JOB, "ElasticJob registers an instance of the resident job but refuses to schedule it", T, () -> {
      if (!e.isAlive()) {
        throw new AssertionError(e + " exited:\n" + e.logTail(4000));
      }
      for (Rec r : e.recs()) {
        if (r.is("startFailed") && JOB.equals(r.job())) {
          refused[0] = r;
        }
      }
      return refused[0] != null && !refused[0].get("instance").isEmpty() && e.readyInstance(OTHER).isPresent();
    });
    return refused[0];
  }

  /**
   * Nothing changed since {@code since}: every item has the hold it had ({@code holds}), no hold
   * ended, no owner node was written ({@code owners}), no resharding flag is set.
   */
  static void assertUntouched(Cluster c, Zk zk, Map<Integer, Run> holds, Map<Integer, Stat> owners, long since, String when) {
    Map<Integer, Run> now = openHolds(c);
    Map<Integer, Stat> stats = ownerStats(zk);
    for (int i = 0; i < ITEMS; i++) {
      assertEquals(holds.get(i).startRec().get("run"), Optional.ofNullable(now.get(i)).map(r -> r.startRec().get("run")).orElse(null),
          "item " + i + " has the same hold " + when + "\n" + c.state(JOB));
      assertEquals(owners.get(i).getMzxid(), stats.get(i).getMzxid(), "sharding/" + i + "/instance not written " + when);
    }
    List<Run> stopped = c.runs(JOB).stream().filter(r -> !going(r) && r.end() >= since).toList();
    assertEquals(List.of(), stopped, "no hold stopped " + when);
    assertTrue(zk.shardingSettled(JOB), "no resharding pending " + when + "\n" + c.state(JOB));
  }

  /** Every item is held, exactly once, by the worker of its owner, whose {@code running} node is there. */
  static boolean heldByOwners(Cluster c, Zk zk, Map<String, Member> byInstance) {
    Map<Integer, String> owners = zk.owners(JOB);
    if (owners.size() != ITEMS || !zk.shardingSettled(JOB)) {
      return false;
    }
    Map<Integer, List<Run>> open = c.runs(JOB).stream().filter(ResidentTest::going)
        .collect(Collectors.groupingBy(Run::item, TreeMap::new, Collectors.toList()));
    for (int i = 0; i < ITEMS; i++) {
      Member owner = byInstance.get(owners.get(i));
      List<Run> runs = open.getOrDefault(i, List.of());
      if (owner == null || runs.size() != 1 || !runs.get(0).member().equals(owner.member())
          || !zk.exists("/" + JOB + "/sharding/" + i + "/running")) {
        return false;
      }
    }
    return true;
  }

  /** Whether hold {@code r} still goes on: it has no end and its member was not killed. */
  static boolean going(Run r) {
    return r.end() == Long.MAX_VALUE;
  }

  /** The one open hold of each item (see {@link #heldByOwners}). */
  static Map<Integer, Run> openHolds(Cluster c) {
    Map<Integer, Run> m = new TreeMap<>();
    for (Run r : c.runs(JOB)) {
      if (going(r)) {
        Run other = m.put(r.item(), r);
        assertTrue(other == null, "two open holds of item " + r.item() + ":\n  " + other + "\n  " + r);
      }
    }
    return m;
  }

  /** How many items each owner has, ascending. */
  static List<Integer> shareCounts(Zk zk) {
    return zk.owners(JOB).values().stream().collect(Collectors.groupingBy(o -> o, Collectors.counting())).values().stream()
        .map(Long::intValue).sorted().toList();
  }

  static Map<Integer, Stat> ownerStats(Zk zk) {
    Map<Integer, Stat> m = new TreeMap<>();
    for (int i = 0; i < ITEMS; i++) {
      m.put(i, zk.stat("/" + JOB + "/sharding/" + i + "/instance"));
    }
    return m;
  }

  /** The line of {@code ctl job show}'s Instances table for {@code instance} (empty when absent). */
  static String instanceLine(String show, String instance) {
    List<String> lines = new ArrayList<>(show.lines().toList());
    int from = lines.indexOf("Instances");
    return lines.stream().skip(Math.max(0, from)).filter(l -> l.startsWith("  " + instance)).findFirst().orElse("");
  }

  static String lastColumn(String line) {
    String[] words = line.trim().split("\\s+");
    return words[words.length - 1];
  }
}
