package io.shardcar.client;

/**
 * Root of every error the shardcar client throws. Unchecked, so handler and bootstrap code is not
 * forced to declare it; catch this type to handle all shardcar failures at once.
 */
public class ShardcarException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public ShardcarException(String message) {
    super(message);
  }

  public ShardcarException(String message, Throwable cause) {
    super(message, cause);
  }
}
