package io.shardcar.client;

import java.util.Locale;

/** How the leader spreads a job's items over its live instances; ElasticJob's built-in strategies. */
public enum ShardingStrategy {
  /** Even blocks in instance order, the remainder to the first instances (ElasticJob's default). */
  AVG_ALLOCATION,
  /** Instance order reversed for jobs whose name hashes to an odd number. */
  ODEVITY,
  /** Instance order rotated by the job name's hash. */
  ROUND_ROBIN;

  /**
   * Parses ElasticJob's {@code jobShardingStrategyType} value; {@code null} or blank means
   * {@link #AVG_ALLOCATION}, as in ElasticJob.
   *
   * @throws InvalidJobConfigException for a strategy shardcar does not implement
   */
  public static ShardingStrategy fromElasticJobType(String type) {
    if (type == null || type.isBlank()) {
      return AVG_ALLOCATION;
    }
    try {
      return valueOf(type.trim().toUpperCase(Locale.ROOT));
    } catch (IllegalArgumentException e) {
      throw new InvalidJobConfigException(
          "shardingStrategy",
          "unknown sharding strategy '" + type + "': shardcar supports AVG_ALLOCATION, ODEVITY and ROUND_ROBIN",
          e);
    }
  }
}
