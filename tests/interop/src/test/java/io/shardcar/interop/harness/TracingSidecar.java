package io.shardcar.interop.harness;

import java.io.IOException;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * A {@link Sidecar} that also writes its executions into ElasticJob's tracing tables:
 * {@code shardcar run ... --tracing-db postgres://...}. Started by {@link TracingProcs}; ready when its
 * socket accepts a connection (it binds only after the tracing database and ZooKeeper).
 */
public final class TracingSidecar extends Proc {
  private final String ip;
  private final Path socket;

  private TracingSidecar(String ip, Path socket, List<String> command, Path log) {
    super("sidecar-" + ip + "-tracing", command, log, Map.of("RUST_BACKTRACE", "1", "NO_COLOR", "1"));
    this.ip = ip;
    this.socket = socket;
  }

  static TracingSidecar start(String zk, String namespace, String ip, String tracingDb, Path socketDir, Path logDir) {
    Path socket = socketDir.resolve(ip + "-" + System.nanoTime() % 100000 + ".sock");
    List<String> cmd = List.of(Layout.sidecarBinary().toString(), "run", "--zk", zk, "--namespace", namespace,
        "--listen", "unix://" + socket, "--advertise-ip", ip, "--session-timeout", "4s",
        "--log-level", "info,shardcar=debug", "--tracing-db", tracingDb);
    TracingSidecar s = new TracingSidecar(ip, socket, cmd,
        logDir.resolve("sidecar-" + ip + "-tracing-" + System.nanoTime() % 100000 + ".log"));
    Await.until("sidecar " + ip + " accepting on " + socket, Duration.ofSeconds(30), () -> {
      if (!s.isAlive()) {
        throw new IllegalStateException("sidecar " + ip + " exited:\n" + s.logTail(4000));
      }
      try (SocketChannel ch = SocketChannel.open(java.net.StandardProtocolFamily.UNIX)) {
        return ch.connect(UnixDomainSocketAddress.of(socket));
      } catch (IOException e) {
        return false;
      }
    }, () -> s.logTail(4000));
    return s;
  }

  public String ip() {
    return ip;
  }

  /** {@code unix:///...}, for workers and {@code shardcar ctl --target}. */
  public String target() {
    return "unix://" + socket;
  }

  /** Runs {@code shardcar ctl --target <this sidecar> ARGS...}, which must succeed within 30 s; its output. */
  public String ctlOk(String... args) {
    List<String> cmd = new ArrayList<>(List.of(Layout.sidecarBinary().toString(), "ctl", "--target", target()));
    cmd.addAll(List.of(args));
    try {
      Path out = Files.createTempFile("shardcar-ctl-", ".out");
      try {
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(out.toFile());
        pb.environment().keySet().removeIf(k -> k.startsWith("SHARDCAR_"));
        pb.environment().put("NO_COLOR", "1");
        Process p = pb.start();
        if (!p.waitFor(30, TimeUnit.SECONDS)) {
          p.destroyForcibly();
          throw new AssertionError("shardcar ctl " + String.join(" ", args) + " did not finish in 30 s");
        }
        String text = Files.readString(out, StandardCharsets.UTF_8);
        if (p.exitValue() != 0) {
          throw new AssertionError("shardcar ctl " + String.join(" ", args) + " exited " + p.exitValue() + ":\n" + text);
        }
        return text;
      } finally {
        Files.deleteIfExists(out);
      }
    } catch (IOException e) {
      throw new IllegalStateException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }
}
