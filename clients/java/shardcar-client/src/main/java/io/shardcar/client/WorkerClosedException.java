package io.shardcar.client;

/** The worker (or the registration) was used after {@code close()}. */
public class WorkerClosedException extends ShardcarException {
  private static final long serialVersionUID = 1L;

  public WorkerClosedException(String message) {
    super(message);
  }
}
