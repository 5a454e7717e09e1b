package io.shardcar.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import io.shardcar.interop.harness.Cluster;
import io.shardcar.interop.harness.Expected;
import io.shardcar.interop.harness.Job;
import io.shardcar.interop.harness.Member;
import io.shardcar.interop.harness.Run;
import io.shardcar.interop.harness.Sidecar;
import io.shardcar.interop.harness.Zk;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.apache.shardingsphere.elasticjob.infra.pojo.JobConfigurationPOJO;
import org.junit.jupiter.api.Test;

/**
 * A shardcar retry policy on a job ElasticJob members share: the policy lives in shardcar's own
 * node ({@code /{job}/shardcar}), a failed item of a shardcar worker waits in
 * {@code shardcar/retries/{i}} and runs again as RETRY, attempt 1, while the ElasticJob member runs
 * its own items as always and the {@code config} node it reads never changes.
 *
 * <p>Members: an ElasticJob JVM E (creates the job, leads) and a shardcar worker W (sidecar
 * 127.0.0.2); four items, two each. The policy: 3 attempts, 2 s between them.
 */
class RetryTest {
  private static final String JOB = "retryJob";
  private static final Duration T = Duration.ofSeconds(30);
  private static final long BACKOFF_MS = 2000;
  /** A key of shardcar's own node, at any depth of a YAML document. */
  private static final Pattern SHARDCAR_KEYS = Pattern.compile(
      "(?m)^\\s*(retry|maxAttempts|initialBackoff\\w*|maxBackoff\\w*|multiplier\\w*|executionTimeout\\w*)\\s*:");

