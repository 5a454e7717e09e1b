package io.shardcar.client;

import io.shardcar.v1.Lease;
import io.shardcar.v1.ShutdownKind;
import io.shardcar.v1.SubscribeResponse;
import io.shardcar.v1.Trigger;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.Set;
import java.util.concurrent.TimeUnit;

/**
 * The worker contract of one registration ({@code proto/shardcar/v1/shardcar.proto}, rules 1-5),
 * decided without I/O: it takes inputs (a stream opened or ended, its events, a handler that
 * returned, the result of a call, a handler asking whether it is cancelled, time passing) and
 * returns outputs (start an item, cancel one, send a call, stop), which {@link JobRegistration}
 * performs. Every case of {@code clients/protocol-cases/cases.json} runs against it with a fake
 * clock ({@code ProtocolCasesTest}).
 *
 * <p>What it decides:
 *
 * <ul>
 *   <li><b>Leases</b> (rule 1). A lease is valid until the earlier of {@code valid_for} after its
 *       receipt (monotonic clock) and {@code expires_at} (wall clock); one read at or after its
 *       {@code expires_at} is void. Every input first compares the clock with the deadline, so a
 *       lapse is seen by whichever input comes first after it: the timer's {@link #tick()}, a
 *       handler's {@link #check}, or the next event (before that event is applied, so a renewal
 *       that arrives after a gap never bridges it). A lapse cancels every running item; each is
 *       declined once its handler returns and never answered.
 *   <li><b>Triggers</b> (rule 2) start their items only under a valid lease; otherwise, and after a
 *       {@code Shutdown} or {@link #close}, they are declined at once, never queued. An item of an
 *       execution runs once: a repeated trigger starts nothing.
 *   <li><b>Answers</b> (rule 3) belong to the stream that delivered the trigger. A call that failed
 *       in transport is sent again with backoff while that stream is open and dropped once it has
 *       ended; the sidecar's refusal (e.g. {@code FAILED_PRECONDITION}) is final. A transport
 *       failure is never reported as the sidecar's answer ({@link Dropped}, not {@link Answered}).
 *   <li><b>Revoke</b> (rule 4) cancels those items; each is declined once its handler returns.
 *   <li><b>Shutdown</b> (rule 5): new triggers are declined, running items finish and are answered
 *       while the lease lasts. Once the sidecar has ended the stream, a remote shutdown
 *       ({@code SHUTDOWN_KIND_REMOTE}: an operator's decision) stops the registration; a drain (the
 *       sidecar restarts; {@code SHUTDOWN_KIND_DRAIN}, or a sidecar that does not say) is followed
 *       by a {@link Reconnect} with the backoff, until the sidecar is back, unless
 *       {@code stopOnDrain} is on.
 *   <li><b>Resident jobs</b> ({@code resident}): every trigger is a hold of one item, which its
 *       handler runs until it is cancelled: by a {@code Revoke} or a lapse as any run, and also by
 *       {@link #close} and by {@code Shutdown} (a hold never finishes by itself, so it is given
 *       back at once for its next holder). A cancelled hold is declined; one whose handler returned
 *       by itself is answered {@code Complete}, one that threw {@code ReportFailure}. On a
 *       {@link #close}, though, a hold is given back by the end of the stream, which ends once
 *       every handler has returned (the sidecar releases the items of a stream its worker ended
 *       at once), and neither it nor a hold that arrives meanwhile is declined: a decline the
 *       sidecar did not ask for would only have it start the hold again on the same worker, after
 *       its restart backoff. A registration whose effective
 *       configuration ({@code Registered}) is not of its kind, resident or not, stops with an
 *       {@link InvalidJobConfigException} naming {@code resident}.
 *   <li><b>Reconnects and fatal errors</b> ({@link ReconnectPolicy}): every end of a stream while
 *       the registration still runs is decided in this order: after a {@link #close} it stops
 *       without an error; a fatal error (the sidecar refused the job, or the first subscription
 *       failed for good) stops it with a {@link Stop} carrying the {@linkplain Stop#fatal() error};
 *       after a remote {@code Shutdown} it stops (after a drain too with {@code stopOnDrain});
 *       otherwise {@link Reconnect} (subscribe again after a delay; after a drain as well).
 * </ul>
 *
 * <p>Not thread-safe: the driver serializes every call (one lock), and performs the outputs in the
 * order they are returned.
 */
