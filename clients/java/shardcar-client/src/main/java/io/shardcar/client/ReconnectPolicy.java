package io.shardcar.client;

import io.grpc.Status;
import java.time.Duration;

/**
 * What a registration does once its stream has ended while it still runs, decided without I/O
 * (owned by {@link RegistrationState}, which asks it only when neither a {@code Shutdown} nor a
 * close already stops the registration):
 *
 * <ul>
 *   <li><b>Before the first registration</b> (no {@code Assignment} seen yet, so
 *       {@code register()} has not returned): a transient failure ({@link Errors#isTransient}:
 *       UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED; a failure to connect is an
 *       UNAVAILABLE) is tried again after the backoff until the connect timeout, counted from the
 *       first subscription, has passed. Any other end is fatal: another status (an invalid
 *       configuration, an unknown job, an instance id already live, ...), a transient one after
 *       the deadline, or the sidecar ending the stream without an error before registering the
 *       worker. {@code register()} throws the fatal error.
 *   <li><b>After it</b>: whatever ended the stream, subscribe again after the backoff, for ever.
 * </ul>
 *
 * <p>The backoff doubles from its initial delay up to its maximum, with ±20 % jitter, and starts
 * over at every {@code Registered}.
 */
final class ReconnectPolicy {
  /** What to do: {@link Retry} or {@link GiveUp}. */
  sealed interface Decision permits Retry, GiveUp {}

  /**
   * Subscribe again in {@code delayMillis}. {@code cause}: what ended the stream;
   * {@code disconnected}: a registered worker lost its stream (not a first subscription failing).
   */
  record Retry(long delayMillis, ShardcarException cause, boolean disconnected) implements Decision {}

  /** Stop the registration: its first subscription failed with {@code error}. */
  record GiveUp(ShardcarException error) implements Decision {}

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

  /** The defaults of {@link ShardcarWorker.Builder} (connect timeout 30 s, backoff 200 ms to 5 s). */
  static ReconnectPolicy defaults(String jobName) {
    return new ReconnectPolicy(ShardcarWorker.DEFAULT_TARGET, jobName, Duration.ofSeconds(30),
        new Backoff(Duration.ofMillis(200), Duration.ofSeconds(5)));
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

  /**
   * The stream ended at {@code now}: cleanly ({@code error} null: the sidecar ended it) or with
   * {@code error} (a gRPC status; a connection that could not be made is UNAVAILABLE).
   */
  Decision afterStreamEnd(Throwable error, long now) {
    if (!firstRegistrationDone) {
      if (error != null && Errors.isTransient(error) && now - firstDeadline < 0) {
        return new Retry(backoff.nextDelayMillis(), subscribeError(error), false);
      }
      return new GiveUp(subscribeError(error));
    }
    ShardcarException cause = error == null
        ? new SidecarUnavailableException(target, "the sidecar ended the stream of job '" + jobName + "'", null)
        : Errors.fromThrowable(target, "stream of job '" + jobName + "'", error);
    return new Retry(backoff.nextDelayMillis(), cause, true);
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
