package io.shardcar.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.shardcar.interop.harness.Cluster;
import io.shardcar.interop.harness.Expected;
import io.shardcar.interop.harness.HttpRecorder;
import io.shardcar.interop.harness.HttpRecorder.Request;
import io.shardcar.interop.harness.Job;
import io.shardcar.interop.harness.Member;
import io.shardcar.interop.harness.Run;
import io.shardcar.interop.harness.Sidecar;
import io.shardcar.interop.harness.Zk;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.apache.shardingsphere.elasticjob.infra.pojo.JobConfigurationPOJO;
import org.junit.jupiter.api.Test;

/**
 * ElasticJob's DINGTALK error handler, configured by an ElasticJob JVM, reports a shardcar worker's
 * failed item: the sidecar that received the failure posts one DingTalk text message, with the
 * keyword and the signature ElasticJob's handler would put there, and ElasticJob's own failures
 * still go out through ElasticJob's own handler.
 *
 * <p>Members: an ElasticJob JVM E (creates the job with {@code jobErrorHandlerType: DINGTALK} and the
 * robot's webhook, keyword and secret; leads) and two shardcar workers W1, W2 on sidecars
 * 127.0.0.2 and 127.0.0.3, one item each. The robot is an {@link HttpRecorder} on a free loopback
 * port answering as DingTalk does, {@code {"errcode":0,"errmsg":"ok"}}.
 */
class DingtalkHandlerTest {
  private static final String JOB = "dingtalkJob";
  private static final Duration T = Duration.ofSeconds(30);
  private static final String TOKEN = "interop-token";
  private static final String KEYWORD = "[interop] ";
  private static final String SECRET = "SECinterop0123456789abcdef";
  /** The text both sides put first: ElasticJob's sentence, after the keyword. */
  private static final String HEADLINE = KEYWORD + "Job '" + JOB + "' exception occur in job processing, caused by ";

