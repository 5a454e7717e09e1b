package io.shardcar.client;

/** A job was subscribed to without a configuration, and the sidecar does not know it. */
public class JobNotFoundException extends ShardcarException {
  private static final long serialVersionUID = 1L;

  public JobNotFoundException(String message, Throwable cause) {
    super(message, cause);
  }
}
