package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Behaviour that needs no sidecar. */
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

  @Test
  void builderRejectsNonsense() {
    assertThrows(IllegalArgumentException.class, () -> ShardcarWorker.builder().itemConcurrency(0));
    assertThrows(IllegalArgumentException.class, () -> ShardcarWorker.builder().connectTimeout(Duration.ZERO));
  }
}
