package io.shardcar.interop.harness;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.shardingsphere.elasticjob.infra.handler.sharding.JobInstance;
import org.apache.shardingsphere.elasticjob.infra.handler.sharding.JobShardingStrategyFactory;

/**
 * Expected owners, computed by ElasticJob's own strategy classes (not by this suite) over instance
 * ids in the order ElasticJob hands them over (descending). Lets a test that is not about
 * strategies state who owns what without depending on how the host's IP sorts against the
 * sidecars' 127.0.0.x. {@code StrategiesTest} checks shardcar against ElasticJob's leader itself.
 */
public final class Expected {
  private Expected() {}

  /** item → owner under {@code type} (null: AVG_ALLOCATION). */
  public static Map<Integer, String> owners(String type, String job, int total, String... instanceIds) {
    List<JobInstance> instances = new ArrayList<>();
    List.of(instanceIds).stream().sorted(Comparator.reverseOrder()).forEach(id -> instances.add(new JobInstance(id)));
    Map<Integer, String> owners = new TreeMap<>();
    JobShardingStrategyFactory.getStrategy(type).sharding(instances, job, total)
        .forEach((instance, items) -> items.forEach(i -> owners.put(i, instance.getJobInstanceId())));
    return owners;
  }

  /** item → owner under AVG_ALLOCATION. */
  public static Map<Integer, String> avg(String job, int total, String... instanceIds) {
    return owners(null, job, total, instanceIds);
  }

  /** The items {@code id} owns in {@code owners}. */
  public static java.util.Set<Integer> itemsOf(Map<Integer, String> owners, String id) {
    java.util.Set<Integer> s = new java.util.TreeSet<>();
    owners.forEach((i, o) -> {
      if (o.equals(id)) {
        s.add(i);
      }
    });
    return s;
  }
}
