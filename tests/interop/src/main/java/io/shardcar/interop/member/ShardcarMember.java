package io.shardcar.interop.member;

import static io.shardcar.interop.member.Records.kv;

import io.shardcar.client.Assignment;
import io.shardcar.client.JobConfig;
import io.shardcar.client.JobHandler;
import io.shardcar.client.JobRegistration;
import io.shardcar.client.ResidentHandler;
import io.shardcar.client.ShardcarException;
import io.shardcar.client.ShardcarWorker;
import io.shardcar.client.ShardingContext;
import io.shardcar.client.WorkerListener;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;

/**
 * A shardcar worker: one JVM (so a test can SIGKILL it) using the repository's Java client
 * ({@code clients/java}) against one sidecar, one registration per {@code --job} spec. Records
 * its registration (instance id and the configuration the sidecar answered with), every
 * assignment, every item run with the trigger's source, and the sidecar's {@code Shutdown}.
 * The runs of the items its {@link FailSwitch} names throw once their body is over: the Java client
 * then reports the item failed ({@code ReportFailure}) with the exception's text. A spec with
 * {@code resident=true} registers a {@link ResidentHandler} instead ({@code registerResident}):
 * each hold is one run, from its {@code RESIDENT} trigger ({@code start}, with its fencing token and
 * attempt) until its context says cancelled ({@code end}, outcome {@code cancelled}). SIGTERM closes
 * the worker ({@code closing}). Exits when the worker has no registration left (a remote shutdown
 * ends it).
 *
 * <p>Arguments: {@code --target unix:///path --dir DIR --name MEMBER [--item-ms N] [--parent PID]
 * --job SPEC...}.
 */
public final class ShardcarMember {
  private ShardcarMember() {}