  @Test
  void aWorkersFailedItemIsRetriedWhileElasticJobRunsItsItemsAndItsConfigStaysAsItWas() throws IOException {
    try (Cluster c = Cluster.start("Retry")) {
      Zk zk = c.zk();
      Member e = c.elasticJob("ej", Job.named(JOB).total(4).cron(Job.NEVER).params("0=a,1=b,2=c,3=d")
          .jobParameter("from-elasticjob").failover(true));
      String eId = e.instanceId(JOB);
      c.await(JOB, "ElasticJob leads", T, () -> eId.equals(zk.leader(JOB)));
      String elasticJobConfig = zk.data("/" + JOB + "/config");
      Sidecar s = c.sidecar("127.0.0.2");
      Member w = c.shardcar("sc", s, Job.named(JOB).withConfig(false));
      String wId = w.instanceId(JOB);

      Map<Integer, String> shares = Expected.avg(JOB, 4, eId, wId);
      Map<Member, Set<Integer>> own = Map.of(e, Expected.itemsOf(shares, eId), w, Expected.itemsOf(shares, wId));
      long t0 = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      // At this fire ElasticJob's leader may also run items it has just given away (its #2195): at least its own.
      c.await(JOB, "ElasticJob's fire gives each member two items and each runs them", T,
          () -> zk.owners(JOB).equals(shares) && zk.shardingSettled(JOB) && own.entrySet().stream()
              .allMatch(o -> items(c.runsOf(JOB, o.getKey(), t0)).containsAll(o.getValue())) && c.idle(JOB));

      // ---- the operator adds a retry policy: ElasticJob's config as ZooKeeper holds it, plus `retry` ----
      int versionBefore = zk.stat("/" + JOB + "/config").getVersion();
      Path file = c.dir().resolve(JOB + ".yaml");
      Files.writeString(file, elasticJobConfig + "retry:\n  maxAttempts: 3\n  initialBackoff: " + BACKOFF_MS + "ms\n  maxBackoff: "
          + BACKOFF_MS + "ms\n");
      s.ctlOk("job", "put", file.toString());
      String config = zk.data("/" + JOB + "/config");
      String extras = zk.data("/" + JOB + "/shardcar");
      System.err.println("config written by ElasticJob (version " + versionBefore + "):\n" + elasticJobConfig
          + "config after ctl job put (version " + zk.stat("/" + JOB + "/config").getVersion() + "):\n" + config
          + "shardcar node:\n" + extras);
      assertEquals(elasticJobConfig, config, "the put wrote ElasticJob's config back byte for byte");
      assertFalse(SHARDCAR_KEYS.matcher(config).find(), "none of shardcar's keys is in ElasticJob's config:\n" + config);
      assertTrue(extras.contains("maxAttempts: 3") && extras.contains("initialBackoffMillis: " + BACKOFF_MS),
          "the policy is in shardcar's node:\n" + extras);
      JobConfigurationPOJO read = c.configApi().getJobConfiguration(JOB);
      assertEquals(4, read.getShardingTotalCount(), "ElasticJob reads the config: " + read);
      assertEquals("from-elasticjob", read.getJobParameter(), "ElasticJob reads the config: " + read);
      assertEquals(Job.NEVER, read.getCron(), "ElasticJob reads the config: " + read);
      assertTrue(zk.shardingSettled(JOB) && zk.owners(JOB).equals(shares), "the put changed no sharding:\n" + c.state(JOB));

      // ---- W's first item fails once: its sidecar keeps the retry, then runs it ---------------------------
      int item = own.get(w).iterator().next();
      c.failOnce(w, item);
      long t1 = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      String retryNode = "/" + JOB + "/shardcar/retries/" + item;
      String[] pending = new String[1];
      c.await(JOB, "W's run of item " + item + " fails and its retry is pending", T,
          () -> c.runsOf(JOB, w, t1).stream().anyMatch(r -> r.item() == item && "failed".equals(r.outcome()))
              && (pending[0] = zk.data(retryNode)) != null);
      assertTrue(pending[0].contains("attempt: 1"), "the pending retry is attempt 1: " + pending[0]);
      c.await(JOB, "the retry runs and completes, and its node is removed", T,
          () -> c.runsOf(JOB, w, t1).stream().filter(r -> r.item() == item).count() == 2 && !zk.exists(retryNode) && c.idle(JOB));
      List<Run> runs = c.runsOf(JOB, w, t1).stream().filter(r -> r.item() == item).toList();
      Run failed = runs.get(0);
      Run retry = runs.get(1);
      assertEquals("failed", failed.outcome(), failed.toString());
      assertEquals("MANUAL", failed.source(), failed.toString());
      assertEquals("completed", retry.outcome(), retry.toString());
      assertEquals("RETRY", retry.source(), "the worker's context says RETRY: " + retry);
      assertTrue(retry.start() - failed.end() >= BACKOFF_MS - 50, "the retry waited for its backoff: " + failed + "\n" + retry);
      assertTrue(Long.parseLong(retry.startRec().get("token")) > Long.parseLong(failed.startRec().get("token")),
          "the retry runs under a new fencing token: " + failed + "\n" + retry);
      Map<String, JsonObject> history = s.executions(JOB);
      JsonObject failedExecution = history.get(failed.startRec().get("execution"));
      JsonObject retryExecution = history.get(retry.startRec().get("execution"));
      assertEquals("TRIGGER_SOURCE_MANUAL", failedExecution.get("source").getAsString(), failedExecution.toString());
      assertEquals("EXECUTION_OUTCOME_FAILED", failedExecution.get("outcome").getAsString(), failedExecution.toString());
      assertEquals("TRIGGER_SOURCE_RETRY", retryExecution.get("source").getAsString(), retryExecution.toString());
      assertEquals(1, retryExecution.get("attempt").getAsInt(), retryExecution.toString());
      assertEquals("EXECUTION_OUTCOME_COMPLETED", retryExecution.get("outcome").getAsString(), retryExecution.toString());
      assertEquals(List.of(item), ints(retryExecution), retryExecution.toString());

      // Everything else ran once, normally: E its two items, W its other one; nobody else ran the failed item.
      Set<Integer> wOthers = own.get(w).stream().filter(i -> i != item).collect(Collectors.toSet());
      assertEquals(own.get(e), items(c.runsOf(JOB, e, t1)), "E ran its own items");
      assertEquals(2, c.runsOf(JOB, e, t1).size(), "E ran them once: " + c.runsOf(JOB, e, t1));
      assertTrue(c.runsOf(JOB, e, t1).stream().allMatch(r -> "completed".equals(r.outcome())), c.runsOf(JOB, e, t1).toString());
      assertEquals(3, c.runsOf(JOB, w, t1).size(), "W ran its other item once and the failed one twice: " + c.runsOf(JOB, w, t1));
      assertTrue(items(c.runsOf(JOB, w, t1)).containsAll(wOthers), c.runsOf(JOB, w, t1).toString());
      assertEquals(config, zk.data("/" + JOB + "/config"), "the config is untouched through the failure and the retry");
      assertEquals(shares, zk.owners(JOB), "no resharding");
      assertEquals(Set.of(eId, wId), Set.copyOf(zk.instances(JOB)), "both instances are still there");

      // ---- E goes on as before: the next trigger runs everyone's items once --------------------------------
      long t2 = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      c.await(JOB, "each member runs its items once more", T, () -> ranOnce(c, t2, own) && c.idle(JOB));
      assertTrue(c.runs(JOB).stream().filter(r -> r.start() >= t2).allMatch(r -> "completed".equals(r.outcome())),
          c.runs(JOB).toString());
      assertEquals(List.of(), zk.children("/" + JOB + "/shardcar/retries"), "no retry is pending");
      assertEquals(config, zk.data("/" + JOB + "/config"), "the config is untouched, byte for byte");
      c.assertNoOverlap(JOB);
    }
  }

  /** Each member ran each of its items exactly once since {@code since}. */
  static boolean ranOnce(Cluster c, long since, Map<Member, Set<Integer>> own) {
    for (Map.Entry<Member, Set<Integer>> e : own.entrySet()) {
      List<Run> runs = c.runsOf(JOB, e.getKey(), since);
      if (runs.size() != e.getValue().size() || !items(runs).equals(e.getValue())) {
        return false;
      }
    }
    return true;
  }

  static Set<Integer> items(List<Run> runs) {
    return runs.stream().map(Run::item).collect(Collectors.toSet());
  }

  static List<Integer> ints(JsonObject execution) {
    List<Integer> items = new java.util.ArrayList<>();
    if (execution.has("items")) {
      execution.getAsJsonArray("items").forEach(x -> items.add(x.getAsInt()));
    }
    return items;
  }

}
