package io.shardcar.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.shardcar.interop.harness.Cluster;
import io.shardcar.interop.harness.Expected;
import io.shardcar.interop.harness.HttpRecorder;
import io.shardcar.interop.harness.HttpRecorder.Request;
import io.shardcar.interop.harness.Job;
import io.shardcar.interop.harness.Member;
import io.shardcar.interop.harness.ScriptLog;
import io.shardcar.interop.harness.ScriptLog.ScriptRun;
import io.shardcar.interop.harness.Sidecar;
import io.shardcar.interop.harness.Zk;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/**
 * ElasticJob's typed jobs (SCRIPT, HTTP) in a mixed cluster: ElasticJob 3.0.4 runs them with its own
 * {@code elasticjob-script-executor} / {@code elasticjob-http-executor}, and a sidecar (no worker:
 * {@code typed_jobs = all}) joins them as an instance {@code {ip}@-@{sidecar pid}} and runs its share.
 * What ElasticJob's executors pass (the script's arguments, the HTTP request with its
 * {@code shardingContext} header) is the ground truth: the sidecar must pass the very same bytes for
 * the same item, but for the task id, which names the instance that runs it. Runs are recorded by
 * the script itself ({@link ScriptLog}) and by the HTTP endpoint ({@link HttpRecorder}).
 */
class TypedJobTest {
  private static final Duration T = Duration.ofSeconds(30);
  /** Characters Gson escapes ('=', '&', '<', '>', '\''), JSON escapes ('"', '\\'), spaces and non-ASCII. */
  private static final String JOB_PARAMETER = "mode=fast&limit<10> 'q' \"dq\" back\\slash é";
  /** ElasticJob's item parameters cannot hold ',' or '='; everything else goes. */
  private static final String ITEM_PARAMS = "0=north,1=a&b,2=<c>,3='d' \"e\" \\f é";
  private static final Pattern TASK_ID = Pattern.compile("\"taskId\":\"([^\"]*)\"");

  // ---- SCRIPT, created by ElasticJob ---------------------------------------------------------------

