package io.shardcar.interop.member;

import static io.shardcar.interop.member.Records.kv;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.apache.shardingsphere.elasticjob.api.ShardingContext;
import org.apache.shardingsphere.elasticjob.infra.handler.sharding.JobInstance;
import org.apache.shardingsphere.elasticjob.lite.api.bootstrap.impl.ScheduleJobBootstrap;
import org.apache.shardingsphere.elasticjob.lite.internal.schedule.JobRegistry;
import org.apache.shardingsphere.elasticjob.reg.zookeeper.ZookeeperConfiguration;
import org.apache.shardingsphere.elasticjob.reg.zookeeper.ZookeeperRegistryCenter;
import org.apache.shardingsphere.elasticjob.simple.job.SimpleJob;

/**
 * A real ElasticJob-Lite member: one JVM (so a test can SIGKILL it), one registry center on the
 * test's ZooKeeper, one {@link ScheduleJobBootstrap} per {@code --job} spec, all in one namespace
 * (ElasticJob's {@code JobRegistry} is keyed by job name, so one JVM cannot hold a job twice).
 * Everything about coordination is ElasticJob's own code; this class only records what its job
 * runs: each item's start and end, its {@link ShardingContext}, and what ElasticJob had written
 * about the item in ZooKeeper at its start ({@code sharding/{i}/instance},
 * {@code sharding/{i}/failovering}, the latter being ElasticJob's mark of a failover run, and
 * {@code leader/election/instance}, who led then). The runs of the items its {@link FailSwitch} names
 * throw once their body is over, so that ElasticJob sees a failed item (its error handler, its
 * tracing).
 *
 * <p>Arguments: {@code --zk HOST:PORT --namespace NS --dir DIR --name MEMBER --session-ms N
 * [--item-ms N] [--parent PID] --job SPEC...}.
 */
public final class ElasticJobMember {
  private ElasticJobMember() {}

  public static void main(String[] argv) throws Exception {
    Args args = new Args(argv);
    args.watchParent();
    Path dir = Path.of(args.get("dir"));
    String member = args.get("name");
    Records records = new Records(dir, member);
    ItemBody body = new ItemBody(dir, member, Long.parseLong(args.get("item-ms", "200")));
    FailSwitch fail = new FailSwitch(dir, member);

    ZookeeperRegistryCenter regCenter = registryCenter(args);
    runJobs(args, regCenter, records, spec -> {
      new ScheduleJobBootstrap(regCenter, new RecordingJob(regCenter, records, body, fail), toConfig(spec)).schedule();
      return new Object[0];
    });
  }

  /** Starts one job of the member; returns more fields for its {@code ready} record. */
  interface Starter {
    Object[] start(JobSpec spec);
  }

  /** The member's registry center on the test's ZooKeeper ({@code --zk}, {@code --namespace}). */
  static ZookeeperRegistryCenter registryCenter(Args args) {
    ZookeeperConfiguration zkConfig = new ZookeeperConfiguration(args.get("zk"), args.get("namespace"));
    zkConfig.setSessionTimeoutMilliseconds(Integer.parseInt(args.get("session-ms", "4000")));
    zkConfig.setConnectionTimeoutMilliseconds(15_000);
    ZookeeperRegistryCenter regCenter = new ZookeeperRegistryCenter(zkConfig);
    regCenter.init();
    return regCenter;
  }