final class RegistrationState {
  /** How long the first resend of a call that failed in transport waits; doubled per attempt. */
  static final Duration RESEND_INITIAL = Duration.ofMillis(100);
  /** The longest wait between two resends. */
  static final Duration RESEND_MAX = Duration.ofSeconds(2);
  /** How many recently seen (execution, item) pairs are remembered to ignore repeated triggers. */
  private static final int SEEN_LIMIT = 4096;

  static final String LEASE_RAN_OUT = "the lease ran out without renewal";
  static final String LEASE_VOID = "a lease renewal was read after its expires_at (the worker was paused)";
  static final String FIRST_SUBSCRIPTION_FAILED = "the first subscription failed";
  static final String JOB_REFUSED = "the sidecar refused the job (its config, or the job is gone)";
  static final String SHUT_DOWN = "the sidecar shut the worker down";

  /** The clocks the state reads at every input. */
  interface Clock {
    /** A monotonic reading in nanoseconds ({@link System#nanoTime()}), for {@code valid_for}. */
    long monotonicNanos();

    /** The host's wall clock in nanoseconds since the epoch, for {@code expires_at}. */
    long wallEpochNanos();

    Clock SYSTEM = new Clock() {
      @Override
      public long monotonicNanos() {
        return System.nanoTime();
      }

      @Override
      public long wallEpochNanos() {
        Instant now = Instant.now();
        return TimeUnit.SECONDS.toNanos(now.getEpochSecond()) + now.getNano();
      }
    };
  }

  /** The calls a worker makes for an item. */
  enum Rpc {
    COMPLETE,
    REPORT_FAILURE,
    DECLINE
  }

  /** One item of one execution delivered on stream {@code generation}. */
  record ItemKey(int generation, String executionId, int item) {}

  /** What the driver must do, in the order returned. */
  sealed interface Output permits Start, Cancel, Call, Reconnect, Stop, Notice {}

  /** Run this item's handler now (with {@code context}). */
  record Start(ItemKey key, ShardingContext context) implements Output {}

  /** Cancel this item's handler: interrupt its thread (its context reports cancelled already). */
  record Cancel(ItemKey key, String reason) implements Output {}

  /**
   * Send this call. {@code text} is the failure text of a {@code ReportFailure} or the reason of a
   * {@code Decline} (null for {@code Complete}). Report its result with {@link #callResult}.
   */
  record Call(long id, Rpc rpc, String instanceId, String executionId, List<Integer> items, String text)
      implements Output {}

  /**
   * The stream ended and the registration goes on: subscribe again (then {@link #streamOpened()})
   * in {@code delayMillis}. {@code cause}: what ended it; {@code disconnected}: a registered worker
   * lost its stream (tell the application), rather than a first subscription being tried again.
   */
  record Reconnect(long delayMillis, ShardcarException cause, boolean disconnected) implements Output {}

  /**
   * The registration is over: end the stream if it is still open and release the threads.
   * {@code bySidecar}: it followed the sidecar's {@code Shutdown}. {@code fatal}: it ended with
   * this error (the first subscription failed, and {@code register()} throws it; or the sidecar
   * refused the job after it); null otherwise. Calls in
   * flight are not sent again, but their results are still reported ({@link #hasCallsInFlight()}).
   */
  record Stop(String reason, boolean bySidecar, ShardcarException fatal) implements Output {}

