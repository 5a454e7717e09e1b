package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.client.testing.Recorder;
import io.shardcar.client.testing.SidecarProcess;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The worker reaches a sidecar listening on {@code unix:///path}. */
@Tag("integration")
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class UnixSocketIntegrationTest {
  @Test
  void aWorkerRunsItemsOverAUnixDomainSocket() throws Exception {
    Path dir = Files.createTempDirectory("shardcar-uds-");
    Path socket = dir.resolve("shardcar.sock");
    Recorder recorder = new Recorder();
    try (SidecarProcess sidecar = SidecarProcess.startOnUnixSocket(socket);
        ShardcarWorker worker = ShardcarWorker.builder().target(sidecar.target()).listener(recorder).build()) {
      assertTrue(worker.getTarget().startsWith("unix:///"), worker.getTarget());
      worker.register(JobConfig.newBuilder("uds-job", 1).cron("* * * * * ?").build(), ctx -> { });
      Recorder.Event answered = recorder.await("an accepted completion", Duration.ofSeconds(20),
          e -> e.kind().equals("Answered"));
      assertNull(answered.error(), answered.toString());
      assertNull(answered.text());
    } finally {
      Files.deleteIfExists(socket);
      Files.deleteIfExists(dir);
    }
  }
}
