package io.shardcar.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.shardcar.interop.harness.Await;
import io.shardcar.interop.harness.Cluster;
import io.shardcar.interop.harness.Job;
import io.shardcar.interop.harness.Member;
import io.shardcar.interop.harness.PostgresServer;
import io.shardcar.interop.harness.Rec;
import io.shardcar.interop.harness.TracingProcs;
import io.shardcar.interop.harness.TracingSidecar;
import io.shardcar.interop.harness.TracingTables;
import io.shardcar.interop.harness.TracingTables.ExecRow;
import io.shardcar.interop.harness.TracingTables.StatusRow;
import java.sql.Connection;
import java.time.Duration;
import java.time.LocalDateTime;
import java.time.ZoneId;
import java.time.ZonedDateTime;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.shardingsphere.elasticjob.infra.pojo.JobConfigurationPOJO;
import org.junit.jupiter.api.Test;

/**
 * ElasticJob's RDB event tracing, side by side (issue #12): an ElasticJob-Lite 3.0.4 JVM configured
 * with {@code TracingConfiguration("RDB", dataSource)} and a shardcar sidecar with {@code --tracing-db}
 * write into one PostgreSQL database. Each side has a namespace of its own with the same job
 * ({@code traced}: 2 items, failover and misfire on), run by members of its kind, and goes through
 * the same executions: normal, failed, misfire and failover. For each, the rows both wrote are put
 * together into executions and must match column by column, values aside from ids, times (only
 * whether a time is there is compared) and hosts ({@code hostname}, {@code ip}, {@code slave_id}, and
 * the instance at the end of {@code task_id}, which is named by its role).
 *
 * <p>Where shardcar differs on purpose, this test says so:
 * <ul>
 *   <li>failure texts: ElasticJob stores the exception's stack trace ({@code failure_cause}, and in the
 *       {@code TASK_ERROR} message); shardcar stores what the worker reported, which for the Java client
 *       is the exception's {@code toString()}, the trace's first line. They are compared without the
 *       stack frames.</li>
 *   <li>when a misfire catch-up runs: ElasticJob's Quartz thread notices the missed fire only once the
 *       busy run has ended, so the catch-up runs after the next fire's normal run; shardcar runs it as
 *       soon as the busy run ends. The executions, and so the rows, are the same: the test triggers
 *       once more on both sides, after the catch-up on shardcar's side.</li>
 * </ul>
 * ElasticJob also creates the tables (its member starts first, on the empty database); a sidecar creates
 * them in a second database, and the two catalogs must be equal. At the end, {@code shardcar ctl
 * executions} on the sidecar lists ElasticJob's executions from the database next to its own.
 */
class TracingRdbTest {
  private static final String JOB = "traced";
  private static final Duration T = Duration.ofSeconds(60);

  /** One side: a namespace of its own, members of one kind, rows recognised by their instances. */
  private abstract static class Side {
    final String name;
    final Cluster cluster;
    final List<Member> members = new ArrayList<>();
    /** The instance ids of its members. */
    final Set<String> instances = new HashSet<>();

    Side(String name, Cluster cluster) {
      this.name = name;
      this.cluster = cluster;
    }

    abstract Member start(String member);

    /** The job as every member of the side is given it. */
    static Job job() {
      return Job.named(JOB).total(2).cron(Job.NEVER).failover(true).set("misfire", true).withConfig(true);
    }

    /** The instance at the end of a task id ({@code {job}@-@{items}@-@READY@-@{ip}@-@{pid}}). */
    static String instanceOf(String taskId) {
      String[] parts = taskId.split("@-@", 4);
      return parts.length == 4 ? parts[3] : "";
    }

    boolean owns(String taskId) {
      return instances.contains(instanceOf(taskId));
    }

    void trigger() {
      cluster.operateApi().trigger(JOB);
    }

    void cron(String cron) {
      JobConfigurationPOJO pojo = cluster.configApi().getJobConfiguration(JOB);
      pojo.setCron(cron);
      cluster.configApi().updateJobConfiguration(pojo);
    }

