package io.shardcar.interop.member;

import java.nio.file.Path;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.apache.shardingsphere.elasticjob.lite.api.bootstrap.impl.ScheduleJobBootstrap;
import org.apache.shardingsphere.elasticjob.reg.zookeeper.ZookeeperRegistryCenter;
import org.apache.shardingsphere.elasticjob.tracing.api.TracingConfiguration;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * An {@link ElasticJobMember} with ElasticJob's RDB event tracing: each job is configured with
 * {@code new TracingConfiguration<>("RDB", dataSource)} on a PostgreSQL data source, as ElasticJob's
 * documentation shows, so ElasticJob itself creates the tables (if absent) and writes its
 * {@code JOB_EXECUTION_LOG} and {@code JOB_STATUS_TRACE_LOG} rows. Its job is
 * {@link ElasticJobMember.RecordingJob}: it records its runs and, for the items the member's
 * {@link FailSwitch} names, then throws, so that ElasticJob records a failure.
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
      new ScheduleJobBootstrap(regCenter, new ElasticJobMember.RecordingJob(regCenter, records, body, fail), config).schedule();
      return new Object[0];
    });
  }
}
