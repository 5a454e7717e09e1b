package io.shardcar.interop.harness;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;

/**
 * The suite's one real ZooKeeper: Debian's {@code zookeeper} package started by the repository's
 * {@code scripts/zk.sh run} (the way every shardcar harness starts it) on a free loopback port
 * with a temporary data directory, tick 500 ms so that the 4 s sessions of the suite expire on
 * time. Started once per test JVM; each test works in a namespace of its own. Killed, and its
 * data directory removed, when the JVM exits.
 */
public final class ZooKeeperServer {
  private static ZooKeeperServer instance;

  private final int port;
  private final Proc proc;

  private ZooKeeperServer(int port, Proc proc) {
    this.port = port;
    this.proc = proc;
  }

  public static synchronized ZooKeeperServer get() {
    if (instance == null || !instance.proc.isAlive()) {
      instance = start();
    }
    return instance;
  }

  private static ZooKeeperServer start() {
    if (!Files.isRegularFile(Path.of("/usr/share/java/zookeeper.jar"))) {
      throw new IllegalStateException("ZooKeeper is not installed: apt-get install zookeeper (scripts/install-deps.sh)");
    }
    int port = freePort();
    try {
      Path dir = Files.createTempDirectory("shardcar-interop-zk-");
      Path log = Layout.logRoot().resolve("zookeeper-" + port + ".log");
      Path script = Layout.repo().resolve("scripts/zk.sh");
      Proc proc = new Proc("zookeeper", List.of("bash", script.toString(), "run", dir.toString(), Integer.toString(port)), log,
          Map.of("ZK_TICK", "500", "ZK_FORCE_SYNC", "no",
              "JAVA", Path.of(System.getProperty("java.home"), "bin", "java").toString()));
      // When the JVM exits: the server stopped first, then its data directory removed (the log
      // stays with the suite's logs).
      Runtime.getRuntime().addShutdownHook(new Thread(() -> {
        proc.close();
        TempDirs.deleteTree(dir);
      }, "interop-zookeeper-cleanup"));
      Await.until("ZooKeeper serving on 127.0.0.1:" + port, Duration.ofSeconds(60),
          () -> {
            if (!proc.isAlive()) {
              throw new IllegalStateException("ZooKeeper exited:\n" + proc.logTail(4000));
            }
            return fourLetter(port, "srvr").contains("Mode: standalone");
          },
          () -> proc.logTail(4000));
      return new ZooKeeperServer(port, proc);
    } catch (IOException e) {
      throw new IllegalStateException("cannot start ZooKeeper", e);
    }
  }

  public String connectString() {
    return "127.0.0.1:" + port;
  }

  static int freePort() {
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      return s.getLocalPort();
    } catch (IOException e) {
      throw new IllegalStateException("no free loopback port", e);
    }
  }

  static String fourLetter(int port, String command) {
    try (Socket s = new Socket()) {
      s.connect(new InetSocketAddress("127.0.0.1", port), 200);
      s.setSoTimeout(1000);
      OutputStream out = s.getOutputStream();
      out.write(command.getBytes(StandardCharsets.US_ASCII));
      out.flush();
      InputStream in = s.getInputStream();
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      return "";
    }
  }
}
