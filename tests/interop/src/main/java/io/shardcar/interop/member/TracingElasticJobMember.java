package io.shardcar.interop.member;

import java.nio.file.Path;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.apache.shardingsphere.elasticjob.api.ShardingContext;
import org.apache.shardingsphere.elasticjob.lite.api.bootstrap.impl.ScheduleJobBootstrap;
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

    ZookeeperRegistryCenter regCenter = ElasticJobMember.registryCenter(args);
    ElasticJobMember.runJobs(args, regCenter, records, spec -> {
      JobConfiguration config = ElasticJobMember.toConfig(spec);
      config.getExtraConfigurations().add(new TracingConfiguration<>("RDB", dataSource));
      SimpleJob recording = new ElasticJobMember.RecordingJob(regCenter, records, body);
      new ScheduleJobBootstrap(regCenter, new FailingJob(recording, fail), config).schedule();
      return new Object[0];
    });
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
