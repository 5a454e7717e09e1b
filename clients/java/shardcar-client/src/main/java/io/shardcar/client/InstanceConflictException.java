package io.shardcar.client;

/**
 * Another live worker stream already uses this instance id for the job ({@code ALREADY_EXISTS}).
 * Give each worker of a job on one host its own process or its own
 * {@link ShardcarWorker.Builder#instanceId(String) instance id}.
 */
public class InstanceConflictException extends ShardcarException {
  private static final long serialVersionUID = 1L;

  public InstanceConflictException(String message, Throwable cause) {
    super(message, cause);
  }
}
