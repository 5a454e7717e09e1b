package io.shardcar.client;

/** The sidecar could not be reached (not running, wrong target, or it went away mid-call). */
public class SidecarUnavailableException extends ShardcarException {
  private static final long serialVersionUID = 1L;
  private final String target;

  public SidecarUnavailableException(String target, String message, Throwable cause) {
    super(message, cause);
    this.target = target;
  }

  /** The gRPC target that was dialled, e.g. {@code 127.0.0.1:50061} or {@code unix:///run/shardcar.sock}. */
  public String getTarget() {
    return target;
  }
}