    boolean misfireFlagged() {
      return cluster.zk().exists("/" + JOB + "/sharding/0/misfire") && cluster.zk().exists("/" + JOB + "/sharding/1/misfire");
    }

    @Override
    public String toString() {
      return name;
    }
  }

  /** The rows of one side written during one scenario. */
  private record Rows(List<ExecRow> execs, List<StatusRow> statuses) {
    Set<String> ids() {
      Set<String> ids = new HashSet<>();
      execs.forEach(r -> ids.add(r.id()));
      statuses.forEach(r -> ids.add(r.id()));
      return ids;
    }

    long complete() {
      return execs.stream().filter(r -> r.complete() != null).count();
    }

    @Override
    public String toString() {
      return Stream.concat(execs.stream().map(Object::toString), statuses.stream().map(Object::toString))
          .collect(Collectors.joining("\n  ", "  ", ""));
    }
  }

  private Connection db;

  /** {@code side}'s rows not in {@code before}. */
  private Rows newRows(Side side, Set<String> before) {
    return new Rows(
        TracingTables.executionRows(db).stream().filter(r -> side.owns(r.taskId()) && !before.contains(r.id())).toList(),
        TracingTables.statusRows(db).stream().filter(r -> side.owns(r.taskId()) && !before.contains(r.id())).toList());
  }

  /** The id of every row of both tables. */
  private Set<String> allIds() {
    Set<String> ids = new HashSet<>();
    TracingTables.executionRows(db).forEach(r -> ids.add(r.id()));
    TracingTables.statusRows(db).forEach(r -> ids.add(r.id()));
    return ids;
  }

  /** Waits until {@code side} wrote, since {@code before}, exactly these many rows. */
  private Rows awaitRows(Side side, String scenario, Set<String> before, int execs, int complete, int statuses) {
    Rows[] last = {null};
    Await.until(side + " writes the rows of " + scenario + ": " + execs + " execution rows (" + complete + " complete) and "
        + statuses + " status rows", T, () -> {
          Rows r = newRows(side, before);
          last[0] = r;
          assertFalse(r.execs().size() > execs || r.statuses().size() > statuses || r.complete() > complete,
              side + " wrote more rows than expected for " + scenario + ":\n" + r);
          return r.execs().size() == execs && r.statuses().size() == statuses && r.complete() == complete;
        }, () -> "rows so far:\n" + last[0] + "\n" + side.cluster.state(JOB));
    return last[0];
  }

