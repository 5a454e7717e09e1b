package io.shardcar.client.testing;

import io.shardcar.client.Assignment;
import io.shardcar.client.JobConfig;
import io.shardcar.client.JobRegistration;
import io.shardcar.client.ShardcarException;
import io.shardcar.client.ShardcarWorker;
import io.shardcar.client.ShardingContext;
import io.shardcar.client.WorkerListener;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.LockSupport;

/**
 * A worker JVM that a test starts as a child process ({@link WorkerProcess}), so that the test
 * can freeze it with SIGSTOP. It prints one line per thing that happens, for the parent to wait
 * on:
 *
 * <pre>
 * REGISTERED {instanceId}                a stream registered the worker (the first and every reconnect)
 * READY {instanceId}                     register() returned
 * STARTED {execution} {item}             a handler began
 * CHECK_FALSE {execution} {item}         (spin) the first isCancelled() check, which said false
 * CANCELLED_SEEN {execution} {item} sinceLastFalseMs={ms} interrupted={bool}
 *                                        (spin) the first check that said true, and how long after
 *                                        the last check that said false began
 * BLOCKING {execution} {item}            (sleep, await) the handler is about to block
 * INTERRUPTED {execution} {item} cancelled={bool}
 *                                        (sleep, await) the blocking call was interrupted; the
 *                                        handler then returns normally, its final write skipped
 * FINAL_WRITE {execution} {item}         (sleep, await) the block ended without an interrupt
 * ANSWERED {execution} {item} failure={text} refused={null|message}
 * DECLINED {execution} {items} refused={null|message} reason={text}
 * DROPPED {rpc} {execution} {items} why={text}
 * CANCELLED {execution} {item} reason={text}
 * LEASE_EXPIRED / SHUTDOWN reason={text} / DISCONNECTED / TERMINATED
 * </pre>
 *
 * <p>Arguments: {@code target jobName mode}. Mode {@code spin}: the first item's handler checks
 * {@code isCancelled()} every 2 ms until it says true, then returns normally (so only the
 * contract keeps it from being answered); every other handler returns at once. Modes
 * {@code sleep} and {@code await}: the first item's handler never asks {@code isCancelled()}: it
 * blocks in {@code Thread.sleep} (resp. {@code CountDownLatch.await}) for {@value #BLOCK_SECONDS}
 * s, then does its "final write" (prints {@code FINAL_WRITE}); an interrupt ends the block, the
 * handler prints {@code INTERRUPTED}, skips the write and returns normally (it swallows the
 * interrupt, so only the contract keeps it from being answered); every other handler returns at
 * once. Mode {@code quick}: every handler returns at once. Mode {@code hold}: the job has two items
 * and failover on ({@link #failoverJob}); the first item's handler blocks as in {@code sleep} (the
 * test kills the process meanwhile), every other handler returns at once. The job fires only when
 * triggered by hand.
 */
public final class WorkerMain {
  /** A cron that never fires in a test's lifetime: triggers come from {@code Admin.TriggerJob}. */
  public static final String NEVER = "0 0 0 1 1 ? 2099";
  /** How long a blocking handler blocks unless interrupted: longer than any test waits. */
  public static final long BLOCK_SECONDS = 300;

  private WorkerMain() {}

  /** The job of mode {@code hold}: two items, failover on, fired only by hand. */
  public static JobConfig failoverJob(String jobName) {
    return JobConfig.newBuilder(jobName, 2).cron(NEVER).failover(true).overwrite(true).build();
  }

  public static void main(String[] args) throws Exception {
    String target = args[0];
    String jobName = args[1];
    String mode = args[2];
    AtomicBoolean first = new AtomicBoolean(true);
    ShardcarWorker worker = ShardcarWorker.builder()
        .target(target)
        .connectTimeout(Duration.ofSeconds(20))
        .reconnectBackoff(Duration.ofMillis(100), Duration.ofSeconds(1))
        .drainTimeout(Duration.ofSeconds(2))
        .listener(new Printer())
        .build();
    JobConfig config = mode.equals("hold")
        ? failoverJob(jobName)
        : JobConfig.newBuilder(jobName, 1).cron(NEVER).overwrite(true).build();
    JobRegistration registration = worker.register(
        config,
        ctx -> {
          print("STARTED " + ctx.getExecutionId() + " " + ctx.getShardingItem());
          if (!mode.equals("quick") && first.getAndSet(false)) {
            switch (mode) {
              case "spin" -> spinUntilCancelled(ctx);
              case "sleep", "await" -> blockThenWrite(ctx, mode);
              case "hold" -> blockThenWrite(ctx, "sleep");
              default -> throw new IllegalArgumentException("unknown mode " + mode);
            }
          }
        });
    print("READY " + registration.getInstanceId());
    worker.awaitTermination();
    print("TERMINATED");
  }