  /**
   * Starts each {@code --job} spec with {@code starter} (recording {@code ready}, or
   * {@code startFailed} with the error and the instance ElasticJob registered all the same, if it
   * did; exit 3 when none started), then waits: a remote shutdown (its instance
   * node deleted) shuts a job down inside ElasticJob, which is recorded, and once every job is
   * down the process leaves, as one whose jobs are all gone has nothing to do.
   */
  static void runJobs(Args args, ZookeeperRegistryCenter regCenter, Records records, Starter starter)
      throws InterruptedException {
    List<String> started = new ArrayList<>();
    boolean failed = false;
    for (Path file : args.jobs()) {
      JobSpec spec = JobSpec.load(file);
      String job = spec.jobName();
      try {
        Object[] more = starter.start(spec);
        started.add(job);
        List<Object> ready = new ArrayList<>(List.of("job", job, "instance",
            JobRegistry.getInstance().getJobInstance(job).getJobInstanceId(), "pid", ProcessHandle.current().pid()));
        ready.addAll(List.of(more));
        records.emit("ready", kv(ready.toArray()));
      } catch (RuntimeException e) {
        failed = true;
        // ElasticJob may have registered an instance before it refused to start the job (its
        // JobScheduler registers it before ScheduleJobBootstrap.schedule() checks the cron): its id.
        JobInstance registered = JobRegistry.getInstance().getJobInstance(job);
        records.emit("startFailed", kv("job", job, "error", e.toString(),
            "instance", registered == null ? "" : registered.getJobInstanceId()));
      }
    }
    if (failed && started.isEmpty()) {
      records.emit("exit", kv("code", 3));
      System.exit(3);
    }
    Map<String, Boolean> reported = new HashMap<>();
    while (true) {
      int down = 0;
      for (String job : started) {
        if (JobRegistry.getInstance().isShutdown(job)) {
          down++;
          if (reported.putIfAbsent(job, true) == null) {
            records.emit("shutdown", kv("job", job));
          }
        }
      }
      if (down == started.size()) {
        records.emit("exit", kv("code", 0));
        regCenter.close();
        System.exit(0);
      }
      Thread.sleep(100);
    }
  }

  static JobConfiguration toConfig(JobSpec s) {
    JobConfiguration.Builder b = JobConfiguration.newBuilder(s.jobName(), s.total());
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
      b.jobShardingStrategyType(s.get("jobShardingStrategyType"));
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
    if (s.has("jobErrorHandlerType")) {
      b.jobErrorHandlerType(s.get("jobErrorHandlerType"));
    }
    for (String key : s.keys()) {
      if (key.startsWith("prop.")) {
        b.setProperty(key.substring("prop.".length()), s.get(key));
      }
    }
    return b.build();
  }

  /**
   * The job ElasticJob runs: records each item (see the class comment) and, for the items
   * {@code fail} names, throws once the body is over (end record outcome {@code failed}).
   */
  public static final class RecordingJob implements SimpleJob {
    private final ZookeeperRegistryCenter regCenter;
    private final Records records;
    private final ItemBody body;
    private final FailSwitch fail;

    RecordingJob(ZookeeperRegistryCenter regCenter, Records records, ItemBody body, FailSwitch fail) {
      this.regCenter = regCenter;
      this.records = records;
      this.body = body;
      this.fail = fail;
    }

    @Override
    public void execute(ShardingContext ctx) {
      String job = ctx.getJobName();
      int item = ctx.getShardingItem();
      String instance = JobRegistry.getInstance().getJobInstance(job).getJobInstanceId();
      String itemPath = "/" + job + "/sharding/" + item;
      String owner = regCenter.getDirectly(itemPath + "/instance");
      String failovering = regCenter.getDirectly(itemPath + "/failovering");
      String leader = regCenter.getDirectly("/" + job + "/leader/election/instance");
      boolean slow = body.slow();
      String run = java.util.UUID.randomUUID().toString();
      records.emit("start", kv("side", "elasticjob", "job", job, "instance", instance, "item", item, "run", run,
          "total", ctx.getShardingTotalCount(), "param", ctx.getShardingParameter(), "jobParameter", ctx.getJobParameter(),
          "taskId", ctx.getTaskId(), "owner", owner, "failovering", failovering, "leader", leader,
          "slow", slow));
      boolean done = body.run(slow, () -> false);
      boolean failed = done && fail.fails(item);
      records.emit("end", kv("side", "elasticjob", "job", job, "instance", instance, "item", item, "run", run,
          "outcome", failed ? "failed" : done ? "completed" : "interrupted"));
      if (failed) {
        throw FailSwitch.failure(item);
      }
    }
  }
}
