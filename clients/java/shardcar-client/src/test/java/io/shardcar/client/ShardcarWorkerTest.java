package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.client.ShardcarWorker.InstanceSuffix;
import io.shardcar.v1.SubscribeRequest;
import java.io.IOException;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * Behaviour that needs no sidecar: the target's resolution, the first-connect deadline, the value
 * each {@code SubscribeRequest} carries and its validation, instance suffixes, the defaults (those
 * of the Python client's {@code WorkerOptions}) and the former option names.
 */
class ShardcarWorkerTest {
  @Test
  void targetComesFromTheBuilderThenTheEnvironmentThenTheDefault() {
    Map<String, String> env = Map.of("SHARDCAR_TARGET", "unix:///run/shardcar.sock");
    assertEquals("10.0.0.1:1", ShardcarWorker.builder().environment(env::get).target("10.0.0.1:1").resolveTarget());
    assertEquals("unix:///run/shardcar.sock", ShardcarWorker.builder().environment(env::get).resolveTarget());
    assertEquals("127.0.0.1:50061", ShardcarWorker.builder().environment(k -> null).resolveTarget());
  }

  @Test
  void registerFailsWithSidecarUnavailableWhenNothingListens() throws IOException {
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort();
    }
    try (ShardcarWorker worker = ShardcarWorker.builder()
        .target("127.0.0.1:" + port)
        .connectTimeout(Duration.ofMillis(800))
        .reconnectBackoff(Duration.ofMillis(50), Duration.ofMillis(200))
        .build()) {
      long start = System.nanoTime();
      SidecarUnavailableException e = assertThrows(SidecarUnavailableException.class,
          () -> worker.register(JobConfig.newBuilder("j", 1).cron("* * * * * ?").build(), ctx -> { }));
      assertTrue(e.getMessage().contains("127.0.0.1:" + port), e.getMessage());
      assertEquals("127.0.0.1:" + port, e.getTarget());
      assertTrue(Duration.ofNanos(System.nanoTime() - start).toMillis() < 10_000);
      assertTrue(worker.getRegistrations().isEmpty());
    }
  }

  @Test
  void aClosedWorkerRefusesRegistrations() {
    ShardcarWorker worker = ShardcarWorker.builder().target("127.0.0.1:1").build();
    worker.close();
    worker.close();
    assertThrows(WorkerClosedException.class, () -> worker.register("j", ctx -> { }));
  }

  /** The defaults, which the Python client's {@code WorkerOptions} shares, name for name. */
  @Test
  void theDefaultsAreThoseOfThePythonClient() {
    Settings s = ShardcarWorker.builder().target("127.0.0.1:1").settings();
    assertEquals(8, s.itemConcurrency());
    assertEquals(Duration.ofSeconds(30), s.connectTimeout());
    assertEquals(Duration.ofMillis(100), s.backoffInitial());
    assertEquals(Duration.ofSeconds(5), s.backoffMax());
    assertEquals(Duration.ofSeconds(10), s.answerTimeout());
    assertEquals(Duration.ofSeconds(30), s.drainTimeout());
    assertFalse(s.stopOnDrain());
    assertEquals(Map.of("a", "1", "b", ""), ShardcarWorker.builder().label("a", "0")
        .labels(java.util.Collections.singletonMap("b", null)).labels(Map.of("a", "1")).settings().labels());
  }

  @Test
  @SuppressWarnings("removal") // the deprecated name is what this tests
  void theFormerNameOfTheDrainTimeoutStillWorks() {
    assertEquals(Duration.ofSeconds(5),
        ShardcarWorker.builder().shutdownGracePeriod(Duration.ofSeconds(5)).settings().drainTimeout());
    assertThrows(IllegalArgumentException.class, () -> ShardcarWorker.builder().drainTimeout(Duration.ofSeconds(-1)));
  }

  @Test
  @SuppressWarnings("removal") // the deprecated name is what this tests
  void aDrainIsFollowedByANewSubscriptionUnlessStopOnDrainAndTheOldNameStillWorks() {
    assertFalse(ShardcarWorker.builder().settings().stopOnDrain(), "by default a drain is not the end");
    assertTrue(ShardcarWorker.builder().stopOnDrain(true).settings().stopOnDrain());
    // reconnectAfterShutdown(r), deprecated, is stopOnDrain(!r).
    assertTrue(ShardcarWorker.builder().reconnectAfterShutdown(false).settings().stopOnDrain());
    assertFalse(ShardcarWorker.builder().reconnectAfterShutdown(true).settings().stopOnDrain());
  }

  @Test
  @SuppressWarnings("removal") // the deprecated names are what this tests
  void aDeprecatedNameLogsOneWarningAtRunTimeNamingItsReplacement() {
    java.util.logging.Logger log = java.util.logging.Logger.getLogger(ShardcarWorker.class.getName());
    List<java.util.logging.LogRecord> records = new java.util.concurrent.CopyOnWriteArrayList<>();
    java.util.logging.Handler handler = new java.util.logging.Handler() {
      @Override
      public void publish(java.util.logging.LogRecord record) {
        records.add(record);
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    log.addHandler(handler);
    try {
      ShardcarWorker.DEPRECATED_USED.clear();
      ShardcarWorker.builder().shutdownGracePeriod(Duration.ofSeconds(5));
      ShardcarWorker.builder().shutdownGracePeriod(Duration.ofSeconds(6));
      ShardcarWorker.builder().reconnectAfterShutdown(true).reconnectAfterShutdown(false);
      ShardcarWorker.builder().drainTimeout(Duration.ofSeconds(1)).stopOnDrain(true);
      java.util.logging.SimpleFormatter text = new java.util.logging.SimpleFormatter();
      List<String> warnings = records.stream()
          .filter(r -> r.getLevel() == java.util.logging.Level.WARNING)
          .map(text::formatMessage)
          .toList();
      assertEquals(2, warnings.size(), warnings.toString());
      assertTrue(warnings.get(0).contains("shutdownGracePeriod(Duration) is deprecated")
          && warnings.get(0).contains("use drainTimeout(Duration)"), warnings.get(0));
      assertTrue(warnings.get(1).contains("reconnectAfterShutdown(boolean) is deprecated")
          && warnings.get(1).contains("stopOnDrain(!r)"), warnings.get(1));
    } finally {
      log.removeHandler(handler);
    }
  }

  @Test
  void builderRejectsNonsense() {
    assertThrows(IllegalArgumentException.class, () -> ShardcarWorker.builder().itemConcurrency(0));
    assertThrows(IllegalArgumentException.class, () -> ShardcarWorker.builder().connectTimeout(Duration.ZERO));
  }

  @Test
  void maxConcurrentExecutionsIsTheExecutorSizeUnlessSet() {
    JobConfig config = JobConfig.newBuilder("j", 1).cron("* * * * * ?").build();
    Settings three = ShardcarWorker.builder().target("127.0.0.1:1").itemConcurrency(3).settings();
    assertEquals(3, three.maxConcurrentExecutions());
    assertEquals(3, JobRegistration.subscribeRequest(three, "j", config).getMaxConcurrentExecutions());
    assertEquals(3, JobRegistration.subscribeRequest(three, "j", null).getMaxConcurrentExecutions(),
        "a job joined by name sends it too");
    assertEquals(8, ShardcarWorker.builder().target("127.0.0.1:1").settings().maxConcurrentExecutions(),
        "the default pool's size");
    assertEquals(1024, ShardcarWorker.builder().target("127.0.0.1:1").itemConcurrency(5000).settings()
        .maxConcurrentExecutions(), "capped at the sidecar's limit");

    Settings elastic = ShardcarWorker.builder().target("127.0.0.1:1").itemConcurrency(4).maxConcurrentExecutions(1)
        .settings();
    assertEquals(4, elastic.itemConcurrency());
    assertEquals(1, JobRegistration.subscribeRequest(elastic, "j", config).getMaxConcurrentExecutions());
    // The order of the builder calls does not matter: checked when the settings are made.
    assertEquals(2, ShardcarWorker.builder().target("127.0.0.1:1").maxConcurrentExecutions(2).itemConcurrency(2)
        .settings().maxConcurrentExecutions());
    try (ShardcarWorker worker = ShardcarWorker.builder().target("127.0.0.1:1").itemConcurrency(6)
        .maxConcurrentExecutions(5).build()) {
      assertEquals(6, worker.getItemConcurrency());
      assertEquals(5, worker.getMaxConcurrentExecutions());
    }
  }

  @Test
  void maxConcurrentExecutionsOutOfRangeOrAboveTheExecutorSizeIsRefused() {
    for (int bad : new int[] {0, -1, 1025, Integer.MAX_VALUE}) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
          () -> ShardcarWorker.builder().maxConcurrentExecutions(bad));
      assertTrue(e.getMessage().contains("maxConcurrentExecutions must be 1 to 1024"), e.getMessage());
    }
    IllegalArgumentException tooMany = assertThrows(IllegalArgumentException.class,
        () -> ShardcarWorker.builder().target("127.0.0.1:1").itemConcurrency(2).maxConcurrentExecutions(3).build());
    assertTrue(tooMany.getMessage().contains("maxConcurrentExecutions 3 exceeds itemConcurrency 2"),
        tooMany.getMessage());
  }

  /** A builder whose container probe sees only {@code files} and {@code env}, with a fixed random token. */
  private static ShardcarWorker.Builder probed(long pid, Set<String> files, Map<String, String> env) {
    return ShardcarWorker.builder()
        .target("127.0.0.1:1")
        .pid(pid)
        .fileExists(files::contains)
        .environment(env::get)
        .instanceSuffixToken("0123abcd");
  }

  @Test
  void containersAreDetectedFromPidOneMarkerFilesOrKubernetes() {
    InstanceIds.Probe host = new InstanceIds.Probe(4242, p -> false, k -> null);
    assertEquals(false, InstanceIds.inContainer(host));
    assertTrue(InstanceIds.inContainer(new InstanceIds.Probe(1, p -> false, k -> null)));
    assertTrue(InstanceIds.inContainer(new InstanceIds.Probe(4242, "/.dockerenv"::equals, k -> null)));
    assertTrue(InstanceIds.inContainer(new InstanceIds.Probe(4242, "/run/.containerenv"::equals, k -> null)));
    assertTrue(InstanceIds.inContainer(new InstanceIds.Probe(4242, p -> false,
        Map.of("KUBERNETES_SERVICE_HOST", "10.96.0.1")::get)));
    assertEquals(false, InstanceIds.inContainer(new InstanceIds.Probe(4242, p -> false,
        Map.of("KUBERNETES_SERVICE_HOST", "")::get)), "an empty variable is not set");
  }

  @Test
  void autoSendsASuffixOnlyInAContainer() {
    assertEquals("", probed(4242, Set.of(), Map.of()).resolveInstanceSuffix(), "a plain host keeps {ip}@-@{pid}");
    assertEquals("1-0123abcd", probed(1, Set.of(), Map.of()).resolveInstanceSuffix());
    assertEquals("4242-0123abcd", probed(4242, Set.of("/.dockerenv"), Map.of()).resolveInstanceSuffix());
    assertEquals("4242-0123abcd", probed(4242, Set.of("/run/.containerenv"), Map.of()).resolveInstanceSuffix());
    assertEquals("4242-0123abcd",
        probed(4242, Set.of(), Map.of("KUBERNETES_SERVICE_HOST", "10.96.0.1")).resolveInstanceSuffix());
  }

  @Test
  void theSuffixCanBeForcedOnOrOffAndAnExplicitInstanceIdWins() {
    assertEquals("4242-0123abcd",
        probed(4242, Set.of(), Map.of()).instanceSuffix(InstanceSuffix.ALWAYS).resolveInstanceSuffix());
    assertEquals("", probed(1, Set.of("/.dockerenv"), Map.of()).instanceSuffix(InstanceSuffix.NEVER)
        .resolveInstanceSuffix());
    assertEquals("", probed(1, Set.of(), Map.of()).instanceSuffix(InstanceSuffix.ALWAYS).instanceId("me@-@1")
        .resolveInstanceSuffix());
    assertThrows(NullPointerException.class, () -> ShardcarWorker.builder().instanceSuffix(null));
  }

  @Test
  void theRandomPartIsEightHexCharactersChosenOncePerJvm() {
    assertTrue(InstanceIds.JVM_TOKEN.matches("[0-9a-f]{8}"), InstanceIds.JVM_TOKEN);
    String a;
    String b;
    try (ShardcarWorker one = ShardcarWorker.builder().target("127.0.0.1:1").pid(7).instanceSuffix(InstanceSuffix.ALWAYS).build();
        ShardcarWorker two = ShardcarWorker.builder().target("127.0.0.1:1").pid(7).instanceSuffix(InstanceSuffix.ALWAYS).build()) {
      a = one.getInstanceSuffix();
      b = two.getInstanceSuffix();
    }
    assertEquals("7-" + InstanceIds.JVM_TOKEN, a);
    assertEquals(a, b);
    assertTrue(InstanceIds.isValidSuffix(a));
    assertTrue(InstanceIds.isValidSuffix(ProcessHandle.current().pid() + "-" + InstanceIds.JVM_TOKEN));
    assertEquals(false, InstanceIds.isValidSuffix("a b"));
    assertEquals(false, InstanceIds.isValidSuffix("x".repeat(65)));
    assertThrows(IllegalArgumentException.class,
        () -> probed(1, Set.of(), Map.of()).instanceSuffixToken("no/slash").resolveInstanceSuffix());
  }

  @Test
  void everySubscriptionSendsTheSameSuffixSoReconnectsKeepTheId() {
    Settings settings = probed(1, Set.of(), Map.of()).settings();
    JobConfig config = JobConfig.newBuilder("j", 1).cron("* * * * * ?").build();
    SubscribeRequest first = JobRegistration.subscribeRequest(settings, "j", config);
    SubscribeRequest again = JobRegistration.subscribeRequest(settings, "j", config);
    assertEquals("1-0123abcd", first.getInstanceSuffix());
    assertEquals(1, first.getPid());
    assertEquals("", first.getInstanceId());
    assertEquals(first, again);

    SubscribeRequest explicit = JobRegistration.subscribeRequest(
        probed(1, Set.of(), Map.of()).instanceId("10.0.0.1@-@a").settings(), "j", config);
    assertEquals("10.0.0.1@-@a", explicit.getInstanceId());
    assertEquals("", explicit.getInstanceSuffix());

    SubscribeRequest host = JobRegistration.subscribeRequest(probed(4242, Set.of(), Map.of()).settings(), "j", null);
    assertEquals("", host.getInstanceSuffix());
    assertEquals(4242, host.getPid());
  }
}
