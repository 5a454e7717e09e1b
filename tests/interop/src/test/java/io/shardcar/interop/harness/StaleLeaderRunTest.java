package io.shardcar.interop.harness;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import org.junit.jupiter.api.Test;

/** Which runs {@link Cluster#assertNoOverlap} sets aside as ElasticJob's own (#2195), from their start records. */
class StaleLeaderRunTest {
  private static final String EJ = "192.0.2.2@-@100";
  private static final String SC = "127.0.0.2@-@200";

  private static Run run(String side, Map<String, String> start) {
    return new Run("m", side, "j", 2, 0, 10, true, new Rec("m", start), null);
  }

  @Test
  void aLeadersRunOfAnItemZooKeeperGaveAwayIsElasticJobsOwn() {
    assertTrue(Cluster.staleLeaderRun(run("elasticjob",
        Map.of("instance", EJ, "owner", SC, "failovering", "", "leader", EJ))));
  }

  @Test
  void everyOtherRunCounts() {
    // Its own item.
    assertFalse(Cluster.staleLeaderRun(run("elasticjob", Map.of("instance", EJ, "owner", EJ, "failovering", "", "leader", EJ))));
    // Its failover of another instance's item.
    assertFalse(Cluster.staleLeaderRun(run("elasticjob", Map.of("instance", EJ, "owner", SC, "failovering", EJ, "leader", EJ))));
    // Another's item while another instance leads: not the hazard of a leader's own reshard.
    assertFalse(Cluster.staleLeaderRun(run("elasticjob", Map.of("instance", EJ, "owner", SC, "failovering", "", "leader", SC))));
    assertFalse(Cluster.staleLeaderRun(run("elasticjob", Map.of("instance", EJ, "owner", SC, "failovering", "", "leader", ""))));
    // No owner written, or a record without one.
    assertFalse(Cluster.staleLeaderRun(run("elasticjob", Map.of("instance", EJ, "owner", "", "failovering", "", "leader", EJ))));
    assertFalse(Cluster.staleLeaderRun(run("elasticjob", Map.of("instance", EJ, "leader", EJ))));
    // A shardcar worker's run, whatever its record says.
    assertFalse(Cluster.staleLeaderRun(run("shardcar", Map.of("instance", SC, "owner", EJ, "failovering", "", "leader", SC))));
  }
}
