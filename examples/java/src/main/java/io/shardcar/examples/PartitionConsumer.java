package io.shardcar.examples;

import io.shardcar.client.JobConfig;
import io.shardcar.client.JobRegistration;
import io.shardcar.client.ShardcarWorker;
import io.shardcar.client.ShardingContext;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.time.Duration;

/**
 * A per-partition consumer: the resident job {@code partitions-java}, whose six items are the
 * partitions of a log. Each partition is held by one worker at a time, for as long as it is that
 * worker's: the handler reads the partition's checkpoint, then polls the partition and processes
 * what it got until the sidecar takes the partition back (another worker joined, this one is
 * closing, its lease ran out). After each batch it writes the checkpoint with the hold's fencing
 * token, and the store refuses a token lower than the last one it kept, so a holder that lost the
 * partition can never overwrite its successor's progress.
 *
 * <pre>
 * shardcar run &amp;                                  # standalone sidecar on 127.0.0.1:50061
 * mvn -q compile exec:java -Dexec.mainClass=io.shardcar.examples.PartitionConsumer   # twice
 * </pre>
 *
 * <p>Start a second copy and three partitions move to it, each only after the first copy let it
 * go; stop one with Ctrl-C and the other picks its partitions up where their checkpoints say. The
 * log is made up (message {@code n} of partition {@code p} is {@code p{p}-{n}}).
 *
 * <p>Environment: {@code SHARDCAR_TARGET} (default {@code 127.0.0.1:50061}),
 * {@code PARTITIONS_CHECKPOINTS} (the checkpoints' directory, shared by every worker on the host;
 * default {@code $TMPDIR/shardcar-partitions-java}), {@code PARTITIONS_RUN_SECONDS} (stop after that
 * long; default: run until Ctrl-C).
 */
public final class PartitionConsumer {
  private static final int PARTITIONS = 6;
  private static final Duration POLL = Duration.ofMillis(500);
  private static final int BATCH = 5;

  private PartitionConsumer() {}

  public static void main(String[] args) throws InterruptedException {
    Checkpoints store = new Checkpoints(Path.of(System.getenv().getOrDefault("PARTITIONS_CHECKPOINTS",
        Path.of(System.getProperty("java.io.tmpdir"), "shardcar-partitions-java").toString())));
    ShardcarWorker worker = ShardcarWorker.builder().build();
    Runtime.getRuntime().addShutdownHook(new Thread(worker::close, "shardcar-shutdown"));

    JobConfig.Builder config = JobConfig.newBuilder("partitions-java", PARTITIONS)
        .description("one consumer per partition, handed over without overlap");
    for (int p = 0; p < PARTITIONS; p++) {
      config.shardingItemParameter(p, "topic-" + p);
    }
    JobRegistration registration = worker.registerResident(config.build(), ctx -> consume(ctx, store));
    System.out.printf("registered %s as %s on %s; owns partitions %s%n", registration.getJobName(),
        registration.getInstanceId(), worker.getTarget(), registration.getAssignment().itemNumbers());

    String runFor = System.getenv("PARTITIONS_RUN_SECONDS");
    if (runFor != null && !runFor.isBlank()) {
      worker.awaitTermination(Duration.ofSeconds(Long.parseLong(runFor.trim())));
      worker.close();
    } else {
      worker.awaitTermination();
    }
  }

  /** Holds one partition until the hold is cancelled. */
  private static void consume(ShardingContext ctx, Checkpoints store) throws InterruptedException {
    int partition = ctx.getShardingItem();
    long offset = store.read(partition);
    System.out.printf("holding partition %d (%s) token %d from offset %d%s%n", partition,
        ctx.getShardingParameter(), ctx.getFencingToken(), offset,
        ctx.getAttempt() > 0 ? " restart " + ctx.getAttempt() : "");
    // awaitCancelled sleeps between polls and returns true as soon as the hold is cancelled.
    while (!ctx.awaitCancelled(POLL)) {
      for (long n = offset; n < offset + BATCH; n++) {
        process("p" + partition + "-" + n);
      }
      offset += BATCH;
      if (!store.write(partition, offset, ctx.getFencingToken())) {
        System.out.printf("partition %d: checkpoint refused, a newer holder has it%n", partition);
        return;
      }
    }
    System.out.printf("released partition %d at offset %d%n", partition, offset);
  }

  private static void process(String message) {
    // The work on one message.
  }

  /**
   * Each partition's next offset, fenced: a write carries the writer's fencing token and is
   * refused when the store already holds a larger one (a newer holder's). A file per partition,
   * read and written under a file lock, so the workers of one host can share it.
   */
  static final class Checkpoints {
    private final Path directory;

    Checkpoints(Path directory) {
      this.directory = directory;
      try {
        Files.createDirectories(directory);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    long read(int partition) {
      try (FileChannel lock = lock(partition); FileLock held = lock.lock()) {
        return stored(partition)[0];
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    /** Keeps {@code offset} unless a larger token wrote the checkpoint; false if refused. */
    boolean write(int partition, long offset, long token) {
      try (FileChannel lock = lock(partition); FileLock held = lock.lock()) {
        if (stored(partition)[1] > token) {
          return false;
        }
        Path tmp = directory.resolve(partition + ".tmp");
        Files.writeString(tmp, offset + " " + token, StandardCharsets.UTF_8);
        Files.move(tmp, directory.resolve(partition + ".checkpoint"), StandardCopyOption.REPLACE_EXISTING,
            StandardCopyOption.ATOMIC_MOVE);
        return true;
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    private FileChannel lock(int partition) throws IOException {
      return FileChannel.open(directory.resolve(partition + ".lock"), StandardOpenOption.CREATE,
          StandardOpenOption.WRITE);
    }

    /** {offset, token}; {0, -1} before the first checkpoint. */
    private long[] stored(int partition) throws IOException {
      Path path = directory.resolve(partition + ".checkpoint");
      if (!Files.exists(path)) {
        return new long[] {0, -1};
      }
      String[] parts = Files.readString(path, StandardCharsets.UTF_8).trim().split(" ");
      return new long[] {Long.parseLong(parts[0]), Long.parseLong(parts[1])};
    }
  }
}