  /** Something to tell the application ({@link WorkerListener}); no protocol effect. */
  sealed interface Notice extends Output
      permits Registered, Assigned, ShutdownReceived, LeaseExpired, Answered, Declined, Dropped {}

  record Registered(io.shardcar.v1.Registered registered) implements Notice {}

  record Assigned(io.shardcar.v1.Assignment assignment) implements Notice {}

  /** {@code Shutdown}; {@code drain}: of kind DRAIN (or unspecified), else REMOTE. */
  record ShutdownReceived(String reason, boolean drain) implements Notice {}

  record LeaseExpired(String reason) implements Notice {}

  /** The sidecar ruled on an answer: accepted ({@code refused} null) or refused it. */
  record Answered(String executionId, int item, String failure, ShardcarException refused) implements Notice {}

  /** The sidecar ruled on a decline: accepted ({@code refused} null) or refused it. */
  record Declined(String executionId, List<Integer> items, String reason, ShardcarException refused)
      implements Notice {}

  /** A call failed in transport and its stream has ended: it is void, the sidecar never ruled on it. */
  record Dropped(Rpc rpc, String executionId, List<Integer> items, String why) implements Notice {}

  /** The outcome of a call, as the driver saw it. */
  record CallResult(Kind kind, String detail, ShardcarException refusal) {
    enum Kind {
      /** The sidecar replied OK. */
      ACCEPTED,
      /** The call failed on its way: the sidecar neither accepted nor refused it. */
      TRANSPORT_FAILURE,
      /** The sidecar replied with an error status. */
      REFUSED
    }

    static CallResult accepted() {
      return new CallResult(Kind.ACCEPTED, "", null);
    }

    static CallResult transportFailure(String detail) {
      return new CallResult(Kind.TRANSPORT_FAILURE, detail, null);
    }

    static CallResult refused(ShardcarException refusal) {
      return new CallResult(Kind.REFUSED, refusal.getMessage(), refusal);
    }
  }

  /** The answer to {@link #check}, with what noticing a lapse at that moment requires. */
  record Check(boolean cancelled, List<Output> outputs) {}

  private enum Phase {
    /** Taking work. */
    RUNNING,
    /** {@link #close} was called: no new work; running items may finish until the grace is over. */
    CLOSING,
    /** {@link Stop} was returned: every input is ignored. */
    STOPPED
  }

  /** A handler that has not returned yet. {@code cancelReason} is set once it was cancelled. */
  private static final class Run {
    final ItemKey key;
    String cancelReason;

    Run(ItemKey key) {
      this.key = key;
    }
  }

  /** A call in flight ({@code callId} set) or waiting to be sent again ({@code resendAt}). */
  private static final class Answer {
    final Rpc rpc;
    final int generation;
    final String instanceId;
    final String executionId;
    final List<Integer> items;
    final String text;
    long callId;
    int failures;
    long resendAt;

    Answer(Rpc rpc, int generation, String instanceId, String executionId, List<Integer> items, String text) {
      this.rpc = rpc;
      this.generation = generation;
      this.instanceId = instanceId;
      this.executionId = executionId;
      this.items = List.copyOf(items);
      this.text = text;
    }
  }

  private final String jobName;
  private final Clock clock;
  private final boolean stopOnDrain;
  private final ReconnectPolicy reconnect;
  private final boolean resident;

  private Phase phase = Phase.RUNNING;
  private int generation;
  private boolean streamOpen;
  private String instanceId = "";
  /** The kind of the {@code Shutdown} received on the current stream; null before one. */
  private ShutdownKind shutdownKind;
  // The latest lease, when it is held: valid while the monotonic clock is before
  // leaseMonoDeadline and the wall clock before leaseWallDeadline.
  private boolean leaseHeld;
  private long leaseMonoDeadline;
  private long leaseWallDeadline;
  private final Map<ItemKey, Run> running = new LinkedHashMap<>();
  private final Set<String> seen = new LinkedHashSet<>();
  private final Map<Long, Answer> inFlight = new LinkedHashMap<>();
  private final List<Answer> resends = new ArrayList<>();
  private long nextCallId = 1;
  private String closeReason = "";
  private long graceDeadline;
  private boolean graceOver;
  private long hardDeadline;

