package io.shardcar.client.testing;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Comparator;
import java.util.List;
import java.util.stream.Stream;

/**
 * A real single-node ZooKeeper (Debian's {@code zookeeper} package) on a free loopback port with a
 * temporary data directory, for integration tests, started by the repository's
 * {@code scripts/zk.sh run} (the one way shardcar starts ZooKeeper; it replaces itself with the
 * server). Ready when {@code srvr} reports standalone mode.
 */
public final class ZooKeeperProcess implements AutoCloseable {

  private final int port;
  private final Path dir;
  private final Process process;

  private ZooKeeperProcess(int port, Path dir, Process process) {
    this.port = port;
    this.dir = dir;
    this.process = process;
  }

  /** Whether Debian's ZooKeeper is installed here. */
  public static boolean available() {
    return Files.isRegularFile(Path.of("/usr/share/java/zookeeper.jar"));
  }

  public static ZooKeeperProcess start() {
    if (!available()) {
      throw new IllegalStateException("ZooKeeper is not installed: apt-get install zookeeper");
    }
    int port = Processes.freePort();
    try {
      Path dir = Files.createTempDirectory("shardcar-zk-");
      Path log = Processes.logDir().resolve("zookeeper-" + port + ".log");
      List<String> cmd = List.of(
          "bash", script().toString(), "run", dir.toString(), Integer.toString(port));
      ProcessBuilder builder = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile());
      builder.environment().put("ZK_FORCE_SYNC", "no");
      builder.environment().put("JAVA", Path.of(System.getProperty("java.home"), "bin", "java").toString());
      Process process = builder.start();
      ZooKeeperProcess zk = new ZooKeeperProcess(port, dir, process);
      Processes.await(process, log, Duration.ofSeconds(30), "ZooKeeper on port " + port,
          () -> Processes.fourLetter(port, "srvr").contains("Mode: standalone"));
      return zk;
    } catch (IOException e) {
      throw new IllegalStateException("cannot start ZooKeeper", e);
    }
  }

  /** {@code scripts/zk.sh} of the repository this test runs in (searched upwards from here). */
  private static Path script() {
    for (Path at = Path.of("").toAbsolutePath(); at != null; at = at.getParent()) {
      Path candidate = at.resolve("scripts").resolve("zk.sh");
      if (Files.isRegularFile(candidate)) {
        return candidate;
      }
    }
    throw new IllegalStateException("scripts/zk.sh not found above " + Path.of("").toAbsolutePath());
  }

  /** {@code 127.0.0.1:PORT}. */
  public String connectString() {
    return "127.0.0.1:" + port;
  }

  @Override
  public void close() {
    Processes.kill(process);
    try (Stream<Path> files = Files.walk(dir)) {
      files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException e) {
      // best effort: it is a temp directory
    }
  }
}