  @Test
  void aShardcarWorkersFailedItemReachesElasticJobsDingtalkRobotOnceSignedAsElasticJobSignsIt() throws Exception {
    try (Cluster c = Cluster.start("DingtalkHandler");
        HttpRecorder robot = new HttpRecorder(c.dir().resolve("dingtalk-robot.log"), "application/json",
            "{\"errcode\":0,\"errmsg\":\"ok\"}")) {
      Zk zk = c.zk();
      String webhook = robot.base() + "/robot/send?access_token=" + TOKEN;
      Member e = c.elasticJob("ej", Job.named(JOB).total(3).cron(Job.NEVER).jobParameter("from-elasticjob")
          .errorHandler("DINGTALK").prop("dingtalk.webhook", webhook).prop("dingtalk.keyword", KEYWORD)
          .prop("dingtalk.secret", SECRET));
      String eId = e.instanceId(JOB);
      c.await(JOB, "ElasticJob leads", T, () -> eId.equals(zk.leader(JOB)));
      String config = zk.data("/" + JOB + "/config");
      JobConfigurationPOJO written = c.configApi().getJobConfiguration(JOB);
      assertEquals("DINGTALK", written.getJobErrorHandlerType(), "ElasticJob wrote its handler type:\n" + config);
      assertEquals(webhook, written.getProps().getProperty("dingtalk.webhook"), config);
      assertEquals(KEYWORD, written.getProps().getProperty("dingtalk.keyword"), config);
      assertEquals(SECRET, written.getProps().getProperty("dingtalk.secret"), config);

      Sidecar s1 = c.sidecar("127.0.0.2");
      Sidecar s2 = c.sidecar("127.0.0.3");
      Member w1 = c.shardcar("sc1", s1, Job.named(JOB).withConfig(false));
      Member w2 = c.shardcar("sc2", s2, Job.named(JOB).withConfig(false));
      String w1Id = w1.instanceId(JOB);
      String w2Id = w2.instanceId(JOB);
      assertEquals(config, zk.data("/" + JOB + "/config"), "the workers' sidecars leave ElasticJob's config as it was");

      // ElasticJob's next fire reshards: one item each.
      Map<Integer, String> shares = Expected.avg(JOB, 3, eId, w1Id, w2Id);
      int eItem = Expected.itemsOf(shares, eId).iterator().next();
      int w1Item = Expected.itemsOf(shares, w1Id).iterator().next();
      int w2Item = Expected.itemsOf(shares, w2Id).iterator().next();
      Map<Member, Integer> own = Map.of(e, eItem, w1, w1Item, w2, w2Item);
      long t0 = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      // At this fire ElasticJob's leader may also run items it has just given away (its #2195): at least its own.
      c.await(JOB, "ElasticJob's fire gives each member one item, and each runs it", T,
          () -> zk.owners(JOB).equals(shares) && zk.shardingSettled(JOB) && own.entrySet().stream()
              .allMatch(o -> c.runsOf(JOB, o.getKey(), t0).stream().anyMatch(r -> r.item() == o.getValue())) && c.idle(JOB));
      assertEquals(List.of(), robot.requests(), "nothing failed, nothing was sent");

      // ---- W1's item fails: its sidecar sends one message through ElasticJob's handler ----------------
      c.fail(w1, w1Item);
      long t1 = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      c.await(JOB, "each member runs its item once more, W1's fails", T,
          () -> ranOwnItems(c, t1, own) && c.idle(JOB) && robot.requests().size() >= 1);
      Run failed = c.runsOf(JOB, w1, t1).get(0);
      assertEquals("failed", failed.outcome(), failed.toString());
      String execution = failed.startRec().get("execution");
      c.await(JOB, "the sidecar's history has W1's execution as failed", T,
          () -> s1.executions(JOB).containsKey(execution) && "EXECUTION_OUTCOME_FAILED".equals(
              s1.executions(JOB).get(execution).get("outcome").getAsString()));
      for (Run r : c.runs(JOB)) {
        if (r.start() >= t1 && !r.equals(failed)) {
          assertEquals("completed", r.outcome(), "only W1's item fails: " + r);
        }
      }
      Request sent = robot.requests().get(0);
      assertSignedAsElasticJobSigns(sent);
      String content = content(sent);
      String error = "java.lang.IllegalStateException: item " + w1Item + " failed on purpose";
      Pattern expected = Pattern.compile(Pattern.quote(HEADLINE + error + "\nitem " + w1Item + ", execution " + execution
          + ", task " + failed.startRec().get("taskId") + ", instance " + w1Id + ", at ") + "\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z");
      assertTrue(expected.matcher(content).matches(), "the sidecar's DingTalk text:\n" + content + "\nexpected:\n" + expected);
      assertTrue(sent.header("Content-Type").startsWith("application/json"), sent.toString());
      assertEquals(config, zk.data("/" + JOB + "/config"), "the config is untouched");

      // ---- E's item fails too: ElasticJob's handler sends ElasticJob's message, the sidecar its own ----
      c.fail(e, eItem);
      long t2 = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      c.await(JOB, "each member runs its item again, W1's and E's fail, and both messages arrive", T,
          () -> ranOwnItems(c, t2, own) && c.idle(JOB) && robot.requests().size() >= 3);
      Run eFailed = c.runsOf(JOB, e, t2).get(0);
      Run w1Failed = c.runsOf(JOB, w1, t2).get(0);
      assertEquals("failed", eFailed.outcome(), eFailed.toString());
      assertEquals("failed", w1Failed.outcome(), w1Failed.toString());
      List<Request> fromElasticJob = robot.requests().stream().filter(r -> content(r).contains("\tat ")).toList();
      assertEquals(1, fromElasticJob.size(), "one message from ElasticJob's handler:\n" + robot.requests());
      Request ejSent = fromElasticJob.get(0);
      assertSignedAsElasticJobSigns(ejSent);
      String ejContent = content(ejSent);
      // ElasticJob's text: the sentence, then the exception's stack trace (printStackTrace), nothing about the item.
      assertTrue(ejContent.startsWith(HEADLINE + "java.lang.IllegalStateException: item " + eItem + " failed on purpose\n\tat "),
          "ElasticJob's DingTalk text:\n" + ejContent);

      // ---- no more failures: one last trigger, all complete ------------------------------------------
      c.fail(w1);
      c.fail(e);
      long t3 = System.currentTimeMillis();
      c.operateApi().trigger(JOB);
      c.await(JOB, "each member runs its item, none fails", T, () -> ranOwnItems(c, t3, own) && c.idle(JOB));
      assertTrue(c.runs(JOB).stream().filter(r -> r.start() >= t3).allMatch(r -> "completed".equals(r.outcome())), c.runs(JOB).toString());

      // Exactly one message per failed run: two from W1's sidecar (naming W1, its item and each execution), one from
      // ElasticJob; none from W2's sidecar.
      List<Request> all = robot.requests();
      List<Request> fromSidecars = all.stream().filter(r -> !content(r).contains("\tat ")).toList();
      assertEquals(3, all.size(), "three failed runs, three messages:\n" + all);
      assertEquals(List.of(execution, w1Failed.startRec().get("execution")),
          fromSidecars.stream().map(DingtalkHandlerTest::executionOf).toList(), "one message per failed run of W1:\n" + all);
      assertTrue(fromSidecars.stream().allMatch(r -> content(r).contains(", instance " + w1Id + ", at ")),
          "only W1's sidecar sent: " + all);
      assertEquals(config, zk.data("/" + JOB + "/config"), "the config is untouched, byte for byte");
      c.assertNoOverlap(JOB);
    }
  }

