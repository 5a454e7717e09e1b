package io.shardcar.client;

/**
 * The sidecar could not be reached (not running, wrong target, or it went away mid-call), or it
 * answered {@code UNAVAILABLE} itself: then {@link #getReason()} is
 * {@link ErrorReasons#REGISTRY_UNAVAILABLE} (it cannot reach ZooKeeper) or
 * {@link ErrorReasons#UNAVAILABLE}.
 */
public class SidecarUnavailableException extends ShardcarException {
  private static final long serialVersionUID = 1L;
  private final String target;

  /**
   * @param target the gRPC target dialled
   * @param message what failed
   * @param cause the underlying failure, or null
   */
  public SidecarUnavailableException(String target, String message, Throwable cause) {
    this(target, message, cause, null);
  }

  /**
   * @param target the gRPC target dialled
   * @param message what failed
   * @param cause the underlying failure, or null
   * @param reason the sidecar's {@code ErrorInfo.reason} when it answered itself, or null
   */
  public SidecarUnavailableException(String target, String message, Throwable cause, String reason) {
    super(message, cause, reason);
    this.target = target;
  }

  /**
   * The gRPC target that was dialled, e.g. {@code 127.0.0.1:50061} or {@code unix:///run/shardcar.sock}.
   *
   * @return the target
   */
  public String getTarget() {
    return target;
  }
}