  /**
   * @param stopOnDrain whether a drain stops the registration once its stream has ended, as a
   *     remote shutdown does; otherwise (the default) the driver subscribes again
   * @param reconnect when to subscribe again after a lost stream, and when to give up
   */
  RegistrationState(String jobName, Clock clock, boolean stopOnDrain, ReconnectPolicy reconnect) {
    this(jobName, clock, stopOnDrain, reconnect, false);
  }

  /**
   * @param resident whether this registration holds a resident job's items (see the class docs)
   */
  RegistrationState(String jobName, Clock clock, boolean stopOnDrain, ReconnectPolicy reconnect, boolean resident) {
    this.jobName = jobName;
    this.clock = clock;
    this.stopOnDrain = stopOnDrain;
    this.reconnect = reconnect;
    this.resident = resident;
  }

  /** With the reconnect policy of a worker built with the defaults ({@link ReconnectPolicy#defaults}). */
  RegistrationState(String jobName, Clock clock, boolean stopOnDrain) {
    this(jobName, clock, stopOnDrain, ReconnectPolicy.defaults(jobName));
  }

  // ---- inputs -------------------------------------------------------------------------------

  /** A new {@code Subscribe} call starts: everything of an earlier stream is over. */
  List<Output> streamOpened() {
    List<Output> out = new ArrayList<>();
    if (phase == Phase.STOPPED) {
      return out;
    }
    if (streamOpen) {
      advance(out);
      endStream("replaced by a new stream", true, out);
      if (phase == Phase.STOPPED) {
        return out;
      }
    }
    reconnect.streamOpened(now());
    generation++;
    streamOpen = true;
    instanceId = "";
    shutdownKind = null;
    leaseHeld = false;
    seen.clear();
    return out;
  }

  /**
   * Stream {@code gen} ended: the sidecar closed it ({@code error} null), or it failed with
   * {@code error} (a gRPC status: the connection broke or could not be made, the sidecar refused
   * the subscription, ...). The last output is the decision, in this order: a {@link Stop} after
   * {@link #close}; a {@link Stop} with the fatal error ({@link ReconnectPolicy#fatal}); a
   * {@link Stop} after a remote {@code Shutdown} (or a drain, with {@code stopOnDrain}); else
   * {@link Reconnect}, after a drain too.
   */
  List<Output> streamEnded(int gen, Throwable error) {
    List<Output> out = new ArrayList<>();
    if (phase == Phase.STOPPED || gen != generation || !streamOpen) {
      return out;
    }
    advance(out);
    // The order of clients/protocol-cases/README.md: a close stops without an error (endStream),
    // then the fatal errors, then a remote Shutdown, else a reconnect (after a drain too).
    endStream(ReconnectPolicy.describe(error), false, out);
    if (phase != Phase.RUNNING) {
      return out;
    }
    boolean registered = reconnect.isRegistered();
    ShardcarException fatal = reconnect.fatal(error, now());
    if (fatal != null) {
      phase = Phase.CLOSING;
      closeReason = registered ? JOB_REFUSED : FIRST_SUBSCRIPTION_FAILED;
      stop(closeReason, false, fatal, out);
    } else if (shutdownStops()) {
      stop(SHUT_DOWN, true, null, out);
    } else {
      ReconnectPolicy.Retry r = reconnect.retry(error);
      out.add(new Reconnect(r.delayMillis(), r.cause(), r.disconnected()));
    }
    return out;
  }

