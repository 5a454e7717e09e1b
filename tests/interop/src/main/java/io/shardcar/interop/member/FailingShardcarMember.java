package io.shardcar.interop.member;

import static io.shardcar.interop.member.Records.kv;

import io.shardcar.client.Assignment;
import io.shardcar.client.JobConfig;
import io.shardcar.client.JobHandler;
import io.shardcar.client.JobRegistration;
import io.shardcar.client.ShardcarWorker;
import io.shardcar.client.WorkerListener;
import java.nio.file.Path;

/**
 * A {@link ShardcarMember} whose item runs, for the items its {@link FailSwitch} names, throw once
 * their body is over: the Java client then reports the item failed, with the exception's text. It
 * records what {@link ShardcarMember} records (registration, assignments, item runs, shutdown).
 *
 * <p>Arguments: those of {@link ShardcarMember}.
 */
public final class FailingShardcarMember {
  private FailingShardcarMember() {}

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
            "cron", c.getCron(), "params", ShardcarMember.params(c.getShardingItemParameters()),
            "jobParameter", c.getJobParameter(), "failover", c.isFailover(), "strategy", c.getShardingStrategy()));
      }

      @Override
      public void onAssignment(String jobName, Assignment a) {
        records.emit("assignment", kv("job", jobName, "items", ShardcarMember.join(a.itemNumbers()), "leader", a.leader(),
            "epoch", a.epoch()));
      }

      @Override
      public void onShutdown(String jobName, String reason) {
        records.emit("shutdown", kv("job", jobName, "reason", reason));
      }
    };

    ShardcarWorker worker = ShardcarWorker.builder()
        .target(args.get("target"))
        .instanceSuffix(ShardcarWorker.InstanceSuffix.NEVER)
        .listener(listener)
        .build();
    for (Path file : args.jobs()) {
      JobSpec spec = JobSpec.load(file);
      JobHandler handler = ctx -> {
        ShardcarMember.runItem(ctx, records, body);
        if (fail.fails(ctx.getShardingItem())) {
          throw FailSwitch.failure(ctx.getShardingItem());
        }
      };
      JobRegistration r = spec.flag("withConfig")
          ? worker.register(ShardcarMember.toConfig(spec), handler)
          : worker.register(spec.jobName(), handler);
      records.emit("ready", kv("job", spec.jobName(), "instance", r.getInstanceId(), "pid", ProcessHandle.current().pid()));
    }
    worker.awaitTermination();
    records.emit("exit", kv("code", 0));
    System.exit(0);
  }
}
