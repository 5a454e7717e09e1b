package io.shardcar.interop.harness;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * A member JVM: an ElasticJob-Lite member ({@code ElasticJobMember}) or a shardcar worker
 * ({@code ShardcarMember}). Its facts are its records ({@code {dir}/{name}.rec}).
 */
public final class Member extends Proc {
  public enum Side { ELASTICJOB, SHARDCAR }

  private final Cluster cluster;
  private final Side side;
  private final String memberName;

  Member(Cluster cluster, Side side, String name, List<String> command, Path log) {
    super(name, command, log, Map.of());
    this.cluster = cluster;
    this.side = side;
    this.memberName = name;
  }

  /** A member whose process gets {@code env} on top of the test JVM's environment. */
  Member(Cluster cluster, Side side, String name, List<String> command, Path log, Map<String, String> env) {
    super(name, command, log, env);
    this.cluster = cluster;
    this.side = side;
    this.memberName = name;
  }

  public Side side() {
    return side;
  }

  public String member() {
    return memberName;
  }

  /** Its records so far. */
  public List<Rec> recs() {
    return cluster.recs(memberName);
  }

  /** The instance id of its {@code ready} record for {@code job}, if it has one yet. */
  public Optional<String> readyInstance(String job) {
    return recs().stream().filter(r -> r.is("ready") && job.equals(r.job())).map(r -> r.get("instance")).findFirst();
  }

  /** Its instance id in {@code job} (it must be ready). */
  public String instanceId(String job) {
    return readyInstance(job).orElseThrow(() -> new AssertionError(this + " has no instance in " + job + "; records:\n"
        + Rec.lines(recs()) + "\n--- log ---\n" + logTail(3000)));
  }

  /** The items of its latest {@code assignment} record for {@code job} (shardcar workers). */
  public Optional<java.util.Set<Integer>> assignment(String job) {
    Rec last = null;
    for (Rec r : recs()) {
      if (r.is("assignment") && job.equals(r.job())) {
        last = r;
      }
    }
    return Optional.ofNullable(last).map(Rec::items);
  }
}
