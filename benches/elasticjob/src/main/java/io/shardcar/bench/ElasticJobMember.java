package io.shardcar.bench;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.apache.shardingsphere.elasticjob.api.ShardingContext;
import org.apache.shardingsphere.elasticjob.infra.listener.ElasticJobListener;
import org.apache.shardingsphere.elasticjob.infra.listener.ShardingContexts;
import org.apache.shardingsphere.elasticjob.lite.api.bootstrap.impl.ScheduleJobBootstrap;
import org.apache.shardingsphere.elasticjob.lite.internal.schedule.JobRegistry;
import org.apache.shardingsphere.elasticjob.reg.zookeeper.ZookeeperConfiguration;
import org.apache.shardingsphere.elasticjob.reg.zookeeper.ZookeeperRegistryCenter;
import org.apache.shardingsphere.elasticjob.simple.job.SimpleJob;

/**
 * One ElasticJob-Lite 3.0.4 member for benches/side_by_side.rs: one JVM, one registry center, one
 * {@link ScheduleJobBootstrap} of a {@link SimpleJob} whose items each "run" for {@code --hold-ms}.
 * All coordination (leader election, sharding, failover, misfire) is ElasticJob's own code.
 *
 * <p>Arguments: {@code --zk HOST:PORT --namespace NS --job NAME --cron CRON --items N
 * --hold-ms N --session-ms N [--parent PID]}. Failover and monitorExecution are on, overwrite is on.
 *
 * <p>Standard output, one line per fact ({@code <ms>} = epoch milliseconds on the host's clock):
 * <ul>
 *   <li>{@code READY <ms> instance=<ip@-@pid> pid=<pid>} once the job is scheduled;
 *   <li>{@code EVENT <ms> START item=<i> source=<NORMAL|FAILOVER|MISFIRE>} and
 *       {@code EVENT <ms> END item=<i> source=... outcome=<completed|interrupted>} per item run;
 *   <li>{@code EVENT <ms> SHUTDOWN-HOOK} when SIGTERM runs the shutdown hook, and
 *       {@code EVENT <ms> SHUTDOWN-DONE} once {@code ScheduleJobBootstrap.shutdown()} returned.
 * </ul>
 *
 * <p>Source: a run is FAILOVER when ElasticJob wrote this instance into
 * {@code sharding/{i}/failovering} before it (its mark of an executing failover); MISFIRE when it
 * is an item's second run within one {@code ElasticJobExecutor.execute()} (the executor re-runs
 * misfired items in a loop after the normal run; {@link SourceListener} sees each execute begin);
 * NORMAL otherwise.
 */
public final class ElasticJobMember {
  private ElasticJobMember() {}

  static void emit(String line) {
    synchronized (System.out) {
      System.out.println(line);
      System.out.flush();
    }
  }

  static void event(String what) {
    emit("EVENT " + System.currentTimeMillis() + " " + what);
  }