  @Test
  void sidecarJoinsElasticJobsScriptJobPassesTheSameJsonAndTakesOverOnFailover() {
    String job = "ejScript";
    try (Cluster c = Cluster.start("TypedScript")) {
      Zk zk = c.zk();
      ScriptLog log = ScriptLog.in(c.dir());
      Member ej = c.typedElasticJob("ej1", Job.named(job).type("SCRIPT").total(4).cron(Job.NEVER).params(ITEM_PARAMS)
          .jobParameter(JOB_PARAMETER).failover(true).prop("script.command.line", log.commandLine("--from=props x=1")));
      String ejId = ej.instanceId(job);
      assertEquals("SCRIPT", zk.data("/" + job), "ElasticJob writes the job type into the root");
      String config = zk.data("/" + job + "/config");
      assertTrue(config.contains("script.command.line: "), config);

      // ElasticJob alone: its leader shards at the first (triggered) fire and it runs all four items.
      long t0 = System.currentTimeMillis();
      c.operateApi().trigger(job);
      c.await(job, "ElasticJob runs all 4 items of its SCRIPT job", T,
          () -> finishedSince(log.runs(p -> Long.MAX_VALUE), ej.pid(), t0).keySet().equals(Set.of(0, 1, 2, 3)));
      Map<Integer, ScriptRun> alone = finishedSince(log.runs(p -> Long.MAX_VALUE), ej.pid(), t0);
      Map<Integer, String> params = itemParams(ITEM_PARAMS);
      for (ScriptRun r : alone.values()) {
        JsonObject ctx = JsonParser.parseString(r.json()).getAsJsonObject();
        assertEquals(taskId(job, Set.of(0, 1, 2, 3), ejId), ctx.get("taskId").getAsString(), "ElasticJob's task id: " + r);
        assertEquals(JOB_PARAMETER, ctx.get("jobParameter").getAsString(), r.toString());
        assertEquals(params.get(r.item()), ctx.get("shardingParameter").getAsString(), r.toString());
        assertEquals(List.of("--from=props", "x=1"), r.argsBeforeJson(), "ElasticJob's words of the command line: " + r);
        assertTrue(r.json().contains("\\u003d") && r.json().contains("\\u0026") && r.json().contains("\\u003c"),
            "Gson's HTML-safe escaping in ElasticJob's JSON: " + r.json());
      }

      // A sidecar joins by itself (typed_jobs = all): an instance {ip}@-@{its pid}, nothing else changed.
      Sidecar s = c.sidecar("127.0.0.2");
      String scId = "127.0.0.2@-@" + s.pid();
      c.await(job, "the sidecar registers an instance of the SCRIPT job", T, () -> zk.instances(job).contains(scId));
      assertEquals("SCRIPT", zk.data("/" + job), "the root still names the type");
      assertEquals(config, zk.data("/" + job + "/config"), "the config ElasticJob wrote is untouched");

      // ElasticJob's leader gives the sidecar its share at its next (triggered) fire.
      Map<Integer, String> shares = Expected.avg(job, 4, ejId, scId);
      Set<Integer> ejItems = Expected.itemsOf(shares, ejId);
      Set<Integer> scItems = Expected.itemsOf(shares, scId);
      c.operateApi().trigger(job);
      c.await(job, "ElasticJob's fire gives the sidecar its share " + scItems, T,
          () -> zk.owners(job).equals(shares) && zk.shardingSettled(job)
              && log.runs(p -> Long.MAX_VALUE).stream().allMatch(ScriptRun::finished));

      // Both run exactly their own items.
      long t1 = System.currentTimeMillis();
      c.operateApi().trigger(job);
      c.await(job, "each side runs its own items", T,
          () -> finishedSince(log.runs(p -> Long.MAX_VALUE), ej.pid(), t1).keySet().equals(ejItems)
              && finishedSince(log.runs(p -> Long.MAX_VALUE), s.pid(), t1).keySet().equals(scItems));
      Map<Long, Set<Integer>> own = Map.of(ej.pid(), ejItems, s.pid(), scItems);
      for (ScriptRun r : log.runs(p -> Long.MAX_VALUE)) {
        if (r.start() >= t1) {
          assertTrue(own.getOrDefault(r.parent(), Set.of()).contains(r.item()), "a run of an item its runner does not own: " + r
              + "\n" + c.state(job));
        }
      }
      // The sidecar's JSON is ElasticJob's, byte for byte, but for the task id naming its own instance and items.
      Map<Integer, ScriptRun> scRuns = finishedSince(log.runs(p -> Long.MAX_VALUE), s.pid(), t1);
      for (int item : scItems) {
        ScriptRun r = scRuns.get(item);
        assertEquals(taskId(job, scItems, scId), taskIdOf(r.json()), "the sidecar's task id: " + r);
        assertEquals(withTaskId(alone.get(item).json(), taskIdOf(r.json())), r.json(),
            "item " + item + ": the sidecar's JSON differs from ElasticJob's");
        assertEquals(alone.get(item).argsBeforeJson(), r.argsBeforeJson(), "the same words before the JSON");
        assertFalse(r.executionId().isEmpty(), "the sidecar's script gets SHARDCAR_EXECUTION_ID: " + r);
      }
      for (ScriptRun r : finishedSince(log.runs(p -> Long.MAX_VALUE), ej.pid(), t1).values()) {
        assertEquals(taskId(job, ejItems, ejId), taskIdOf(r.json()), "ElasticJob's task id names its share: " + r);
      }
      ScriptLog.assertNoOverlap(log.runs(p -> Long.MAX_VALUE), c.state(job));

      // ElasticJob is SIGKILLed (with its scripts) in the middle of its items: the sidecar runs them as FAILOVER.
      log.slow(ej.pid(), true);
      long t2 = System.currentTimeMillis();
      c.operateApi().trigger(job);
      c.await(job, "ElasticJob's scripts in the middle of " + ejItems, T,
          () -> log.runs(p -> Long.MAX_VALUE).stream().filter(r -> r.parent() == ej.pid() && r.start() >= t2 && !r.finished())
              .map(ScriptRun::item).collect(Collectors.toSet()).equals(ejItems));
      long killed = killWithChildren(ej);
      log.slow(ej.pid(), false);
      c.await(job, "the sidecar runs ElasticJob's items after the kill", T,
          () -> finishedSince(log.runs(p -> Long.MAX_VALUE), s.pid(), killed).keySet().containsAll(ejItems));
      Map<Integer, ScriptRun> failovers = finishedSince(log.runs(p -> Long.MAX_VALUE), s.pid(), killed);
      for (int item : ejItems) {
        ScriptRun r = failovers.get(item);
        JsonObject e = awaitExecution(c, s, job, r.executionId());
        assertEquals("TRIGGER_SOURCE_FAILOVER", e.get("source").getAsString(), "run as FAILOVER: " + e);
        assertTrue(ints(e.getAsJsonArray("items")).contains(item), e.toString());
        String failoverTask = taskIdOf(r.json());
        assertTaskIdRecorded(failoverTask, e);
        assertTrue(failoverTask.startsWith(job + "@-@") && failoverTask.endsWith("@-@READY@-@" + scId)
            && Arrays.asList(failoverTask.split("@-@")[1].split(",")).contains(Integer.toString(item)),
            "a failover task id names the sidecar's instance and the item: " + failoverTask);
        assertEquals(withTaskId(alone.get(item).json(), failoverTask), r.json(), "item " + item + "'s JSON on failover");
      }
      ScriptLog.assertNoOverlap(log.runs(p -> p == ej.pid() ? killed : Long.MAX_VALUE), c.state(job));
      c.await(job, "the sidecar leads and holds every item", T,
          () -> scId.equals(zk.leader(job)) && zk.owners(job).equals(Map.of(0, scId, 1, scId, 2, scId, 3, scId)));
      assertEquals("SCRIPT", zk.data("/" + job));
      assertEquals(config, zk.data("/" + job + "/config"));
    }
  }

