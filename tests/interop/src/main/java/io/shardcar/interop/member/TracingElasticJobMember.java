package io.shardcar.interop.member;

import static io.shardcar.interop.member.Records.kv;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.apache.shardingsphere.elasticjob.api.ShardingContext;
import org.apache.shardingsphere.elasticjob.lite.api.bootstrap.impl.ScheduleJobBootstrap;
import org.apache.shardingsphere.elasticjob.lite.internal.schedule.JobRegistry;
import org.apache.shardingsphere.elasticjob.reg.zookeeper.ZookeeperConfiguration;
import org.apache.shardingsphere.elasticjob.reg.zookeeper.ZookeeperRegistryCenter;
import org.apache.shardingsphere.elasticjob.simple.job.SimpleJob;
import org.apache.shardingsphere.elasticjob.tracing.api.TracingConfiguration;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * An {@link ElasticJobMember} with ElasticJob's RDB event tracing: each job is configured with
 * {@code new TracingConfiguration<>("RDB", dataSource)} on a PostgreSQL data source, as ElasticJob's
 * documentation shows, so ElasticJob itself creates the tables (if absent) and writes its
 * {@code JOB_EXECUTION_LOG} and {@code JOB_STATUS_TRACE_LOG} rows. Its job records its runs as
 * {@link ElasticJobMember.RecordingJob} does and, for the items the member's {@link FailSwitch} names,
 * then throws, so that ElasticJob records a failure.
 *
 * <p>Arguments: those of {@link ElasticJobMember}, plus {@code --tracing-url jdbc:postgresql://...
 * --tracing-user USER --tracing-password PASSWORD}.
 */
public final class TracingElasticJobMember {
  private TracingElasticJobMember() {}

  public static void main(String[] argv) throws Exception {
    Args args = new Args(argv);
    args.watchParent();
    Path dir = Path.of(args.get("dir"));
    String member = args.get("name");
    Records records = new Records(dir, member);
    ItemBody body = new ItemBody(dir, member, Long.parseLong(args.get("item-ms", "200")));
    FailSwitch fail = new FailSwitch(dir, member);

    PGSimpleDataSource dataSource = new PGSimpleDataSource();
    dataSource.setUrl(args.get("tracing-url"));
    dataSource.setUser(args.get("tracing-user"));
    dataSource.setPassword(args.get("tracing-password"));

    ZookeeperConfiguration zkConfig = new ZookeeperConfiguration(args.get("zk"), args.get("namespace"));
    zkConfig.setSessionTimeoutMilliseconds(Integer.parseInt(args.get("session-ms", "4000")));
    zkConfig.setConnectionTimeoutMilliseconds(15_000);
    ZookeeperRegistryCenter regCenter = new ZookeeperRegistryCenter(zkConfig);
    regCenter.init();

    List<String> started = new ArrayList<>();
    boolean failed = false;
    for (Path file : args.jobs()) {
      JobSpec spec = JobSpec.load(file);
      String job = spec.jobName();
      try {
        JobConfiguration config = ElasticJobMember.toConfig(spec);
        config.getExtraConfigurations().add(new TracingConfiguration<>("RDB", dataSource));
        SimpleJob recording = new ElasticJobMember.RecordingJob(regCenter, records, body);
        new ScheduleJobBootstrap(regCenter, new FailingJob(recording, fail), config).schedule();
        started.add(job);
        records.emit("ready", kv("job", job, "instance", JobRegistry.getInstance().getJobInstance(job).getJobInstanceId(),
            "pid", ProcessHandle.current().pid()));
      } catch (RuntimeException e) {
        failed = true;
        records.emit("startFailed", kv("job", job, "error", e.toString()));
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

  /** Runs the recording job, then throws for the items the fail switch names. */
  public static final class FailingJob implements SimpleJob {
    private final SimpleJob recording;
    private final FailSwitch fail;

    FailingJob(SimpleJob recording, FailSwitch fail) {
      this.recording = recording;
      this.fail = fail;
    }

    @Override
    public void execute(ShardingContext ctx) {
      recording.execute(ctx);
      if (fail.fails(ctx.getShardingItem())) {
        throw FailSwitch.failure(ctx.getShardingItem());
      }
    }
  }
}
