package io.shardcar.client;

/**
 * Another live worker stream already uses this instance id for the job ({@code ALREADY_EXISTS},
 * reason {@link ErrorReasons#ALREADY_EXISTS}). Give each worker of a job on one host its own
 * process or its own {@link ShardcarWorker.Builder#instanceId(String) instance id}; in containers
 * that share a sidecar, the client's {@link ShardcarWorker.Builder#instanceSuffix(ShardcarWorker.InstanceSuffix)
 * instance suffix} keeps ids apart.
 */
public class InstanceConflictException extends ShardcarException {
  private static final long serialVersionUID = 1L;

  /**
   * @param message what conflicts
   * @param cause the underlying failure, or null
   */
  public InstanceConflictException(String message, Throwable cause) {
    super(message, cause);
  }

  /**
   * @param message what conflicts
   * @param cause the underlying failure, or null
   * @param reason the sidecar's {@code ErrorInfo.reason}, or null
   */
  public InstanceConflictException(String message, Throwable cause, String reason) {
    super(message, cause, reason);
  }
}
