package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.client.testing.Recorder;
import io.shardcar.client.testing.SidecarProcess;
import io.shardcar.client.testing.ZooKeeperProcess;
import java.time.Duration;
import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Two workers of one job on a sidecar in ZooKeeper mode, against a real ZooKeeper. */
@Tag("integration")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ZooKeeperIntegrationTest {
  private static final Duration WAIT = Duration.ofSeconds(30);

  @Test
  void twoWorkersShareTheItemsAndBothAreTriggered() {
    try (ZooKeeperProcess zk = ZooKeeperProcess.start();
        SidecarProcess sidecar = SidecarProcess.startWithZooKeeper(zk, "shardcar-java-it")) {
      Recorder recorderA = new Recorder();
      Recorder recorderB = new Recorder();
      JobConfig config = JobConfig.newBuilder("zk-job", 4).cron("* * * * * ?").overwrite(true).build();
      try (ShardcarWorker a = worker(sidecar, "worker-a", recorderA);
          ShardcarWorker b = worker(sidecar, "worker-b", recorderB)) {
        JobRegistration regA = a.register(config, ctx -> { });
        JobRegistration regB = b.register(config, ctx -> { });
        assertEquals("worker-a", regA.getInstanceId());
        assertEquals("worker-b", regB.getInstanceId());

        // Eager resharding: both instances own items soon after the second joins.
        recorderB.await("an assignment with items for B", WAIT,
            e -> e.kind().equals("Assignment") && !e.assignment().items().isEmpty());
        recorderA.await("A's items shrink to share with B", WAIT,
            e -> e.kind().equals("Assignment") && !e.assignment().items().isEmpty()
                && e.assignment().items().size() < 4);
        Set<Integer> itemsA = regA.getAssignment().itemNumbers();
        Set<Integer> itemsB = regB.getAssignment().itemNumbers();
        Set<Integer> all = new HashSet<>(itemsA);
        all.addAll(itemsB);
        assertEquals(Set.of(0, 1, 2, 3), all, "A " + itemsA + " + B " + itemsB);
        assertEquals(4, itemsA.size() + itemsB.size(), "no item owned twice: A " + itemsA + " B " + itemsB);
        assertNotEquals(regA.getAssignment().leader(), regB.getAssignment().leader(), "exactly one leader");

        for (Recorder r : new Recorder[] {recorderA, recorderB}) {
          Recorder.Event answered = r.await("an accepted answer", WAIT,
              e -> e.kind().equals("Answered") && e.error() == null);
          assertNull(answered.text());
        }
      }
    }
  }

  private static ShardcarWorker worker(SidecarProcess sidecar, String instanceId, Recorder recorder) {
    return ShardcarWorker.builder()
        .target(sidecar.target())
        .instanceId(instanceId)
        .connectTimeout(Duration.ofSeconds(15))
        .drainTimeout(Duration.ofSeconds(2))
        .listener(recorder)
        .build();
  }
}
