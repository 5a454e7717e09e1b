package io.shardcar.interop.member;

import java.nio.file.Path;
import org.apache.shardingsphere.elasticjob.lite.api.bootstrap.impl.ScheduleJobBootstrap;
import org.apache.shardingsphere.elasticjob.reg.zookeeper.ZookeeperRegistryCenter;

/**
 * A real ElasticJob-Lite member running <em>typed</em> jobs: {@code new ScheduleJobBootstrap(regCenter,
 * "SCRIPT" | "HTTP", config)}, executed by ElasticJob's own {@code elasticjob-script-executor} and
 * {@code elasticjob-http-executor} (3.0.4). No job class: what a run does is the job's props
 * ({@code script.command.line}; {@code http.uri}, ...), so this member records nothing about runs
 * itself (the script, or the test's HTTP server, does); it records {@code ready} (its instance id
 * and pid), {@code startFailed}, {@code shutdown} and {@code exit}, like {@link ElasticJobMember}.
 *
 * <p>Job spec keys: those of {@link ElasticJobMember}, plus {@code elasticJobType} (required) and
 * {@code prop.KEY=VALUE} for each of the job's props. Arguments as {@link ElasticJobMember}'s.
 */
public final class TypedElasticJobMember {
  private TypedElasticJobMember() {}

  public static void main(String[] argv) throws Exception {
    Args args = new Args(argv);
    args.watchParent();
    Path dir = Path.of(args.get("dir"));
    String member = args.get("name");
    Records records = new Records(dir, member);

    ZookeeperRegistryCenter regCenter = ElasticJobMember.registryCenter(args);
    ElasticJobMember.runJobs(args, regCenter, records, spec -> {
      String type = spec.get("elasticJobType");
      new ScheduleJobBootstrap(regCenter, type, ElasticJobMember.toConfig(spec)).schedule();
      return new Object[] {"type", type};
    });
  }
}