  private static void spinUntilCancelled(ShardingContext ctx) {
    long lastFalse = System.nanoTime();
    boolean reported = false;
    long giveUp = lastFalse + TimeUnit.SECONDS.toNanos(120);
    while (System.nanoTime() - giveUp < 0) {
      // A check is dated by when it began: it reads the clock inside, so one that began before a
      // pause and returns after it decided before it. (Dated by when it returned, a pause landing
      // inside the check made it look like a check after the pause that said false.)
      long began = System.nanoTime();
      boolean cancelled = ctx.isCancelled();
      if (cancelled) {
        print("CANCELLED_SEEN " + ctx.getExecutionId() + " " + ctx.getShardingItem()
            + " sinceLastFalseMs=" + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - lastFalse)
            + " interrupted=" + Thread.currentThread().isInterrupted());
        return;
      }
      lastFalse = began;
      if (!reported) {
        reported = true;
        print("CHECK_FALSE " + ctx.getExecutionId() + " " + ctx.getShardingItem());
      }
      LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(2)); // returns early when interrupted
    }
  }

  /** Blocks without checking {@code isCancelled()}; only an interrupt ends the block early. */
  private static void blockThenWrite(ShardingContext ctx, String mode) {
    String item = ctx.getExecutionId() + " " + ctx.getShardingItem();
    print("BLOCKING " + item);
    try {
      if (mode.equals("sleep")) {
        Thread.sleep(TimeUnit.SECONDS.toMillis(BLOCK_SECONDS));
      } else {
        new CountDownLatch(1).await(BLOCK_SECONDS, TimeUnit.SECONDS);
      }
    } catch (InterruptedException e) {
      print("INTERRUPTED " + item + " cancelled=" + ctx.isCancelled());
      return; // swallowed: the handler returns normally
    }
    print("FINAL_WRITE " + item);
  }

  static synchronized void print(String line) {
    System.out.println(line);
    System.out.flush();
  }

  private static final class Printer implements WorkerListener {
    @Override
    public void onRegistered(String jobName, String instanceId, JobConfig effectiveConfig) {
      print("REGISTERED " + instanceId);
    }

    @Override
    public void onAssignment(String jobName, Assignment assignment) {
      print("ASSIGNMENT " + assignment.itemNumbers());
    }

    @Override
    public void onAnswered(String jobName, String executionId, int item, String failure, ShardcarException refused) {
      print("ANSWERED " + executionId + " " + item + " failure=" + failure + " refused="
          + (refused == null ? null : refused.getMessage()));
    }

    @Override
    public void onDeclined(String jobName, String executionId, List<Integer> items, String reason,
        ShardcarException refused) {
      print("DECLINED " + executionId + " " + items.toString().replace(" ", "") + " refused="
          + (refused == null ? null : refused.getMessage()) + " reason=" + reason);
    }

    @Override
    public void onAnswerDropped(String jobName, String rpc, String executionId, List<Integer> items, String why) {
      print("DROPPED " + rpc + " " + executionId + " " + items.toString().replace(" ", "") + " why=" + why);
    }

    @Override
    public void onCancelled(String jobName, String executionId, int item, String reason) {
      print("CANCELLED " + executionId + " " + item + " reason=" + reason);
    }

    @Override
    public void onLeaseExpired(String jobName) {
      print("LEASE_EXPIRED");
    }

    @Override
    public void onShutdown(String jobName, String reason) {
      print("SHUTDOWN reason=" + reason);
    }

    @Override
    public void onDisconnected(String jobName, ShardcarException cause, long retryInMillis) {
      print("DISCONNECTED " + cause.getMessage());
    }
  }
}
