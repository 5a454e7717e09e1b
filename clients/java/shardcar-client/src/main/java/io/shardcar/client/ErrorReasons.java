package io.shardcar.client;

/**
 * The reasons the sidecar puts in the {@code google.rpc.ErrorInfo} of every error status (domain
 * {@value #DOMAIN}), part of the shardcar v1 contract. Read with
 * {@link ShardcarException#getReason()}. Compare as strings: a newer sidecar may add reasons.
 */
public final class ErrorReasons {
  /** The {@code ErrorInfo.domain} of every error the sidecar returns. */
  public static final String DOMAIN = "shardcar.v1";

  /** A request field is invalid; {@link InvalidJobConfigException#getField()} names it. */
  public static final String INVALID_ARGUMENT = "INVALID_ARGUMENT";
  /** Something the request names (an instance, a server) does not exist. */
  public static final String NOT_FOUND = "NOT_FOUND";
  /** The job the request names does not exist (Admin API). */
  public static final String JOB_NOT_FOUND = "JOB_NOT_FOUND";
  /** The instance id is already live for the job. */
  public static final String ALREADY_EXISTS = "ALREADY_EXISTS";
  /** The request is not allowed. */
  public static final String PERMISSION_DENIED = "PERMISSION_DENIED";
  /** The request does not fit the current state, e.g. an answer for an execution taken back. */
  public static final String FAILED_PRECONDITION = "FAILED_PRECONDITION";
  /** The job's data in the registry cannot be read. */
  public static final String CORRUPT_JOB_DATA = "CORRUPT_JOB_DATA";
  /** The sidecar is up but cannot reach its registry (ZooKeeper). */
  public static final String REGISTRY_UNAVAILABLE = "REGISTRY_UNAVAILABLE";
  /** The sidecar cannot take the call now; sending it again is safe. */
  public static final String UNAVAILABLE = "UNAVAILABLE";

  private ErrorReasons() {}
}
