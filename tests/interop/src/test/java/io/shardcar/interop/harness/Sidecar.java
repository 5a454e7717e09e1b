package io.shardcar.interop.harness;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * A real {@code shardcar run} process on the suite's ZooKeeper, advertising its own loopback IP
 * (127.0.0.2, 127.0.0.3, ...: each sidecar is a "host" with its {@code servers/{ip}}), listening on
 * a Unix socket in a temporary directory (no port to race for). Ready when the socket accepts a
 * connection (it binds only after connecting to ZooKeeper).
 */
public final class Sidecar extends Proc {
  private final String ip;
  private final Path socket;

  private Sidecar(String ip, Path socket, List<String> command, Path log) {
    super("sidecar-" + ip, command, log, Map.of("RUST_BACKTRACE", "1", "NO_COLOR", "1"));
    this.ip = ip;
    this.socket = socket;
  }

  static Sidecar start(String zk, String namespace, String ip, Path socketDir, Path logDir) {
    Path socket = socketDir.resolve(ip + ".sock");
    List<String> cmd = List.of(Layout.sidecarBinary().toString(), "run", "--zk", zk, "--namespace", namespace,
        "--listen", "unix://" + socket, "--advertise-ip", ip, "--session-timeout", "4s",
        "--log-level", "info,shardcar=debug");
    Sidecar s = new Sidecar(ip, socket, cmd, logDir.resolve("sidecar-" + ip + "-" + System.nanoTime() % 100000 + ".log"));
    Await.until("sidecar " + ip + " accepting on " + socket, Duration.ofSeconds(30), () -> {
      if (!s.isAlive()) {
        throw new IllegalStateException("sidecar " + ip + " exited:\n" + s.logTail(4000));
      }
      return accepts(socket);
    }, () -> s.logTail(4000));
    return s;
  }

  private static boolean accepts(Path socket) {
    try (SocketChannel ch = SocketChannel.open(java.net.StandardProtocolFamily.UNIX)) {
      return ch.connect(UnixDomainSocketAddress.of(socket));
    } catch (IOException e) {
      return false;
    }
  }

  public String ip() {
    return ip;
  }

  /** {@code unix:///...}, for workers and {@code shardcar ctl --target}. */
  public String target() {
    return "unix://" + socket;
  }

  /** The output and exit status of one {@code shardcar ctl} command. */
  public record CtlResult(int exit, String out) {}

  /** Runs {@code shardcar ctl --target <this sidecar> ARGS...} and waits for it (at most 30 s). */
  public CtlResult ctl(String... args) {
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
        return new CtlResult(p.exitValue(), Files.readString(out, StandardCharsets.UTF_8));
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

  /**
   * This sidecar's executions of {@code job} as {@code shardcar ctl executions --json} lists them
   * (proto3 JSON: {@code executionId}, {@code source}, {@code attempt}, {@code outcome}, ...; fields at
   * their default left out), by execution id, newest first.
   */
  public Map<String, JsonObject> executions(String job) {
    JsonObject root = JsonParser.parseString(ctlOk("executions", job, "--limit", "200", "--json")).getAsJsonObject();
    Map<String, JsonObject> m = new LinkedHashMap<>();
    if (root.has("executions")) {
      for (JsonElement e : root.getAsJsonArray("executions")) {
        m.put(e.getAsJsonObject().get("executionId").getAsString(), e.getAsJsonObject());
      }
    }
    return m;
  }

  /** {@link #ctl} that must succeed (exit 0); returns its output. */
  public String ctlOk(String... args) {
    CtlResult r = ctl(args);
    if (r.exit() != 0) {
      throw new AssertionError("shardcar ctl " + String.join(" ", args) + " exited " + r.exit() + ":\n" + r.out());
    }
    return r.out();
  }
}