  // ---- HTTP, created by ElasticJob -----------------------------------------------------------------

  @Test
  void sidecarJoinsElasticJobsHttpJobSendsTheSameRequestAndTakesOverOnFailover() {
    String job = "ejHttp";
    try (Cluster c = Cluster.start("TypedHttp"); HttpRecorder http = new HttpRecorder(c.dir().resolve("http-requests.txt"))) {
      Zk zk = c.zk();
      Member ej = c.typedElasticJob("ej1", Job.named(job).type("HTTP").total(4).cron(Job.NEVER).params(ITEM_PARAMS)
          .jobParameter(JOB_PARAMETER).failover(true)
          .prop("http.uri", http.base() + "/jobs/ejHttp?from=props&x=1")
          .prop("http.method", "POST")
          .prop("http.data", "a=1&b=é")
          .prop("http.content.type", "application/x-www-form-urlencoded; charset=UTF-8")
          .prop("http.read.timeout.milliseconds", "60000"));
      String ejId = ej.instanceId(job);
      assertEquals("HTTP", zk.data("/" + job), "ElasticJob writes the job type into the root");
      String config = zk.data("/" + job + "/config");

      long t0 = System.currentTimeMillis();
      c.operateApi().trigger(job);
      c.await(job, "ElasticJob calls for all 4 items", T, () -> answeredSince(http, false, t0).keySet().equals(Set.of(0, 1, 2, 3)));
      Map<Integer, Request> alone = answeredSince(http, false, t0);
      Map<Integer, String> params = itemParams(ITEM_PARAMS);
      for (Map.Entry<Integer, Request> e : alone.entrySet()) {
        Request r = e.getValue();
        JsonObject ctx = JsonParser.parseString(r.headerUtf8("shardingContext")).getAsJsonObject();
        assertEquals(taskId(job, Set.of(0, 1, 2, 3), ejId), ctx.get("taskId").getAsString(), r.toString());
        assertEquals(JOB_PARAMETER, ctx.get("jobParameter").getAsString(), r.toString());
        assertEquals(params.get(e.getKey()), ctx.get("shardingParameter").getAsString(), r.toString());
        assertEquals("POST", r.method(), r.toString());
        assertEquals("a=1&b=é", new String(r.body(), StandardCharsets.UTF_8), r.toString());
      }

      Sidecar s = c.sidecar("127.0.0.2");
      String scId = "127.0.0.2@-@" + s.pid();
      c.await(job, "the sidecar registers an instance of the HTTP job", T, () -> zk.instances(job).contains(scId));
      assertEquals("HTTP", zk.data("/" + job));
      assertEquals(config, zk.data("/" + job + "/config"));
      Map<Integer, String> shares = Expected.avg(job, 4, ejId, scId);
      Set<Integer> ejItems = Expected.itemsOf(shares, ejId);
      Set<Integer> scItems = Expected.itemsOf(shares, scId);
      c.operateApi().trigger(job);
      c.await(job, "ElasticJob's fire gives the sidecar its share " + scItems, T,
          () -> zk.owners(job).equals(shares) && zk.shardingSettled(job) && http.requests().stream().allMatch(Request::answeredYet));

      long t1 = System.currentTimeMillis();
      c.operateApi().trigger(job);
      c.await(job, "each side calls for its own items", T,
          () -> answeredSince(http, false, t1).keySet().equals(ejItems) && answeredSince(http, true, t1).keySet().equals(scItems));
      for (Request r : http.requests()) {
        if (r.arrived() >= t1) {
          Set<Integer> own = fromSidecar(r) ? scItems : ejItems;
          assertTrue(own.contains(itemOf(r)), "a call for an item its caller does not own: " + r);
        }
      }
      Map<Integer, Request> scCalls = answeredSince(http, true, t1);
      for (int item : scItems) {
        Request sc = scCalls.get(item);
        Request ejr = alone.get(item);
        String scTask = taskIdOf(sc.headerUtf8("shardingContext"));
        assertEquals(taskId(job, scItems, scId), scTask, "the sidecar's task id");
        // The header's value as bytes on the wire (both are UTF-8 JSON: ElasticJob's HttpURLConnection and the sidecar).
        assertEquals(withTaskId(ejr.header("shardingContext"), scTask), sc.header("shardingContext"),
            "item " + item + ": the sidecar's shardingContext header differs from ElasticJob's (header names: "
                + ejr.headerName("shardingContext") + " / " + sc.headerName("shardingContext") + ")");
        assertEquals(ejr.method(), sc.method());
        assertEquals(ejr.target(), sc.target());
        assertEquals(new String(ejr.body(), StandardCharsets.UTF_8), new String(sc.body(), StandardCharsets.UTF_8));
        assertEquals(ejr.header("Content-Type"), sc.header("Content-Type"));
      }
      assertNoOverlap(http.requests(), 0, c.state(job));

      // ElasticJob is SIGKILLed while its calls are held: the sidecar calls for its items as FAILOVER.
      http.hold(r -> !fromSidecar(r));
      long t2 = System.currentTimeMillis();
      c.operateApi().trigger(job);
      c.await(job, "ElasticJob's calls for " + ejItems + " are held", T,
          () -> http.requests().stream().filter(r -> !fromSidecar(r) && r.arrived() >= t2 && !r.answeredYet())
              .map(TypedJobTest::itemOf).collect(Collectors.toSet()).equals(ejItems));
      long killed = killWithChildren(ej);
      http.hold(r -> false);
      c.await(job, "the sidecar calls for ElasticJob's items after the kill", T,
          () -> answeredSince(http, true, killed).keySet().containsAll(ejItems));
      Map<Integer, Request> failovers = answeredSince(http, true, killed);
      for (int item : ejItems) {
        Request r = failovers.get(item);
        JsonObject e = awaitExecution(c, s, job, r.header("X-Shardcar-Execution-Id"));
        assertEquals("TRIGGER_SOURCE_FAILOVER", e.get("source").getAsString(), "run as FAILOVER: " + e);
        assertTrue(ints(e.getAsJsonArray("items")).contains(item), e.toString());
        String failoverTask = taskIdOf(r.headerUtf8("shardingContext"));
        assertTaskIdRecorded(failoverTask, e);
        assertEquals(withTaskId(alone.get(item).header("shardingContext"), failoverTask), r.header("shardingContext"),
            "item " + item + "'s header on failover");
      }
      assertNoOverlap(http.requests(), killed, c.state(job));
      c.await(job, "the sidecar leads and holds every item", T,
          () -> scId.equals(zk.leader(job)) && zk.owners(job).equals(Map.of(0, scId, 1, scId, 2, scId, 3, scId)));
    }
  }