  public static void main(String[] argv) throws Exception {
    Args args = new Args(argv);
    args.watchParent();
    Path dir = Path.of(args.get("dir"));
    String member = args.get("name");
    Records records = new Records(dir, member);
    ItemBody body = new ItemBody(dir, member, Long.parseLong(args.get("item-ms", "200")));
    FailSwitch fail = new FailSwitch(dir, member);

    WorkerListener listener = new WorkerListener() {
      @Override
      public void onRegistered(String jobName, String instanceId, JobConfig c) {
        records.emit("registered", kv("job", jobName, "instance", instanceId, "total", c.getShardingTotalCount(),
            "cron", c.getCron(), "params", params(c.getShardingItemParameters()), "jobParameter", c.getJobParameter(),
            "failover", c.isFailover(), "strategy", c.getShardingStrategy(), "resident", c.isResident()));
      }

      @Override
      public void onAssignment(String jobName, Assignment a) {
        records.emit("assignment", kv("job", jobName, "items", join(a.itemNumbers()), "leader", a.leader(), "epoch", a.epoch()));
      }

      @Override
      public void onShutdown(String jobName, String reason) {
        records.emit("shutdown", kv("job", jobName, "reason", reason));
      }

      @Override
      public void onCancelled(String jobName, String executionId, int item, String reason) {
        records.emit("cancelled", kv("job", jobName, "execution", executionId, "item", item, "reason", reason));
      }

      @Override
      public void onDeclined(String jobName, String executionId, List<Integer> items, String reason,
          ShardcarException refused) {
        records.emit("declined", kv("job", jobName, "execution", executionId, "items", join(items), "reason", reason,
            "refused", refused == null ? "" : refused.getMessage()));
      }

      @Override
      public void onAnswered(String jobName, String executionId, int item, String failure, ShardcarException refused) {
        if (refused != null) {
          records.emit("refused", kv("job", jobName, "execution", executionId, "item", item, "error", refused.getMessage()));
        }
      }
    };

    ShardcarWorker worker = ShardcarWorker.builder()
        .target(args.get("target"))
        .instanceSuffix(ShardcarWorker.InstanceSuffix.NEVER)
        .listener(listener)
        .build();
    for (Path file : args.jobs()) {
      JobSpec spec = JobSpec.load(file);
      JobRegistration r;
      if (spec.flag("resident")) {
        ResidentHandler hold = ctx -> holdItem(ctx, records);
        r = spec.flag("withConfig")
            ? worker.registerResident(toConfig(spec), hold)
            : worker.registerResident(spec.jobName(), hold);
      } else {
        JobHandler handler = ctx -> runItem(ctx, records, body, fail);
        r = spec.flag("withConfig")
            ? worker.register(toConfig(spec), handler)
            : worker.register(spec.jobName(), handler);
      }
      records.emit("ready", kv("job", spec.jobName(), "instance", r.getInstanceId(), "pid", ProcessHandle.current().pid()));
    }
    // SIGTERM closes the worker, as an application that closes it on shutdown: no new work, holds given back
    // at once (each hold's end recorded before it is declined), running items finish and answer.
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      records.emit("closing", kv());
      worker.close();
    }, "close-worker"));
    worker.awaitTermination();
    records.emit("exit", kv("code", 0));
    System.exit(0);
  }

  /**
   * Runs one item's body, recording its start and end (outcome {@code completed}, {@code cancelled},
   * or {@code failed} when {@code fail} names the item: then it throws, after the end record).
   */
  static void runItem(ShardingContext ctx, Records records, ItemBody body, FailSwitch fail) {
    boolean slow = body.slow();
    String run = UUID.randomUUID().toString();
    records.emit("start", kv("side", "shardcar", "job", ctx.getJobName(), "item", ctx.getShardingItem(), "run", run,
        "source", ctx.getSource(), "total", ctx.getShardingTotalCount(), "param", ctx.getShardingParameter(),
        "jobParameter", ctx.getJobParameter(), "taskId", ctx.getTaskId(), "execution", ctx.getExecutionId(),
        "token", ctx.getFencingToken(), "slow", slow));
    boolean done = body.run(slow, ctx::isCancelled);
    boolean failed = done && fail.fails(ctx.getShardingItem());
    records.emit("end", kv("side", "shardcar", "job", ctx.getJobName(), "item", ctx.getShardingItem(), "run", run,
        "outcome", failed ? "failed" : done ? "completed" : "cancelled"));
    if (failed) {
      throw FailSwitch.failure(ctx.getShardingItem());
    }
  }

  /**
   * Holds one item of a resident job until its context says cancelled, recording the hold's
   * {@code start} (source, fencing token, attempt) and {@code end} (outcome {@code cancelled}, or
   * {@code interrupted} when the thread was interrupted for another reason), the latter just before
   * the handler returns: the worker declines the item only after that.
   */
  static void holdItem(ShardingContext ctx, Records records) throws InterruptedException {
    String run = UUID.randomUUID().toString();
    records.emit("start", kv("side", "shardcar", "job", ctx.getJobName(), "item", ctx.getShardingItem(), "run", run,
        "source", ctx.getSource(), "total", ctx.getShardingTotalCount(), "param", ctx.getShardingParameter(),
        "jobParameter", ctx.getJobParameter(), "taskId", ctx.getTaskId(), "execution", ctx.getExecutionId(),
        "token", ctx.getFencingToken(), "attempt", ctx.getAttempt(), "resident", true));
    String outcome = "interrupted";
    try {
      while (!ctx.awaitCancelled(Duration.ofMillis(200))) {
        // holding: a consumer would poll its partition here
      }
      outcome = "cancelled";
    } finally {
      records.emit("end", kv("side", "shardcar", "job", ctx.getJobName(), "item", ctx.getShardingItem(), "run", run,
          "outcome", outcome));
    }
  }

  static JobConfig toConfig(JobSpec s) {
    JobConfig.Builder b = JobConfig.newBuilder(s.jobName(), s.total());
    if (s.has("cron")) {
      b.cron(s.get("cron"));
    }
    if (s.has("shardingItemParameters")) {
      b.shardingItemParameters(s.get("shardingItemParameters"));
    }
    if (s.has("jobParameter")) {
      b.jobParameter(s.get("jobParameter"));
    }
    if (s.has("failover")) {
      b.failover(s.flag("failover"));
    }
    if (s.has("misfire")) {
      b.misfire(s.flag("misfire"));
    }
    if (s.has("monitorExecution")) {
      b.monitorExecution(s.flag("monitorExecution"));
    }
    if (s.has("jobShardingStrategyType")) {
      b.shardingStrategy(s.get("jobShardingStrategyType"));
    }
    if (s.has("overwrite")) {
      b.overwrite(s.flag("overwrite"));
    }
    if (s.has("description")) {
      b.description(s.get("description"));
    }
    if (s.has("disabled")) {
      b.disabled(s.flag("disabled"));
    }
    if (s.has("resident")) {
      b.resident(s.flag("resident"));
    }
    return b.build();
  }

  static String params(Map<Integer, String> m) {
    StringBuilder sb = new StringBuilder();
    for (Map.Entry<Integer, String> e : new TreeMap<>(m).entrySet()) {
      if (sb.length() > 0) {
        sb.append(',');
      }
      sb.append(e.getKey()).append('=').append(e.getValue());
    }
    return sb.toString();
  }

  static String join(java.util.Collection<Integer> items) {
    StringBuilder sb = new StringBuilder();
    for (Integer i : items) {
      if (sb.length() > 0) {
        sb.append(',');
      }
      sb.append(i);
    }
    return sb.toString();
  }

}
