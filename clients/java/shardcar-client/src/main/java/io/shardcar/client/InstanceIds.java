package io.shardcar.client;

import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.HexFormat;
import java.util.function.Function;
import java.util.function.Predicate;
import java.util.regex.Pattern;

/**
 * How a worker's instance id is made unique on its host. The sidecar names an instance
 * {@code {sidecar ip}@-@{pid}}, which is not unique when several containers share one sidecar
 * (each may be pid 1); then the client sends {@code instance_suffix} {@code {pid}-{token}} instead,
 * with a random token chosen once per JVM, and the id becomes {@code {ip}@-@{pid}-{token}}.
 */
final class InstanceIds {
  /** Eight random hex characters, chosen once per JVM: every reconnect reuses them. */
  static final String JVM_TOKEN = randomToken();

  /** What the sidecar accepts as {@code instance_suffix}. */
  private static final Pattern SUFFIX = Pattern.compile("[A-Za-z0-9._-]{1,64}");

  /** Files whose presence marks a container: Docker's and Podman's. */
  static final String DOCKERENV = "/.dockerenv";
  static final String CONTAINERENV = "/run/.containerenv";
  /** Set in every Kubernetes pod. */
  static final String KUBERNETES_ENV = "KUBERNETES_SERVICE_HOST";

  private InstanceIds() {}

  /** What the container detection reads; injectable so that tests need no container. */
  record Probe(long pid, Predicate<String> fileExists, Function<String, String> environment) {
    /** This process: its pid, its file system, its environment. */
    static Probe system(long pid) {
      return new Probe(pid, path -> Files.exists(Path.of(path)), System::getenv);
    }
  }

  /**
   * Whether the worker runs in a container, where its pid says nothing about uniqueness on the
   * host: pid 1, or {@code /.dockerenv} or {@code /run/.containerenv} exists, or
   * {@code KUBERNETES_SERVICE_HOST} is set.
   */
  static boolean inContainer(Probe probe) {
    if (probe.pid() == 1) {
      return true;
    }
    if (probe.fileExists().test(DOCKERENV) || probe.fileExists().test(CONTAINERENV)) {
      return true;
    }
    String k8s = probe.environment().apply(KUBERNETES_ENV);
    return k8s != null && !k8s.isEmpty();
  }

  /**
   * The {@code instance_suffix} to send: {@code {pid}-{token}} when {@code mode} asks for one
   * (ALWAYS, or AUTO in a container), else empty (the sidecar then uses the pid). Empty, too, when
   * an explicit instance id is set: it wins.
   */
  static String suffix(ShardcarWorker.InstanceSuffix mode, String explicitInstanceId, Probe probe, String token) {
    if (explicitInstanceId != null && !explicitInstanceId.isEmpty()) {
      return "";
    }
    boolean use = switch (mode) {
      case ALWAYS -> true;
      case NEVER -> false;
      case AUTO -> inContainer(probe);
    };
    return use ? probe.pid() + "-" + token : "";
  }

  /** Whether the sidecar accepts {@code suffix}: 1 to 64 characters of {@code [A-Za-z0-9._-]}. */
  static boolean isValidSuffix(String suffix) {
    return suffix != null && SUFFIX.matcher(suffix).matches();
  }

  private static String randomToken() {
    byte[] bytes = new byte[4];
    new SecureRandom().nextBytes(bytes);
    return HexFormat.of().formatHex(bytes);
  }
}