  // ---- SCRIPT, created by shardcar -----------------------------------------------------------------

  @Test
  void elasticJobStartsOnAScriptJobThatShardcarCreatedAndRunsItsShare() throws Exception {
    String job = "scScript";
    String jobParameter = "x=1&y='2' <z>";
    String itemParams = "0=alpha,1=b&c,2=<d> é";
    try (Cluster c = Cluster.start("TypedReverse")) {
      Zk zk = c.zk();
      ScriptLog log = ScriptLog.in(c.dir());
      Sidecar s = c.sidecar("127.0.0.2");
      String scId = "127.0.0.2@-@" + s.pid();
      JsonObject spec = new JsonObject();
      spec.addProperty("job_name", job);
      spec.addProperty("type", "SCRIPT");
      spec.addProperty("cron", Job.NEVER);
      spec.addProperty("sharding_total_count", 3);
      spec.addProperty("sharding_item_parameters", itemParams);
      spec.addProperty("job_parameter", jobParameter);
      spec.addProperty("failover", true);
      JsonObject props = new JsonObject();
      props.addProperty("script.command.line", log.commandLine("--from=shardcar"));
      spec.add("props", props);
      Path file = c.dir().resolve(job + ".json");
      Files.writeString(file, spec.toString(), StandardCharsets.UTF_8);
      s.ctlOk("job", "put", file.toString());
      assertEquals("SCRIPT", zk.data("/" + job), "shardcar writes the type into the root, as ElasticJob does");
      c.await(job, "the sidecar runs its own SCRIPT job and holds every item", T,
          () -> zk.owners(job).equals(Map.of(0, scId, 1, scId, 2, scId)) && zk.shardingSettled(job));
      String config = zk.data("/" + job + "/config");

      // ElasticJob starts on it with type SCRIPT and a placeholder config (1 item, no props, no overwrite).
      Member ej = c.typedElasticJob("ej1", Job.named(job).type("SCRIPT").total(1).cron(Job.NEVER));
      String ejId = ej.instanceId(job);
      assertEquals("SCRIPT", zk.data("/" + job), "the root stays SCRIPT");
      assertEquals(config, zk.data("/" + job + "/config"), "ElasticJob did not write its placeholder config");
      Map<Integer, String> shares = Expected.avg(job, 3, ejId, scId);
      Set<Integer> ejItems = Expected.itemsOf(shares, ejId);
      Set<Integer> scItems = Expected.itemsOf(shares, scId);
      c.await(job, "the shardcar leader gives ElasticJob its share", T, () -> zk.owners(job).equals(shares) && zk.shardingSettled(job));

      long t1 = System.currentTimeMillis();
      s.ctlOk("trigger", job);
      c.await(job, "each side runs its own items", T,
          () -> finishedSince(log.runs(p -> Long.MAX_VALUE), ej.pid(), t1).keySet().equals(ejItems)
              && finishedSince(log.runs(p -> Long.MAX_VALUE), s.pid(), t1).keySet().equals(scItems));
      Map<Integer, String> params = itemParams(itemParams);
      Map<Integer, ScriptRun> ejRuns = finishedSince(log.runs(p -> Long.MAX_VALUE), ej.pid(), t1);
      Map<Integer, ScriptRun> scRuns = finishedSince(log.runs(p -> Long.MAX_VALUE), s.pid(), t1);
      for (ScriptRun r : ejRuns.values()) {
        JsonObject ctx = JsonParser.parseString(r.json()).getAsJsonObject();
        assertEquals(taskId(job, ejItems, ejId), ctx.get("taskId").getAsString(), r.toString());
        assertEquals(3, ctx.get("shardingTotalCount").getAsInt(), "shardcar's item count: " + r);
        assertEquals(jobParameter, ctx.get("jobParameter").getAsString(), "shardcar's job parameter: " + r);
        assertEquals(params.get(r.item()), ctx.get("shardingParameter").getAsString(), "shardcar's item parameter: " + r);
        assertEquals(List.of("--from=shardcar"), r.argsBeforeJson(), "shardcar's command line: " + r);
      }
      for (ScriptRun r : scRuns.values()) {
        assertEquals(taskId(job, scItems, scId), taskIdOf(r.json()), r.toString());
        assertEquals(List.of("--from=shardcar"), r.argsBeforeJson(), r.toString());
      }
      ScriptLog.assertNoOverlap(log.runs(p -> Long.MAX_VALUE), c.state(job));

      // ElasticJob stops (SIGTERM): the sidecar takes its items back and passes, for them, ElasticJob's JSON.
      ej.terminate();
      assertTrue(ej.waitFor(Duration.ofSeconds(30)) >= 0, "the ElasticJob member exits on SIGTERM");
      c.await(job, "the sidecar holds every item again", T,
          () -> zk.owners(job).equals(Map.of(0, scId, 1, scId, 2, scId)) && zk.shardingSettled(job));
      long t2 = System.currentTimeMillis();
      s.ctlOk("trigger", job);
      c.await(job, "the sidecar runs all three items", T,
          () -> finishedSince(log.runs(p -> Long.MAX_VALUE), s.pid(), t2).keySet().equals(Set.of(0, 1, 2)));
      Map<Integer, ScriptRun> after = finishedSince(log.runs(p -> Long.MAX_VALUE), s.pid(), t2);
      for (int item : ejItems) {
        ScriptRun r = after.get(item);
        assertEquals(withTaskId(ejRuns.get(item).json(), taskIdOf(r.json())), r.json(),
            "item " + item + ": the sidecar's JSON differs from ElasticJob's");
      }
      ScriptLog.assertNoOverlap(log.runs(p -> Long.MAX_VALUE), c.state(job));
      assertEquals("SCRIPT", zk.data("/" + job));
      assertEquals(config, zk.data("/" + job + "/config"));
    }
  }

