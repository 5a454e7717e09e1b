package io.shardcar.client.testing;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A real {@code shardcar run} process on a free loopback port, for integration tests. Finds the
 * binary from the {@code shardcar.bin} system property, else {@code $SHARDCAR_BIN}, else
 * {@code <repo>/target/debug/shardcar}. Always kill it: use try-with-resources.
 */
public final class SidecarProcess implements AutoCloseable {
  private static final AtomicInteger STARTS = new AtomicInteger();

  private final Path binary;
  private final List<String> extraArgs;
  private final int port;
  private final Path socket;
  private Process process;
  private Path log;

  private SidecarProcess(Path binary, int port, Path socket, List<String> extraArgs) {
    this.binary = binary;
    this.port = port;
    this.socket = socket;
    this.extraArgs = List.copyOf(extraArgs);
  }

  /** Standalone mode (in-process registry). */
  public static SidecarProcess startStandalone() {
    return start(List.of());
  }

  /** ZooKeeper mode against {@code zk}, in its own namespace. */
  public static SidecarProcess startWithZooKeeper(ZooKeeperProcess zk, String namespace) {
    return start(List.of("--zk", zk.connectString(), "--namespace", namespace));
  }

  /** {@code shardcar run --listen 127.0.0.1:PORT} plus {@code extraArgs}, waiting until the port accepts connections. */
  public static SidecarProcess start(List<String> extraArgs) {
    SidecarProcess sidecar = new SidecarProcess(findBinary(), Processes.freePort(), null, extraArgs);
    sidecar.launch();
    return sidecar;
  }

  /** Standalone mode listening on a Unix domain socket ({@code --listen unix:///...}) instead of TCP. */
  public static SidecarProcess startOnUnixSocket(Path socket) {
    SidecarProcess sidecar = new SidecarProcess(findBinary(), -1, socket.toAbsolutePath(), List.of());
    sidecar.launch();
    return sidecar;
  }

  /**
   * The sidecar binary.
   *
   * @throws IllegalStateException naming every place looked at, when there is none
   */
  public static Path findBinary() {
    List<String> tried = new ArrayList<>();
    for (String candidate : new String[] {System.getProperty("shardcar.bin"), System.getenv("SHARDCAR_BIN")}) {
      if (candidate != null && !candidate.isBlank() && !candidate.startsWith("${")) {
        Path p = Path.of(candidate);
        if (Files.isExecutable(p)) {
          return p;
        }
        tried.add(candidate);
      }
    }
    Path repo = repoRoot();
    if (repo != null) {
      Path p = repo.resolve("target/debug/shardcar");
      if (Files.isExecutable(p)) {
        return p;
      }
      tried.add(p.toString());
    }
    throw new IllegalStateException("no shardcar binary found (tried " + tried + "): build it with `cargo build` in the "
        + "repository root, or set SHARDCAR_BIN (or -Dshardcar.bin) to its path");
  }

  private static Path repoRoot() {
    for (Path dir = Path.of(System.getProperty("user.dir")).toAbsolutePath(); dir != null; dir = dir.getParent()) {
      if (Files.isRegularFile(dir.resolve("Cargo.toml")) && Files.isDirectory(dir.resolve("proto"))) {
        return dir;
      }
    }
    return null;
  }

  private void launch() {
    List<String> cmd = new ArrayList<>(List.of(binary.toString(), "run", "--listen", listenAddress()));
    cmd.addAll(extraArgs);
    log = Processes.logDir().resolve("sidecar-" + (socket == null ? port : "uds") + "-" + STARTS.incrementAndGet() + ".log");
    try {
      ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile());
      pb.environment().putIfAbsent("RUST_LOG", "info");
      pb.environment().remove("SHARDCAR_LISTEN");
      pb.environment().remove("SHARDCAR_ZK");
      process = pb.start();
    } catch (IOException e) {
      throw new IllegalStateException("cannot start " + cmd, e);
    }
    Processes.await(process, log, Duration.ofSeconds(30), "shardcar " + String.join(" ", cmd),
        () -> socket == null ? Processes.accepts(port) : Processes.accepts(socket));
  }

  private String listenAddress() {
    return socket == null ? "127.0.0.1:" + port : "unix://" + socket;
  }

  /** {@code 127.0.0.1:PORT} or {@code unix:///path}, for {@code ShardcarWorker.builder().target(...)}. */
  public String target() {
    return listenAddress();
  }

  public int port() {
    return port;
  }

  public Process process() {
    return process;
  }

  /** The current process's combined output (last 4000 characters). */
  public String logTail() {
    return Processes.tail(log);
  }

  /**
   * SIGSTOP: the sidecar freezes (this returns once every thread has), its connections stay
   * open, its leases stop being renewed.
   */
  public void pause() {
    Processes.stop(process);
  }

  /** SIGCONT after {@link #pause()}. */
  public void resume() {
    Processes.signal(process, "CONT");
  }

  /** SIGKILL, then a new process on the same port with the same arguments. */
  public void restart() {
    Processes.kill(process);
    launch();
  }

  /**
   * A new process on the same port (or socket) with the same arguments, once the current one has
   * exited by itself (after a drain): a sidecar restarted in place, as systemd does.
   */
  public void startAgain() {
    if (process.isAlive()) {
      throw new IllegalStateException("the sidecar still runs: it must exit before it starts again");
    }
    launch();
  }

  /** SIGKILL. */
  public void kill() {
    Processes.kill(process);
  }

  @Override
  public void close() {
    if (process != null && process.isAlive()) {
      try {
        Processes.signal(process, "CONT");
      } catch (IllegalStateException e) {
        if (process.isAlive()) {
          throw e;
        } // it exited meanwhile (e.g. at the end of a drain): nothing to resume
      }
    }
    Processes.kill(process);
  }
}
