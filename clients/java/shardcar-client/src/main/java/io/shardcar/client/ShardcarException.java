package io.shardcar.client;

import java.util.Optional;

/**
 * Root of every error the shardcar client throws. Unchecked, so handler and bootstrap code is not
 * forced to declare it; catch this type to handle all shardcar failures at once.
 *
 * <p>When the sidecar itself refused a call, {@link #getReason()} is the stable reason of its
 * {@code google.rpc.ErrorInfo} (domain {@value ErrorReasons#DOMAIN}), one of {@link ErrorReasons}.
 * The message is for people and may change; act on the exception type and the reason.
 */
public class ShardcarException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The sidecar's {@code ErrorInfo.reason}, or null. */
  private final String reason;

  /**
   * An error found by the client itself (no reason).
   *
   * @param message what went wrong
   */
  public ShardcarException(String message) {
    this(message, null, null);
  }

  /**
   * An error found by the client itself, or one the sidecar sent without a reason.
   *
   * @param message what went wrong
   * @param cause the underlying failure, or null
   */
  public ShardcarException(String message, Throwable cause) {
    this(message, cause, null);
  }

  /**
   * An error with the sidecar's reason.
   *
   * @param message what went wrong
   * @param cause the underlying failure, or null
   * @param reason the sidecar's {@code ErrorInfo.reason} (one of {@link ErrorReasons}), or null
   */
  public ShardcarException(String message, Throwable cause, String reason) {
    super(message, cause);
    this.reason = reason == null || reason.isEmpty() ? null : reason;
  }

  /**
   * The stable reason the sidecar gave in its {@code ErrorInfo} (domain {@value ErrorReasons#DOMAIN}),
   * e.g. {@link ErrorReasons#INVALID_ARGUMENT} or {@link ErrorReasons#FAILED_PRECONDITION}; empty
   * when the sidecar did not answer (unreachable, transport failure) or the client found the error
   * itself.
   *
   * @return the reason, if the sidecar gave one
   */
  public Optional<String> getReason() {
    return Optional.ofNullable(reason);
  }
}
