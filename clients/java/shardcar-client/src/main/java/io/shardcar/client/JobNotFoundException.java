package io.shardcar.client;

/**
 * A job was subscribed to without a configuration, and the sidecar does not know it
 * ({@code NOT_FOUND}; reason {@link ErrorReasons#NOT_FOUND} or {@link ErrorReasons#JOB_NOT_FOUND}).
 */
public class JobNotFoundException extends ShardcarException {
  private static final long serialVersionUID = 1L;

  /**
   * @param message what was not found
   * @param cause the underlying failure, or null
   */
  public JobNotFoundException(String message, Throwable cause) {
    super(message, cause);
  }

  /**
   * @param message what was not found
   * @param cause the underlying failure, or null
   * @param reason the sidecar's {@code ErrorInfo.reason}, or null
   */
  public JobNotFoundException(String message, Throwable cause, String reason) {
    super(message, cause, reason);
  }
}