  @Test
  void anElasticJobJvmAndAShardcarSidecarWriteTheSameRowsForTheSameExecutions() throws Exception {
    try (PostgresServer pg = PostgresServer.start(io.shardcar.interop.harness.Layout.logRoot());
         Cluster ejCluster = Cluster.start("TracingRdb-elasticjob");
         Cluster scCluster = Cluster.start("TracingRdb-shardcar");
         TracingProcs procs = new TracingProcs();
         Connection conn = pg.connect(PostgresServer.DATABASE)) {
      db = conn;
      pg.createDatabase("sidecar_ddl");

      // ElasticJob first, on the empty database: it creates the tables.
      Side ej = new Side("ElasticJob", ejCluster) {
        @Override
        Member start(String member) {
          Member m = procs.elasticJob(cluster, "ej-" + member, pg, PostgresServer.DATABASE, job());
          members.add(m);
          instances.add(m.instanceId(JOB));
          return m;
        }
      };
      Member ejA = ej.start("a");
      List<String> elasticJobCatalog = TracingTables.catalog(conn);
      assertFalse(elasticJobCatalog.isEmpty(), "ElasticJob created its tables");

      // A sidecar creates them in another database: the same tables, columns and indexes.
      TracingSidecar ddl = procs.sidecar(scCluster, "127.0.0.9", pg.url("sidecar_ddl"));
      try (Connection other = pg.connect("sidecar_ddl")) {
        assertEquals(elasticJobCatalog, TracingTables.catalog(other), "the sidecar's tables are ElasticJob's");
      }
      procs.stop(ddl);

      TracingSidecar sidecar = procs.sidecar(scCluster, "127.0.0.2", pg.url(PostgresServer.DATABASE));
      Side sc = new Side("shardcar", scCluster) {
        @Override
        Member start(String member) {
          Member m = procs.shardcar(cluster, "sc-" + member, sidecar, job());
          members.add(m);
          instances.add(m.instanceId(JOB));
          return m;
        }
      };
      Member scA = sc.start("a");
      Map<Side, Member> a = Map.of(ej, ejA, sc, scA);
      Map<Side, Set<String>> seen = new LinkedHashMap<>();
      seen.put(ej, new HashSet<>());
      seen.put(sc, new HashSet<>());

      // Normal: one member holds both items; a trigger runs them.
      Map<Side, Rows> normal = new LinkedHashMap<>();
      for (Side s : List.of(ej, sc)) {
        Set<String> before = allIds();
        s.trigger();
        normal.put(s, awaitRows(s, "a normal execution", before, 2, 2, 3));
      }
      compare("normal", normal, s -> Map.of(a.get(s).instanceId(JOB), "A"));
      normal.forEach((s, r) -> seen.get(s).addAll(r.ids()));

      // Failed: item 1 throws.
      Map<Side, Rows> failed = new LinkedHashMap<>();
      for (Side s : List.of(ej, sc)) {
        s.cluster.fail(a.get(s), 1);
        Set<String> before = allIds();
        s.trigger();
        failed.put(s, awaitRows(s, "an execution whose item 1 fails", before, 2, 2, 3));
        s.cluster.fail(a.get(s));
      }
      compare("failed", failed, s -> Map.of(a.get(s).instanceId(JOB), "A"));
      failed.forEach((s, r) -> seen.get(s).addAll(r.ids()));

      // Misfire: a cron fire (T1) starts a run that is still busy at the next fire (T2).
      Map<Side, Rows> misfire = new LinkedHashMap<>();
      for (Side s : List.of(ej, sc)) {
        Member m = a.get(s);
        s.cluster.slow(m, true);
        Set<String> before = allIds();
        ZonedDateTime t1 = twoFiresAhead();
        ZonedDateTime t2 = t1.plusSeconds(2);
        long updated = System.currentTimeMillis();
        s.cron(t1.getSecond() + "," + t2.getSecond() + " " + t1.getMinute() + " " + t1.getHour() + " " + t1.getDayOfMonth()
            + " " + t1.getMonthValue() + " ? " + t1.getYear());
        s.cluster.await(JOB, s + " runs both items, slowly, at the first fire", T,
            () -> m.recs().stream().filter(r -> r.is("start") && r.t() >= updated && "true".equals(r.get("slow")))
                .map(Rec::item).collect(Collectors.toSet()).equals(Set.of(0, 1)));
        // The run is kept going until the clock is past the second fire's instant, so both sides miss
        // that fire (ElasticJob's Quartz tells a missed fire only by its time: nothing shows it sooner).
        Await.until("the clock passes the second fire, " + t2, T,
            () -> System.currentTimeMillis() > t2.toInstant().toEpochMilli() + 500, () -> "");
        if (s == sc) {
          s.cluster.await(JOB, "shardcar flags the items misfire at the second fire", T, s::misfireFlagged);
        }
        s.cluster.slow(m, false);
        if (s == ej) {
          // ElasticJob's Quartz thread notices the missed fire once the busy run has ended: it flags the
          // items, and its next fire runs them normally and then once more as the MISFIRE catch-up.
          s.cluster.await(JOB, "ElasticJob flags the items misfire once the busy run ended", T, s::misfireFlagged);
        } else {
          // shardcar runs the catch-up as soon as the busy run ends.
          s.cluster.await(JOB, "shardcar runs the MISFIRE catch-up once the busy run ended", T,
              () -> newRows(s, before).execs().stream().filter(r -> "MISFIRE".equals(r.source()) && r.complete() != null)
                  .count() == 2);
        }
        s.trigger();
        misfire.put(s, awaitRows(s, "a busy run, a normal run and a misfire catch-up", before, 6, 6, 8));
        s.cron(Job.NEVER);
      }
      compare("misfire", misfire, s -> Map.of(a.get(s).instanceId(JOB), "A"));
      misfire.forEach((s, r) -> seen.get(s).addAll(r.ids()));

      // Failover: a second member joins; the member running item 0 is killed in the middle of it, the
      // other runs it.
      Map<Side, Rows> failover = new LinkedHashMap<>();
      Map<Side, Map<String, String>> roles = new LinkedHashMap<>();
      for (Side s : List.of(ej, sc)) {
        Member mA = a.get(s);
        Member mB = s.start("b");
        s.cluster.slow(mA, true);
        s.cluster.slow(mB, true);
        if (s == sc) {
          s.cluster.await(JOB, "shardcar gives each member one item", T,
              () -> mA.assignment(JOB).map(Set::size).orElse(0) == 1 && mB.assignment(JOB).map(Set::size).orElse(0) == 1);
        }
        Set<String> before = allIds();
        long triggered = System.currentTimeMillis();
        s.trigger();
        Map<Integer, Member> runner = new TreeMap<>();
        s.cluster.await(JOB, s + "'s members each start their item", T, () -> {
          for (Member m : List.of(mA, mB)) {
            m.recs().stream().filter(r -> r.is("start") && r.t() >= triggered).forEach(r -> runner.put(r.item(), m));
          }
          return runner.keySet().equals(Set.of(0, 1)) && runner.get(0) != runner.get(1);
        });
        Member x = runner.get(0);
        Member y = runner.get(1);
        s.cluster.slow(y, false);
        if (s == ej) {
          // ElasticJob writes an item's row as the item starts: wait for it (and the task's status rows)
          // before the kill, as for a process killed in the middle of its item.
          s.cluster.await(JOB, "ElasticJob wrote the start of item 0", T, () -> {
            Rows r = newRows(s, before);
            String task = JOB + "@-@0@-@READY@-@" + x.instanceId(JOB);
            return r.execs().stream().anyMatch(e -> e.taskId().equals(task))
                && r.statuses().stream().filter(e -> e.taskId().equals(task)).count() == 2;
          });
        }
        x.kill();
        failover.put(s, awaitRows(s, "a run killed in the middle of item 0, and its failover", before, 3, 2, 8));
        roles.put(s, Map.of(x.instanceId(JOB), "X (killed)", y.instanceId(JOB), "Y"));
      }
      compare("failover", failover, roles::get);
      failover.forEach((s, r) -> seen.get(s).addAll(r.ids()));

      // Nothing else was written by either side.
      for (Side s : List.of(ej, sc)) {
        Rows all = newRows(s, Set.of());
        assertEquals(seen.get(s), all.ids(), s + " wrote rows outside the scenarios:\n" + all);
      }

      // shardcar ctl executions on the sidecar lists, from the database, ElasticJob's executions next to
      // shardcar's: 8 each (normal, failed, 3 in the misfire scenario, 3 in the failover scenario).
      JsonObject listed = JsonParser.parseString(sidecar.ctlOk("--json", "executions", "--limit", "0")).getAsJsonObject();
      JsonArray executions = listed.getAsJsonArray("executions");
      Set<String> ejInstances = ej.members.stream().map(m -> m.instanceId(JOB)).collect(Collectors.toSet());
      Set<String> scInstances = sc.members.stream().map(m -> m.instanceId(JOB)).collect(Collectors.toSet());
      List<JsonObject> ejListed = new ArrayList<>();
      int scListed = 0;
      for (JsonElement e : executions) {
        String instance = e.getAsJsonObject().get("instanceId").getAsString();
        if (ejInstances.contains(instance)) {
          ejListed.add(e.getAsJsonObject());
        } else if (scInstances.contains(instance)) {
          scListed++;
        }
      }
      assertEquals(16, executions.size(), "every execution, grouped from its item rows:\n" + listed);
      assertEquals(8, ejListed.size(), "ElasticJob's executions:\n" + listed);
      assertEquals(8, scListed, "shardcar's executions:\n" + listed);
      assertEquals(1, ejListed.stream().filter(e -> has(e, "source", "TRIGGER_SOURCE_MISFIRE")).count(), listed.toString());
      assertEquals(1, ejListed.stream().filter(e -> has(e, "outcome", "EXECUTION_OUTCOME_FAILED")).count(), listed.toString());
      assertEquals(1, ejListed.stream().filter(e -> !e.has("outcome")).count(), "the killed run has no outcome: " + listed);
      assertTrue(ejListed.stream().allMatch(e -> e.getAsJsonArray("items").size() == (e.get("taskId").getAsString()
          .split("@-@")[1].split(",").length)), "each of ElasticJob's executions has all its items: " + listed);
    }
  }