  // ---- the words of a command line ---------------------------------------------------------------

  /**
   * ElasticJob splits {@code script.command.line} with Commons Exec 1.3 ({@code CommandLine.parse},
   * then {@code toStrings()}), which quotes again every word that holds a space or a quote: the
   * script gets {@code "two words"} with its double quotes. The sidecar must pass the same words.
   */
  @Test
  void scriptCommandLinesReachTheScriptAsElasticJobPassesThem() {
    String job = "ejWords";
    try (Cluster c = Cluster.start("TypedWords")) {
      Zk zk = c.zk();
      ScriptLog log = ScriptLog.in(c.dir());
      Member ej = c.typedElasticJob("ej1", Job.named(job).type("SCRIPT").total(2).cron(Job.NEVER)
          .prop("script.command.line", log.commandLine("plain 'two words' \"it's\" 'say \"hi\"' a'b c'd ''")));
      String ejId = ej.instanceId(job);
      long t0 = System.currentTimeMillis();
      c.operateApi().trigger(job);
      c.await(job, "ElasticJob runs both items", T,
          () -> finishedSince(log.runs(p -> Long.MAX_VALUE), ej.pid(), t0).keySet().equals(Set.of(0, 1)));
      List<String> ejWords = finishedSince(log.runs(p -> Long.MAX_VALUE), ej.pid(), t0).get(0).argsBeforeJson();
      Sidecar s = c.sidecar("127.0.0.2");
      String scId = "127.0.0.2@-@" + s.pid();
      c.await(job, "the sidecar registers", T, () -> zk.instances(job).contains(scId));
      Map<Integer, String> shares = Expected.avg(job, 2, ejId, scId);
      c.operateApi().trigger(job);
      c.await(job, "the sidecar gets its share", T, () -> zk.owners(job).equals(shares) && zk.shardingSettled(job)
          && log.runs(p -> Long.MAX_VALUE).stream().allMatch(ScriptRun::finished));
      long t1 = System.currentTimeMillis();
      c.operateApi().trigger(job);
      int scItem = Expected.itemsOf(shares, scId).iterator().next();
      c.await(job, "the sidecar runs its item", T,
          () -> finishedSince(log.runs(p -> Long.MAX_VALUE), s.pid(), t1).containsKey(scItem));
      List<String> scWords = finishedSince(log.runs(p -> Long.MAX_VALUE), s.pid(), t1).get(scItem).argsBeforeJson();
      assertEquals(ejWords, scWords, "the words of script.command.line (before the JSON): ElasticJob's, then the sidecar's");
    }
  }

