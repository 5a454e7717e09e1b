package io.shardcar.client;

import io.grpc.Status;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * What a registration does once its stream has ended while it still runs, decided without I/O
 * (owned by {@link RegistrationState}). The state decides every end of a stream in this order
 * (the order of {@code clients/protocol-cases/README.md}): a {@link RegistrationState#close close}
 * stops the registration without an error; then {@link #fatal} may stop it with an error; then a
 * remote {@code Shutdown} received on the stream stops it (a drain too, with {@code stopOnDrain});
 * else it subscribes again after {@link #retry}'s delay, after a drain as after a lost stream.
 *
 * <p>Fatal:
 *
 * <ul>
 *   <li><b>At any time</b>: the sidecar refused the job, {@code INVALID_ARGUMENT}
 *       ({@link InvalidJobConfigException}: its configuration or the request is refused) or
 *       {@code NOT_FOUND} ({@link JobNotFoundException}: the job does not exist, or was removed):
 *       trying again cannot help.
 *   <li><b>Before the first registration</b> (no {@code Assignment} seen yet, so
 *       {@code register()} has not returned): any end but a transient failure
 *       ({@link Errors#isTransient}: UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED;
 *       a failure to connect is an UNAVAILABLE) or a normal end (the sidecar may be restarting),
 *       e.g. ALREADY_EXISTS (the instance id is live elsewhere). Those two are tried again until
 *       the connect timeout, counted from the first subscription, has passed; then the end is
 *       fatal with a {@link SidecarUnavailableException} (mapped from the stream's own status when
 *       it was UNAVAILABLE). {@code register()} throws the fatal error.
 *   <li><b>After it</b>: nothing else; every other end is retried for ever.
 * </ul>
 *
 * <p>The backoff doubles from its initial delay up to its maximum, with ±20 % jitter, and starts
 * over at every {@code Registered}.
 */
final class ReconnectPolicy {
  /**
   * Subscribe again in {@code delayMillis}. {@code cause}: what ended the stream;
   * {@code disconnected}: a registered worker lost its stream (not a first subscription failing).
   */
  record Retry(long delayMillis, ShardcarException cause, boolean disconnected) {}

  private final String target;
  private final String jobName;
  private final long connectTimeoutNanos;
  private final Backoff backoff;

  private boolean connecting;
  private long firstDeadline;
  private boolean firstRegistrationDone;

  /**
   * @param target the sidecar's address, for the error messages
   * @param connectTimeout how long the first subscription may keep failing transiently
   */
  ReconnectPolicy(String target, String jobName, Duration connectTimeout, Backoff backoff) {
    this.target = target;
    this.jobName = jobName;
    this.connectTimeoutNanos = connectTimeout.toNanos();
    this.backoff = backoff;
  }

  /** The defaults of {@link ShardcarWorker.Builder} (connect timeout 30 s, backoff 100 ms to 5 s). */
  static ReconnectPolicy defaults(String jobName) {
    return new ReconnectPolicy(ShardcarWorker.DEFAULT_TARGET, jobName, Duration.ofSeconds(30),
        new Backoff(Duration.ofMillis(100), Duration.ofSeconds(5)));
  }

  /** A subscription starts at {@code now}: the first one starts the connect timeout. */
  void streamOpened(long now) {
    if (!connecting) {
      connecting = true;
      firstDeadline = now + connectTimeoutNanos;
    }
  }

  /** {@code Registered}: the backoff starts over. */
  void registered() {
    backoff.reset();
  }

  /** An {@code Assignment}: the first registration is done ({@code register()} returns). */
  void assigned() {
    firstRegistrationDone = true;
  }

  /** Whether the first registration is done (an {@code Assignment} was seen). */
  boolean isRegistered() {
    return firstRegistrationDone;
  }

  /**
   * The error that ends the registration, of a stream that ended at {@code now} cleanly
   * ({@code error} null: the sidecar ended it) or with {@code error} (a gRPC status; a connection
   * that could not be made is UNAVAILABLE); null when it may go on.
   */
  ShardcarException fatal(Throwable error, long now) {
    if (error != null && refusesTheJob(error)) {
      return firstRegistrationDone
          ? Errors.fromThrowable(target, "stream of job '" + jobName + "'", error)
          : subscribeError(error);
    }
    if (firstRegistrationDone) {
      return null;
    }
    if (error != null && !Errors.isTransient(error)) {
      return subscribeError(error);
    }
    if (now - firstDeadline < 0) {
      return null;
    }
    if (error != null && Status.fromThrowable(error).getCode() == Status.Code.UNAVAILABLE) {
      return subscribeError(error);
    }
    return new SidecarUnavailableException(target, "subscribe to job '" + jobName + "': no registration from the "
        + "shardcar sidecar at " + target + " within the connect timeout of "
        + TimeUnit.NANOSECONDS.toMillis(connectTimeoutNanos) + " ms (last stream: " + describe(error) + ")", error);
  }

  /** Subscribe again after the backoff (when {@link #fatal} and a {@code Shutdown} did not stop it). */
  Retry retry(Throwable error) {
    if (!firstRegistrationDone) {
      return new Retry(backoff.nextDelayMillis(), subscribeError(error), false);
    }
    ShardcarException cause = error == null
        ? new SidecarUnavailableException(target, "the sidecar ended the stream of job '" + jobName + "'", null)
        : Errors.fromThrowable(target, "stream of job '" + jobName + "'", error);
    return new Retry(backoff.nextDelayMillis(), cause, true);
  }

  /** INVALID_ARGUMENT or NOT_FOUND: the job's config is refused, or the job does not exist. */
  static boolean refusesTheJob(Throwable error) {
    Status.Code code = Status.fromThrowable(error).getCode();
    return code == Status.Code.INVALID_ARGUMENT || code == Status.Code.NOT_FOUND;
  }

  /** How a stream end reads in a log: {@code the sidecar ended it}, or the status. */
  static String describe(Throwable error) {
    if (error == null) {
      return "the sidecar ended it";
    }
    Status status = Status.fromThrowable(error);
    return status.getCode() + (status.getDescription() == null ? "" : ": " + status.getDescription());
  }

  private ShardcarException subscribeError(Throwable error) {
    String what = "subscribe to job '" + jobName + "'";
    return error != null
        ? Errors.fromThrowable(target, what, error)
        : new SidecarUnavailableException(target,
            what + ": the sidecar ended the stream before registering the worker", null);
  }
}