  private static boolean has(JsonObject e, String field, String value) {
    return e.has(field) && value.equals(e.get(field).getAsString());
  }

  /** The next whole second at least 3 s ahead whose second fire (2 s later) falls in the same minute. */
  private static ZonedDateTime twoFiresAhead() {
    ZonedDateTime t = ZonedDateTime.now(ZoneId.systemDefault()).plusSeconds(4).truncatedTo(ChronoUnit.SECONDS);
    while (t.getSecond() > 57) {
      t = t.plusSeconds(1);
    }
    return t;
  }

  private interface Roles {
    Map<String, String> of(Side side);
  }

  /**
   * Puts each side's rows together into executions, writes each execution as its rows' compared values,
   * and requires the same executions on both sides.
   */
  private void compare(String scenario, Map<Side, Rows> rows, Roles roles) {
    Map<Side, List<String>> executions = new LinkedHashMap<>();
    rows.forEach((s, r) -> executions.put(s, executions(r, roles.of(s))));
    List<List<String>> all = new ArrayList<>(executions.values());
    // What was compared, for reading after the run: {test dir of the ElasticJob side}/tracing-rows.txt.
    StringBuilder record = new StringBuilder("=== " + scenario + " ===\n");
    executions.forEach((s, e) -> record.append("--- ").append(s).append(" ---\n").append(String.join("", e)));
    rows.forEach((s, r) -> record.append("--- ").append(s).append(" rows ---\n").append(r).append('\n'));
    try {
      java.nio.file.Files.writeString(rows.keySet().iterator().next().cluster.dir().resolve("tracing-rows.txt"), record,
          java.nio.charset.StandardCharsets.UTF_8, java.nio.file.StandardOpenOption.CREATE,
          java.nio.file.StandardOpenOption.APPEND);
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
    if (!all.get(0).equals(all.get(1))) {
      StringBuilder sb = new StringBuilder("the " + scenario + " scenario's rows differ\n");
      executions.forEach((s, e) -> sb.append("--- ").append(s).append(" ---\n").append(String.join("", e)));
      rows.forEach((s, r) -> sb.append("--- ").append(s).append(" rows ---\n").append(r).append('\n'));
      throw new AssertionError(sb.toString());
    }
  }

  /**
   * The executions in {@code rows}, each written as the values compared, sorted. Status rows of a task
   * are put together in time order: an execution begins at {@code TASK_STAGING}, or at a
   * {@code TASK_RUNNING} of its own (a misfire catch-up has no staging), and ends at
   * {@code TASK_FINISHED} or {@code TASK_ERROR}. An item's row belongs to the execution of its task whose
   * {@code TASK_RUNNING} came last before the item started.
   */
  private static List<String> executions(Rows rows, Map<String, String> roles) {
    Map<String, List<StatusRow>> byTask = new TreeMap<>();
    rows.statuses().forEach(r -> byTask.computeIfAbsent(r.taskId(), k -> new ArrayList<>()).add(r));
    List<Execution> executions = new ArrayList<>();
    for (List<StatusRow> task : byTask.values()) {
      // Rows of one millisecond: an end before a beginning (a catch-up right after a run), staging before running.
      task.sort(Comparator.comparing(StatusRow::creation).thenComparing(r -> rank(r.state())));
      Execution current = null;
      for (StatusRow r : task) {
        boolean begins = switch (r.state()) {
          case "TASK_STAGING" -> true;
          case "TASK_RUNNING" -> current == null || current.ended || current.running != null;
          default -> current == null || current.ended;
        };
        if (begins) {
          current = new Execution();
          executions.add(current);
        }
        current.statuses.add(r);
        if ("TASK_RUNNING".equals(r.state())) {
          current.running = r.creation();
        }
        if ("TASK_FINISHED".equals(r.state()) || "TASK_ERROR".equals(r.state())) {
          current.ended = true;
        }
      }
    }
    List<ExecRow> orphans = new ArrayList<>();
    for (ExecRow e : rows.execs()) {
      executions.stream()
          .filter(x -> x.running != null && x.statuses.get(0).taskId().equals(e.taskId()) && !x.running.isAfter(e.start()))
          .max(Comparator.comparing(x -> x.running))
          .ifPresentOrElse(x -> x.items.add(e), () -> orphans.add(e));
    }
    List<String> out = new ArrayList<>();
    for (Execution x : executions) {
      StringBuilder sb = new StringBuilder("execution\n");
      for (StatusRow r : x.statuses) {
        sb.append("  status ").append(r.state()).append(" | message=").append(withoutStackFrames(r.message()))
            .append(" | job_name=").append(r.jobName()).append(" | original_task_id=").append(r.originalTaskId())
            .append(" | task_id=").append(task(r.taskId(), roles)).append(" | source=").append(r.source())
            .append(" | execution_type=").append(r.executionType()).append(" | sharding_item=").append(r.shardingItem())
            .append(" | creation_time ").append(r.creation() != null ? "set" : "null").append('\n');
      }
      x.items.sort(Comparator.comparingInt(ExecRow::item));
      for (ExecRow e : x.items) {
        sb.append(item(e, roles));
      }
      out.add(sb.toString());
    }
    for (ExecRow e : orphans) {
      out.add("an item row outside any execution\n" + item(e, roles));
    }
    out.sort(Comparator.naturalOrder());
    return out;
  }

  private static String item(ExecRow e, Map<String, String> roles) {
    return "  item " + e.item() + " | job_name=" + e.jobName() + " | task_id=" + task(e.taskId(), roles)
        + " | execution_source=" + e.source() + " | is_success=" + e.success() + " | failure_cause="
        + withoutStackFrames(e.failureCause()) + " | start_time " + (e.start() != null ? "set" : "null")
        + " | complete_time " + (e.complete() != null ? "set" : "null") + "\n";
  }

  private static final class Execution {
    final List<StatusRow> statuses = new ArrayList<>();
    final List<ExecRow> items = new ArrayList<>();
    LocalDateTime running;
    boolean ended;
  }

  private static int rank(String state) {
    return switch (state) {
      case "TASK_FINISHED", "TASK_ERROR" -> 0;
      case "TASK_STAGING" -> 1;
      default -> 2;
    };
  }

  /** A task id with its instance ({@code {ip}@-@{pid}}, a host's) named by its role. */
  private static String task(String taskId, Map<String, String> roles) {
    String instance = Side.instanceOf(taskId);
    String prefix = taskId.substring(0, taskId.length() - instance.length());
    return prefix + roles.getOrDefault(instance, "?" + instance);
  }

  /**
   * A failure text without Java's stack frames: ElasticJob stores {@code printStackTrace}'s output,
   * shardcar the worker's text (the Java client's is the exception's {@code toString()}, the trace's
   * first line). In a {@code TASK_ERROR} message ({@code {1=trace}}) each trace is cut the same way.
   */
  static String withoutStackFrames(String text) {
    if (text == null) {
      return null;
    }
    StringBuilder sb = new StringBuilder();
    for (String line : text.split("\n", -1)) {
      if (line.startsWith("\tat ") || line.startsWith("\t... ")) {
        continue;
      }
      sb.append(line).append('\n');
    }
    String s = sb.toString().replace("\n, ", ", ").replace("\n}", "}");
    while (s.endsWith("\n")) {
      s = s.substring(0, s.length() - 1);
    }
    return s;
  }
}