  /**
   * The current stream is over: its work is void; a close stops here, and (when
   * {@code shutdownStops}) a remote {@code Shutdown} received on it (see {@link #shutdownStops()}).
   */
  private void endStream(String why, boolean shutdownStops, List<Output> out) {
    streamOpen = false;
    leaseHeld = false;
    cancelRunning("the stream ended (" + why + ")", out);
    for (Answer a : resends) {
      out.add(new Dropped(a.rpc, a.executionId, a.items, "its stream ended before the sidecar could be reached"));
    }
    resends.clear();
    if (phase == Phase.CLOSING) {
      stop(closeReason, false, null, out);
    } else if (shutdownStops && shutdownStops()) {
      stop(SHUT_DOWN, true, null, out);
    }
  }

  /**
   * Whether the {@code Shutdown} received on the current stream ends the registration once the
   * stream has ended: a remote one always; a drain (DRAIN, or a sidecar that does not say) only
   * with {@code stopOnDrain}, since the sidecar is restarting and the worker subscribes again.
   */
  private boolean shutdownStops() {
    if (shutdownKind == null) {
      return false;
    }
    return shutdownKind == ShutdownKind.SHUTDOWN_KIND_REMOTE || stopOnDrain;
  }

  /** An event read from stream {@code gen}. */
  List<Output> onEvent(int gen, SubscribeResponse event) {
    List<Output> out = new ArrayList<>();
    if (phase == Phase.STOPPED || gen != generation || !streamOpen) {
      return out;
    }
    advance(out);
    switch (event.getEventCase()) {
      case REGISTERED -> {
        instanceId = event.getRegistered().getInstanceId();
        reconnect.registered();
        out.add(new Registered(event.getRegistered()));
        checkKind(event.getRegistered(), out);
      }
      case ASSIGNMENT -> {
        reconnect.assigned();
        out.add(new Assigned(event.getAssignment()));
      }
      case LEASE -> onLease(event.getLease(), out);
      case TRIGGER -> onTrigger(event.getTrigger(), out);
      case REVOKE -> {
        Set<Integer> items = new HashSet<>(event.getRevoke().getItemsList());
        String reason = "revoked: " + event.getRevoke().getReason();
        for (Run run : running.values()) {
          if (run.cancelReason == null && items.contains(run.key.item())) {
            cancel(run, reason, out);
          }
        }
      }
      case SHUTDOWN -> {
        shutdownKind = event.getShutdown().getKind();
        out.add(new ShutdownReceived(event.getShutdown().getReason(),
            shutdownKind != ShutdownKind.SHUTDOWN_KIND_REMOTE));
        if (resident) {
          cancelRunning("the sidecar sent Shutdown: the resident item is given back", out);
        }
      }
      default -> {
        // An event this client does not know: nothing to do.
      }
    }
    maybeStop(out);
    return out;
  }

  /**
   * The handler of {@code key} returned: {@code failure} is null when it returned normally, else
   * the text of what it threw.
   */
  List<Output> itemDone(ItemKey key, String failure) {
    List<Output> out = new ArrayList<>();
    if (phase == Phase.STOPPED) {
      return out;
    }
    advance(out);
    Run run = running.remove(key);
    if (run != null) {
      if (key.generation() != generation || !streamOpen) {
        // Its stream has ended: the execution is void, nothing is sent (it was cancelled then).
      } else if (resident && phase == Phase.CLOSING && run.cancelReason != null) {
        // Given back by the end of the stream, once every hold has returned (see the class docs).
      } else if (run.cancelReason != null || !leaseHeld) {
        String why = run.cancelReason != null ? run.cancelReason : LEASE_RAN_OUT;
        send(Rpc.DECLINE, key.executionId(), List.of(key.item()), "stopped: " + why, out);
      } else {
        send(failure == null ? Rpc.COMPLETE : Rpc.REPORT_FAILURE, key.executionId(), List.of(key.item()),
            failure, out);
      }
    }
    maybeStop(out);
    return out;
  }

