package io.shardcar.client;

import java.util.Optional;

/**
 * A job configuration or another request field was refused ({@code INVALID_ARGUMENT}): a bad
 * cron expression, a sharding total count out of range, malformed item parameters, an empty job
 * name, an invalid instance id, ... Thrown by the sidecar's refusal (with
 * {@link #getReason() reason} {@link ErrorReasons#INVALID_ARGUMENT}) and by the client's own
 * checks in {@link JobConfig.Builder#build()} (no reason).
 */
public class InvalidJobConfigException extends ShardcarException {
  private static final long serialVersionUID = 1L;
  private final String field;
  private final String requestField;

  /**
   * A refusal found by the client itself.
   *
   * @param field the offending field in the client's spelling, or null
   * @param message what is wrong
   * @param cause the underlying failure, or null
   */
  public InvalidJobConfigException(String field, String message, Throwable cause) {
    this(field, null, null, message, cause);
  }

  /**
   * A refusal by the sidecar.
   *
   * @param field the offending field in the client's spelling (e.g. {@code shardingTotalCount}), or null
   * @param requestField the field as the sidecar's {@code BadRequest} names it (e.g.
   *     {@code config.sharding_total_count}), or null
   * @param reason the sidecar's {@code ErrorInfo.reason}, or null
   * @param message what is wrong
   * @param cause the underlying failure, or null
   */
  public InvalidJobConfigException(String field, String requestField, String reason, String message, Throwable cause) {
    super(message, cause, reason);
    this.field = field;
    this.requestField = requestField;
  }

  /**
   * The offending field in the client's spelling: a {@link JobConfig} field as ElasticJob names
   * it (e.g. {@code cron}, {@code shardingTotalCount}), or another request field in camel case
   * (e.g. {@code instanceSuffix}, {@code pid}). Taken from the field violation of the sidecar's
   * {@code google.rpc.BadRequest} (never parsed from the message); empty when there is none.
   *
   * @return the field, if known
   */
  public Optional<String> getField() {
    return Optional.ofNullable(field);
  }

  /**
   * The offending field exactly as the sidecar's {@code BadRequest} names it, a path into the
   * request message (e.g. {@code config.cron}, {@code instance_suffix}); empty for the client's
   * own checks.
   *
   * @return the proto field path, if the sidecar named one
   */
  public Optional<String> getRequestField() {
    return Optional.ofNullable(requestField);
  }
}
