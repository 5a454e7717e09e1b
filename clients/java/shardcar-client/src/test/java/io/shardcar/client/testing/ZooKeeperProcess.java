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
 * temporary data directory, for integration tests. Ready when {@code srvr} reports standalone mode.
 */
public final class ZooKeeperProcess implements AutoCloseable {
  private static final String CLASSPATH =
      "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";

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
      Files.createDirectories(dir.resolve("data"));
      Path cfg = dir.resolve("zoo.cfg");
      Files.writeString(cfg, String.join("\n",
          "tickTime=2000",
          "initLimit=10",
          "syncLimit=5",
          "dataDir=" + dir.resolve("data"),
          "clientPort=" + port,
          "clientPortAddress=127.0.0.1",
          "maxClientCnxns=0",
          "admin.enableServer=false",
          "4lw.commands.whitelist=ruok,srvr,mntr,stat,cons",
          ""));
      Path log = Processes.logDir().resolve("zookeeper-" + port + ".log");
      List<String> cmd = List.of(
          Path.of(System.getProperty("java.home"), "bin", "java").toString(),
          "-Xmx256m",
          "-Dzookeeper.log.dir=" + dir,
          "-cp", CLASSPATH,
          "org.apache.zookeeper.server.quorum.QuorumPeerMain",
          cfg.toString());
      Process process = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
      ZooKeeperProcess zk = new ZooKeeperProcess(port, dir, process);
      Processes.await(process, log, Duration.ofSeconds(30), "ZooKeeper on port " + port,
          () -> Processes.fourLetter(port, "srvr").contains("Mode: standalone"));
      return zk;
    } catch (IOException e) {
      throw new IllegalStateException("cannot start ZooKeeper", e);
    }
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