  /** Whether the handler of {@code key} is cancelled now; noticing a lapse cancels every item. */
  Check check(ItemKey key) {
    List<Output> out = new ArrayList<>();
    if (phase == Phase.STOPPED) {
      return new Check(true, out);
    }
    advance(out);
    Run run = running.get(key);
    boolean cancelled = run == null || run.cancelReason != null;
    maybeStop(out);
    return new Check(cancelled, out);
  }

  /**
   * The result of call {@code callId}. After {@link Stop} only the sidecar's ruling on a call that
   * was in flight is reported (a stream can end before the reply to an answer it accepted arrives).
   */
  List<Output> callResult(long callId, CallResult result) {
    List<Output> out = new ArrayList<>();
    if (phase == Phase.STOPPED) {
      Answer a = inFlight.remove(callId);
      if (a != null && result.kind() == CallResult.Kind.TRANSPORT_FAILURE) {
        out.add(new Dropped(a.rpc, a.executionId, a.items,
            "it failed in transport (" + result.detail() + ") and the registration has stopped"));
      } else if (a != null) {
        ruled(a, result.refusal(), out);
      }
      return out;
    }
    advance(out);
    Answer a = inFlight.remove(callId);
    if (a != null) {
      switch (result.kind()) {
        case ACCEPTED -> ruled(a, null, out);
        case REFUSED -> ruled(a, result.refusal(), out);
        case TRANSPORT_FAILURE -> {
          if (a.generation == generation && streamOpen) {
            a.failures++;
            a.callId = 0;
            a.resendAt = now() + resendDelayNanos(a.failures);
            resends.add(a);
          } else {
            out.add(new Dropped(a.rpc, a.executionId, a.items,
                "it failed in transport (" + result.detail() + ") and its stream has ended"));
          }
        }
      }
    }
    maybeStop(out);
    return out;
  }

  /** Time passes: lapses, resends and close deadlines due by now. */
  List<Output> tick() {
    List<Output> out = new ArrayList<>();
    if (phase == Phase.STOPPED) {
      return out;
    }
    advance(out);
    maybeStop(out);
    return out;
  }

  /**
   * The worker stops this registration: no new work; running items may finish and be answered
   * for {@code grace}, then they are cancelled; the registration stops once nothing is left to
   * answer, or {@code answerGrace} after the grace at the latest.
   */
  List<Output> close(String reason, Duration grace, Duration answerGrace) {
    List<Output> out = new ArrayList<>();
    if (phase != Phase.RUNNING) {
      return out;
    }
    phase = Phase.CLOSING;
    closeReason = reason;
    graceDeadline = now() + grace.toNanos();
    hardDeadline = graceDeadline + answerGrace.toNanos();
    advance(out);
    if (resident) {
      cancelRunning(reason + ": the resident item is given back", out);
    }
    maybeStop(out);
    return out;
  }

  /**
   * A registration of the wrong kind for its job's effective configuration stops: a resident
   * handler would hold a cron job's runs forever, a plain one end every hold at once.
   */
  private void checkKind(io.shardcar.v1.Registered registered, List<Output> out) {
    if (!registered.hasConfig() || registered.getConfig().getResident() == resident) {
      return;
    }
    String why = resident
        ? "job '" + jobName + "' is not resident (its stored configuration says resident=false): register its "
            + "handler with register(), or subscribe with a resident JobConfig and overwrite(true) to make it resident"
        : "job '" + jobName + "' is resident (its stored configuration says resident=true): register its "
            + "handler with registerResident()";
    phase = Phase.CLOSING;
    closeReason = why;
    stop(why, false, new InvalidJobConfigException("resident", why, null), out);
  }

  // ---- reads --------------------------------------------------------------------------------

  /** The stream events are expected from (starts at 1 with the first {@link #streamOpened()}). */
  int generation() {
    return generation;
  }

  boolean isStreamOpen() {
    return streamOpen;
  }

  String instanceId() {
    return instanceId;
  }

  /** Whether the latest lease is valid now (no side effects: a lapse is acted on at the next input). */
  boolean leaseValid() {
    return leaseHeld && leaseValidAt(clock.monotonicNanos(), clock.wallEpochNanos());
  }