  public static void main(String[] argv) throws Exception {
    Map<String, String> args = parse(argv);
    watchParent(Long.parseLong(args.getOrDefault("parent", "0")));
    String job = need(args, "job");

    ZookeeperConfiguration zkConfig = new ZookeeperConfiguration(need(args, "zk"), need(args, "namespace"));
    zkConfig.setSessionTimeoutMilliseconds(Integer.parseInt(need(args, "session-ms")));
    zkConfig.setConnectionTimeoutMilliseconds(15_000);
    ZookeeperRegistryCenter regCenter = new ZookeeperRegistryCenter(zkConfig);
    regCenter.init();

    JobConfiguration config = JobConfiguration.newBuilder(job, Integer.parseInt(need(args, "items")))
        .cron(need(args, "cron"))
        .failover(true)
        .monitorExecution(true)
        .overwrite(true)
        .jobListenerTypes(SourceListener.TYPE)
        .description("shardcar side-by-side benchmark")
        .build();
    HoldingJob holdingJob = new HoldingJob(regCenter, Long.parseLong(need(args, "hold-ms")));
    ScheduleJobBootstrap bootstrap = new ScheduleJobBootstrap(regCenter, holdingJob, config);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      event("SHUTDOWN-HOOK");
      bootstrap.shutdown();
      event("SHUTDOWN-DONE");
    }, "bench-shutdown"));
    bootstrap.schedule();

    String instance = JobRegistry.getInstance().getJobInstance(job).getJobInstanceId();
    emit("READY " + System.currentTimeMillis() + " instance=" + instance + " pid=" + ProcessHandle.current().pid());
    // Quartz and Curator threads do the work; SIGTERM runs the hooks and ends the JVM.
    new CountDownLatch(1).await();
  }

  private static Map<String, String> parse(String[] argv) {
    Map<String, String> args = new HashMap<>();
    for (int i = 0; i + 1 < argv.length; i += 2) {
      if (!argv[i].startsWith("--")) {
        throw new IllegalArgumentException("expected --key value, got " + argv[i]);
      }
      args.put(argv[i].substring(2), argv[i + 1]);
    }
    return args;
  }

  private static String need(Map<String, String> args, String key) {
    String value = args.get(key);
    if (value == null) {
      throw new IllegalArgumentException("missing --" + key);
    }
    return value;
  }

  /** Halts this JVM once the bench program that started it is gone (no member left behind). */
  private static void watchParent(long parent) {
    if (parent <= 0) {
      return;
    }
    Thread watch = new Thread(() -> {
      while (ProcessHandle.of(parent).map(ProcessHandle::isAlive).orElse(false)) {
        try {
          Thread.sleep(500);
        } catch (InterruptedException e) {
          return;
        }
      }
      Runtime.getRuntime().halt(99);
    }, "parent-watch");
    watch.setDaemon(true);
    watch.start();
  }

  /** The job: each item is held for the given time, its start and end printed. */
  public static final class HoldingJob implements SimpleJob {
    private final ZookeeperRegistryCenter regCenter;
    private final long holdMillis;

    HoldingJob(ZookeeperRegistryCenter regCenter, long holdMillis) {
      this.regCenter = regCenter;
      this.holdMillis = holdMillis;
    }

    @Override
    public void execute(ShardingContext ctx) {
      int item = ctx.getShardingItem();
      String instance = JobRegistry.getInstance().getJobInstance(ctx.getJobName()).getJobInstanceId();
      String failovering = regCenter.getDirectly("/" + ctx.getJobName() + "/sharding/" + item + "/failovering");
      String source;
      if (instance.equals(failovering)) {
        source = "FAILOVER";
      } else if (!SourceListener.firstRunInExecution(item)) {
        source = "MISFIRE";
      } else {
        source = "NORMAL";
      }
      event("START item=" + item + " source=" + source);
      String outcome = "completed";
      try {
        Thread.sleep(holdMillis);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        outcome = "interrupted";
      }
      event("END item=" + item + " source=" + source + " outcome=" + outcome);
    }
  }

  /**
   * Sees each {@code ElasticJobExecutor.execute()} begin (ElasticJob calls its listeners once per
   * execute, before the normal run and its misfire re-runs). Loaded by ElasticJob's SPI (type
   * {@value #TYPE}, META-INF/services). Quartz runs one execute at a time (one thread).
   */
  public static final class SourceListener implements ElasticJobListener {
    static final String TYPE = "SHARDCAR_BENCH_SOURCE";
    private static final Set<Integer> RAN = ConcurrentHashMap.newKeySet();

    static boolean firstRunInExecution(int item) {
      return RAN.add(item);
    }

    @Override
    public void beforeJobExecuted(ShardingContexts shardingContexts) {
      RAN.clear();
    }

    @Override
    public void afterJobExecuted(ShardingContexts shardingContexts) {}

    @Override
    public String getType() {
      return TYPE;
    }
  }
}
