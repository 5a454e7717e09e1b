package io.shardcar.client;

import java.util.Optional;

/**
 * The sidecar refused a job configuration ({@code INVALID_ARGUMENT}): a bad cron expression, a
 * sharding total count out of range, malformed item parameters, an empty job name, ...
 */
public class InvalidJobConfigException extends ShardcarException {
  private static final long serialVersionUID = 1L;
  private final String field;

  public InvalidJobConfigException(String field, String message, Throwable cause) {
    super(message, cause);
    this.field = field;
  }

  /**
   * The offending {@link JobConfig} field in ElasticJob's spelling (e.g. {@code cron},
   * {@code shardingTotalCount}), when the sidecar's message names one.
   */
  public Optional<String> getField() {
    return Optional.ofNullable(field);
  }
}