  boolean isClosing() {
    return phase != Phase.RUNNING;
  }

  /** Whether new triggers would be declined now: closing or stopped, or a {@code Shutdown} was received on this stream. */
  boolean isDecliningWork() {
    return phase != Phase.RUNNING || shutdownKind != null;
  }

  boolean isStopped() {
    return phase == Phase.STOPPED;
  }

  /** Whether a call was sent and its result not reported yet. */
  boolean hasCallsInFlight() {
    return !inFlight.isEmpty();
  }

  /** When (monotonic nanoseconds) {@link #tick()} is due next: a lapse, a resend or a close deadline. */
  OptionalLong nextWakeupNanos() {
    if (phase == Phase.STOPPED) {
      return OptionalLong.empty();
    }
    long next = Long.MAX_VALUE;
    if (leaseHeld) {
      long mono = clock.monotonicNanos();
      long wallLeft = leaseWallDeadline - clock.wallEpochNanos();
      next = Math.min(leaseMonoDeadline, mono + Math.max(0, wallLeft));
    }
    for (Answer a : resends) {
      next = Math.min(next, a.resendAt);
    }
    if (phase == Phase.CLOSING) {
      next = Math.min(next, graceOver ? hardDeadline : graceDeadline);
    }
    return next == Long.MAX_VALUE ? OptionalLong.empty() : OptionalLong.of(next);
  }

  // ---- rules --------------------------------------------------------------------------------

  private void onLease(Lease lease, List<Output> out) {
    long validFor = TimeUnit.SECONDS.toNanos(lease.getValidFor().getSeconds()) + lease.getValidFor().getNanos();
    long wallDeadline = lease.hasExpiresAt()
        ? TimeUnit.SECONDS.toNanos(lease.getExpiresAt().getSeconds()) + lease.getExpiresAt().getNanos()
        : Long.MAX_VALUE;
    long mono = clock.monotonicNanos();
    long wall = clock.wallEpochNanos();
    if (validFor <= 0 || wall - wallDeadline >= 0) {
      // The latest lease is void: no lease is held, whatever an earlier one said.
      lapse(LEASE_VOID, out);
      return;
    }
    leaseHeld = true;
    leaseMonoDeadline = mono + validFor;
    leaseWallDeadline = wallDeadline;
  }

  private void onTrigger(Trigger trigger, List<Output> out) {
    List<ShardingContext> fresh = new ArrayList<>();
    for (ShardingContext ctx : ProtoMapping.contexts(jobName, trigger)) {
      if (remember(ctx.getExecutionId() + "\u0000" + ctx.getShardingItem())) {
        fresh.add(ctx);
      }
    }
    if (fresh.isEmpty()) {
      return; // an item of an execution runs once
    }
    List<Integer> items = fresh.stream().map(ShardingContext::getShardingItem).toList();
    if (resident && phase == Phase.CLOSING) {
      return; // not run, nor declined: given back by the end of the stream (see the class docs)
    }
    if (phase != Phase.RUNNING || shutdownKind != null) {
      send(Rpc.DECLINE, trigger.getExecutionId(), items, "the worker is shutting down", out);
    } else if (!leaseHeld) {
      send(Rpc.DECLINE, trigger.getExecutionId(), items, "the trigger arrived without a valid lease", out);
    } else {
      for (ShardingContext ctx : fresh) {
        ItemKey key = new ItemKey(generation, ctx.getExecutionId(), ctx.getShardingItem());
        running.put(key, new Run(key));
        out.add(new Start(key, ctx));
      }
    }
  }