  // ---- helpers -------------------------------------------------------------------------------------

  /** ElasticJob's task id form: {@code {job}@-@{items, comma-joined, ascending}@-@READY@-@{instance id}}. */
  static String taskId(String job, Set<Integer> items, String instanceId) {
    return job + "@-@" + new TreeSet<>(items).stream().map(String::valueOf).collect(Collectors.joining(",")) + "@-@READY@-@"
        + instanceId;
  }

  static String taskIdOf(String json) {
    Matcher m = TASK_ID.matcher(json);
    if (!m.find()) {
      throw new AssertionError("no taskId in " + json);
    }
    return m.group(1);
  }

  static String withTaskId(String json, String taskId) {
    return TASK_ID.matcher(json).replaceFirst(Matcher.quoteReplacement("\"taskId\":\"" + taskId + "\""));
  }

  static Map<Integer, String> itemParams(String s) {
    Map<Integer, String> m = new HashMap<>();
    for (String pair : s.split(",")) {
      String[] kv = pair.trim().split("=");
      m.put(Integer.valueOf(kv[0]), kv[1]);
    }
    return m;
  }

  /** The latest finished run of each item by {@code parent} that started at or after {@code since}. */
  static Map<Integer, ScriptRun> finishedSince(List<ScriptRun> runs, long parent, long since) {
    Map<Integer, ScriptRun> m = new TreeMap<>();
    for (ScriptRun r : runs) {
      if (r.parent() == parent && r.start() >= since && r.finished()) {
        m.put(r.item(), r);
      }
    }
    return m;
  }

