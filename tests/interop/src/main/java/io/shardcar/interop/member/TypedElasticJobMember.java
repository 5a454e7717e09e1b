package io.shardcar.interop.member;

import static io.shardcar.interop.member.Records.kv;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.shardingsphere.elasticjob.api.JobConfiguration;
import org.apache.shardingsphere.elasticjob.lite.api.bootstrap.impl.ScheduleJobBootstrap;
import org.apache.shardingsphere.elasticjob.lite.internal.schedule.JobRegistry;
import org.apache.shardingsphere.elasticjob.reg.zookeeper.ZookeeperConfiguration;
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
      String type = spec.get("elasticJobType");
      try {
        JobConfiguration config = ElasticJobMember.toConfig(spec);
        for (String key : spec.keys()) {
          if (key.startsWith("prop.")) {
            config.getProps().setProperty(key.substring("prop.".length()), spec.get(key));
          }
        }
        new ScheduleJobBootstrap(regCenter, type, config).schedule();
        started.add(job);
        records.emit("ready", kv("job", job, "instance", JobRegistry.getInstance().getJobInstance(job).getJobInstanceId(),
            "pid", ProcessHandle.current().pid(), "type", type));
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
}
