package io.shardcar.examples;

import io.shardcar.client.JobConfig;
import io.shardcar.client.JobRegistration;
import io.shardcar.client.ShardcarWorker;
import io.shardcar.client.ShardingContext;
import java.time.Duration;

/**
 * A worker for the job {@code orders-java}: 3 items (one per region), fired every 5 seconds.
 * Each item "processes" its region's orders; region {@code eu} fails now and then to show failure
 * reports. Start several copies to watch the sidecar spread the items over them.
 *
 * <p>Environment: {@code SHARDCAR_TARGET} (default {@code 127.0.0.1:50061}),
 * {@code ORDERS_CRON} (default every 5 s), {@code ORDERS_RUN_SECONDS} (stop after that long; default:
 * run until Ctrl-C).
 */
public final class OrdersWorker {
  private OrdersWorker() {}

  public static void main(String[] args) throws InterruptedException {
    String cron = System.getenv().getOrDefault("ORDERS_CRON", "0/5 * * * * ?");
    ShardcarWorker worker = ShardcarWorker.builder().build();
    Runtime.getRuntime().addShutdownHook(new Thread(worker::close, "shardcar-shutdown"));

    JobConfig config = JobConfig.newBuilder("orders-java", 3)
        .cron(cron)
        .shardingItemParameters("0=us,1=eu,2=apac")
        .jobParameter("batch=100")
        .failover(true)
        .description("example worker from examples/java")
        .build();
    JobRegistration registration = worker.register(config, OrdersWorker::process);
    System.out.printf("registered %s as %s on %s; items %s%n", registration.getJobName(),
        registration.getInstanceId(), worker.getTarget(), registration.getAssignment().itemNumbers());

    String runFor = System.getenv("ORDERS_RUN_SECONDS");
    if (runFor != null && !runFor.isBlank()) {
      worker.awaitTermination(Duration.ofSeconds(Long.parseLong(runFor.trim())));
      worker.close();
    } else {
      worker.awaitTermination();
    }
  }

  private static void process(ShardingContext ctx) throws InterruptedException {
    System.out.printf("[%s] item %d (%s) execution %s source %s fencing token %d%n", ctx.getJobName(),
        ctx.getShardingItem(), ctx.getShardingParameter(), ctx.getExecutionId(), ctx.getSource(),
        ctx.getFencingToken());
    Thread.sleep(200); // the work; an interrupt means the item was revoked
    if (ctx.getShardingParameter().equals("eu") && System.nanoTime() % 3 == 0) {
      throw new IllegalStateException("eu order store unavailable");
    }
  }
}