  static boolean fromSidecar(Request r) {
    return r.header("X-Shardcar-Execution-Id") != null;
  }

  static int itemOf(Request r) {
    return JsonParser.parseString(r.headerUtf8("shardingContext")).getAsJsonObject().get("shardingItem").getAsInt();
  }

  /** The latest answered call for each item from the sidecar (or from ElasticJob) since {@code since}. */
  static Map<Integer, Request> answeredSince(HttpRecorder http, boolean sidecar, long since) {
    Map<Integer, Request> m = new TreeMap<>();
    for (Request r : http.requests()) {
      if (fromSidecar(r) == sidecar && r.arrived() >= since && r.answeredYet()) {
        m.put(itemOf(r), r);
      }
    }
    return m;
  }

  /** No two calls for one item overlap; an unanswered call from ElasticJob ended when it was killed ({@code killed}). */
  static void assertNoOverlap(List<Request> requests, long killed, String state) {
    List<long[]> spans = new ArrayList<>();
    List<Request> rs = new ArrayList<>();
    for (Request r : requests) {
      long end = r.answeredYet() ? r.answered() : Long.MAX_VALUE;
      if (!fromSidecar(r) && killed > 0) {
        end = Math.min(end, killed);
      }
      spans.add(new long[] {itemOf(r), r.arrived(), end});
      rs.add(r);
    }
    List<String> clashes = new ArrayList<>();
    for (int i = 0; i < spans.size(); i++) {
      for (int j = i + 1; j < spans.size(); j++) {
        long[] a = spans.get(i);
        long[] b = spans.get(j);
        if (a[0] == b[0] && a[1] < b[2] && b[1] < a[2]) {
          clashes.add(rs.get(i) + "\n    overlaps " + rs.get(j));
        }
      }
    }
    if (!clashes.isEmpty()) {
      throw new AssertionError("calls overlap:\n  " + String.join("\n  ", clashes) + "\n" + state);
    }
  }

  /**
   * SIGKILLs a member JVM and every process it started (its scripts: a host that dies takes them
   * along); returns when all are gone.
   */
  static long killWithChildren(Member m) {
    List<ProcessHandle> children = ProcessHandle.of(m.pid()).map(p -> p.descendants().toList()).orElse(List.of());
    m.kill();
    for (ProcessHandle p : children) {
      p.destroyForcibly();
    }
    for (ProcessHandle p : children) {
      try {
        p.onExit().get(20, TimeUnit.SECONDS);
      } catch (Exception e) {
        throw new IllegalStateException("a child of " + m + " survived SIGKILL: " + p.pid(), e);
      }
    }
    return System.currentTimeMillis();
  }

  /**
   * The sidecar's record of execution {@code id}, once it is in its history (an execution is
   * recorded when it finished: its answers reach the sidecar after the script's end).
   */
  static JsonObject awaitExecution(Cluster c, Sidecar s, String job, String id) {
    JsonObject[] found = new JsonObject[1];
    c.await(job, "execution " + id + " in the sidecar's history (ctl executions)", T, () -> {
      found[0] = s.executions(job).get(id);
      return found[0] != null;
    });
    assertEquals("EXECUTION_OUTCOME_COMPLETED", string(found[0], "outcome"), "the execution completed: " + found[0]);
    return found[0];
  }

  /**
   * The execution's task id in the history is the one the script or call got. (A sidecar built before
   * {@code ExecutionInfo.task_id} existed leaves the field out: then there is nothing to compare.)
   */
  static void assertTaskIdRecorded(String taskId, JsonObject execution) {
    if (execution.has("taskId")) {
      assertEquals(taskId, string(execution, "taskId"), "the run got the execution's task id: " + execution);
    }
  }

  /** A string field of proto3 JSON ({@code ""} when left out, as proto3 leaves out empty strings). */
  static String string(JsonObject o, String field) {
    return o.has(field) ? o.get(field).getAsString() : "";
  }

  static Set<Integer> ints(JsonArray a) {
    Set<Integer> s = new TreeSet<>();
    if (a != null) {
      a.forEach(e -> s.add(e.getAsInt()));
    }
    return s;
  }
}