  /** Each of {@code own} (member → its one item) ran exactly that item, once, since {@code since}. */
  static boolean ranOwnItems(Cluster c, long since, Map<Member, Integer> own) {
    for (Map.Entry<Member, Integer> e : own.entrySet()) {
      List<Run> runs = c.runsOf(JOB, e.getKey(), since);
      if (runs.size() != 1 || runs.get(0).item() != e.getValue()) {
        return false;
      }
    }
    return true;
  }

  /**
   * The request is DingTalk's signed POST as ElasticJob's handler makes it: the webhook, then
   * {@code &timestamp=MILLIS&sign=SIGN}, SIGN being the base64 HMAC-SHA256 of {@code timestamp + "\n" +
   * secret} keyed by the secret, URL-encoded by {@link URLEncoder}; the timestamp taken at the send.
   */
  static void assertSignedAsElasticJobSigns(Request r) throws Exception {
    assertEquals("POST", r.method(), r.toString());
    Map<String, String> query = query(r.target());
    assertEquals(Set.of("access_token", "timestamp", "sign"), query.keySet(), r.target());
    long timestamp = Long.parseLong(query.get("timestamp"));
    assertTrue(Math.abs(r.arrived() - timestamp) < 10_000, "the timestamp is the send's: " + timestamp + " vs " + r.arrived());
    Mac mac = Mac.getInstance("HmacSHA256");
    mac.init(new SecretKeySpec(SECRET.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
    String sign = Base64.getEncoder().encodeToString(mac.doFinal((timestamp + "\n" + SECRET).getBytes(StandardCharsets.UTF_8)));
    assertEquals("/robot/send?access_token=" + TOKEN + "&timestamp=" + timestamp + "&sign="
        + URLEncoder.encode(sign, StandardCharsets.UTF_8), r.target(), "signed as ElasticJob signs");
    JsonObject body = JsonParser.parseString(new String(r.body(), StandardCharsets.UTF_8)).getAsJsonObject();
    assertEquals(Set.of("msgtype", "text"), body.keySet(), body.toString());
    assertEquals("text", body.get("msgtype").getAsString(), body.toString());
    assertEquals(Set.of("content"), body.getAsJsonObject("text").keySet(), body.toString());
  }

  /** The raw query parameters of a request target, in order. */
  static Map<String, String> query(String target) {
    String q = target.substring(target.indexOf('?') + 1);
    return java.util.Arrays.stream(q.split("&")).map(p -> p.split("=", 2))
        .collect(Collectors.toMap(p -> p[0], p -> p.length > 1 ? p[1] : "", (a, b) -> a, java.util.LinkedHashMap::new));
  }

  /** The DingTalk text of a request. */
  static String content(Request r) {
    return JsonParser.parseString(new String(r.body(), StandardCharsets.UTF_8)).getAsJsonObject()
        .getAsJsonObject("text").get("content").getAsString();
  }

  /** The execution a sidecar's message names. */
  static String executionOf(Request r) {
    java.util.regex.Matcher m = Pattern.compile(", execution ([^,]+), ").matcher(content(r));
    return m.find() ? m.group(1) : null;
  }
}