  /** Everything due by now: a lapse first, then the close grace, then resends. */
  private void advance(List<Output> out) {
    long mono = clock.monotonicNanos();
    if (leaseHeld && !leaseValidAt(mono, clock.wallEpochNanos())) {
      lapse(LEASE_RAN_OUT, out);
    }
    if (phase == Phase.CLOSING && !graceOver && mono - graceDeadline >= 0) {
      graceOver = true;
      cancelRunning(closeReason + " (drain timeout over)", out);
    }
    if (!resends.isEmpty()) {
      List<Answer> due = new ArrayList<>();
      for (Iterator<Answer> it = resends.iterator(); it.hasNext(); ) {
        Answer a = it.next();
        if (mono - a.resendAt >= 0) {
          it.remove();
          due.add(a);
        }
      }
      due.sort(Comparator.comparingLong(a -> a.resendAt));
      for (Answer a : due) {
        if (a.generation == generation && streamOpen) {
          emit(a, out);
        } else {
          out.add(new Dropped(a.rpc, a.executionId, a.items, "its stream ended before the sidecar could be reached"));
        }
      }
    }
  }

  private boolean leaseValidAt(long mono, long wall) {
    return mono - leaseMonoDeadline < 0 && wall - leaseWallDeadline < 0;
  }

  private void lapse(String reason, List<Output> out) {
    boolean was = leaseHeld;
    leaseHeld = false;
    cancelRunning(reason, out);
    if (was) {
      out.add(new LeaseExpired(reason));
    }
  }

  private void cancelRunning(String reason, List<Output> out) {
    for (Run run : running.values()) {
      if (run.cancelReason == null) {
        cancel(run, reason, out);
      }
    }
  }

  private void cancel(Run run, String reason, List<Output> out) {
    run.cancelReason = reason;
    out.add(new Cancel(run.key, reason));
  }

  private void send(Rpc rpc, String executionId, List<Integer> items, String text, List<Output> out) {
    emit(new Answer(rpc, generation, instanceId, executionId, items, text), out);
  }

  private void emit(Answer a, List<Output> out) {
    a.callId = nextCallId++;
    inFlight.put(a.callId, a);
    out.add(new Call(a.callId, a.rpc, a.instanceId, a.executionId, a.items, a.text));
  }

  private void ruled(Answer a, ShardcarException refused, List<Output> out) {
    if (a.rpc == Rpc.DECLINE) {
      out.add(new Declined(a.executionId, a.items, a.text, refused));
    } else {
      for (int item : a.items) {
        out.add(new Answered(a.executionId, item, a.rpc == Rpc.REPORT_FAILURE ? a.text : null, refused));
      }
    }
  }

  /** While closing: stops once nothing is left to answer, the stream is gone, or time is up. */
  private void maybeStop(List<Output> out) {
    if (phase != Phase.CLOSING) {
      return;
    }
    boolean idle = running.isEmpty() && inFlight.isEmpty() && resends.isEmpty();
    if (idle || !streamOpen || now() - hardDeadline >= 0) {
      stop(closeReason, false, null, out);
    }
  }

  private void stop(String reason, boolean bySidecar, ShardcarException fatal, List<Output> out) {
    cancelRunning(reason, out);
    for (Answer a : resends) {
      out.add(new Dropped(a.rpc, a.executionId, a.items, "the registration stopped: " + reason));
    }
    resends.clear();
    running.clear(); // calls in flight stay: their results are still reported
    leaseHeld = false;
    phase = Phase.STOPPED;
    out.add(new Stop(reason, bySidecar, fatal));
  }

  /** Records an (execution, item) pair; false when it was seen before on this stream. */
  private boolean remember(String pair) {
    if (!seen.add(pair)) {
      return false;
    }
    if (seen.size() > SEEN_LIMIT) {
      Iterator<String> oldest = seen.iterator();
      oldest.next();
      oldest.remove();
    }
    return true;
  }

  private long now() {
    return clock.monotonicNanos();
  }

  static long resendDelayNanos(int failures) {
    long delay = RESEND_INITIAL.toNanos() << Math.min(failures - 1, 20);
    return Math.min(delay, RESEND_MAX.toNanos());
  }
}
