package io.shardcar.client;

import io.grpc.ManagedChannel;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.shardcar.v1.Lease;
import io.shardcar.v1.SubscribeRequest;
import io.shardcar.v1.Trigger;
import io.shardcar.v1.WorkerEvent;
import io.shardcar.v1.WorkerGrpc;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One job subscribed by a {@link ShardcarWorker}: the stream of events from the sidecar, the
 * handler runs it causes, their answers, the lease that bounds them, and reconnection.
 *
 * <p>All state changes happen on one event thread per registration; gRPC callbacks, timers and
 * finished handler runs post to it. Handlers run on a bounded pool of item threads.
 *
 * <p>Rules it enforces (DESIGN.md §1, §3): work runs only while the latest {@code Lease} is valid
 * ({@code valid_for} counted from receipt); when it runs out, or a {@code Revoke} names an item, or
 * the stream is lost, the affected handler threads are interrupted and their answers never sent.
 * Triggers that arrive without a valid lease are held until a renewal. After a reconnect, nothing
 * from before it is answered.
 */
public final class JobRegistration implements AutoCloseable {
  /** Where a registration is in its life. */
  public enum State {
    /** The first subscription is being made. */
    CONNECTING,
    /** Registered on a live stream. */
    ACTIVE,
    /** The stream was lost; a new one is being made. */
    RECONNECTING,
    /** Closed by the worker, by a sidecar {@code Shutdown}, or the first subscription failed. */
    CLOSED
  }

  private static final System.Logger LOG = System.getLogger(JobRegistration.class.getName());
  private static final int MAX_ERROR_TEXT = 8192;

  private final Settings settings;
  private final ManagedChannel channel;
  private final WorkerGrpc.WorkerStub stub;
  private final Answers answers;
  private final String jobName;
  private final JobConfig config;
  private final JobHandler handler;
  private final WorkerListener listener;
  private final Runnable onTerminated;
  private final ScheduledExecutorService events;
  private final ThreadPoolExecutor items;
  private final Backoff backoff;
  private final CompletableFuture<Void> firstRegistration = new CompletableFuture<>();
  private final CompletableFuture<Void> terminated = new CompletableFuture<>();

  // Confined to the event thread.
  private int generation;
  private ClientCallStreamObserver<SubscribeRequest> call;
  private long connectDeadlineNanos;
  private boolean leaseValid;
  private long leaseDeadlineNanos;
  private ScheduledFuture<?> leaseTimer;
  private final Map<String, ItemRun> runs = new LinkedHashMap<>();
  private final List<ShardingContext> held = new ArrayList<>();
  private int answersInFlight;
  private boolean shutdownReceived;
  private boolean closing;
  private String closeReason = "";

  // Published for other threads.
  private volatile State state = State.CONNECTING;
  private volatile Thread eventThread;
  private volatile String instanceId = "";
  private volatile JobConfig effectiveConfig;
  private volatile Assignment assignment = Assignment.NONE;
  private volatile long publishedLeaseDeadline;
  private volatile boolean publishedLeaseValid;

  JobRegistration(
      Settings settings,
      ManagedChannel channel,
      String jobName,
      JobConfig config,
      JobHandler handler,
      Runnable onTerminated) {
    this.settings = settings;
    this.channel = channel;
    this.stub = WorkerGrpc.newStub(channel);
    this.answers = new Answers(stub, settings);
    this.jobName = jobName;
    this.config = config;
    this.effectiveConfig = config;
    this.handler = handler;
    this.listener = settings.listener();
    this.onTerminated = onTerminated;
    this.backoff = new Backoff(settings.backoffInitial(), settings.backoffMax());
    java.util.concurrent.ThreadFactory eventThreads = namedDaemon("shardcar-" + jobName + "-events");
    this.events = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = eventThreads.newThread(r);
      eventThread = t;
      return t;
    });
    this.items = new ThreadPoolExecutor(
        settings.itemConcurrency(),
        settings.itemConcurrency(),
        30,
        TimeUnit.SECONDS,
        new LinkedBlockingQueue<>(),
        namedDaemon("shardcar-" + jobName + "-item"));
    this.items.allowCoreThreadTimeOut(true);
  }

  /** Starts subscribing and waits for the first {@code Registered} (or a definite failure). */
  void start() {
    events.execute(() -> {
      connectDeadlineNanos = System.nanoTime() + settings.connectTimeout().toNanos();
      connect();
    });
    long waitMillis = settings.connectTimeout().toMillis() + 5_000;
    try {
      firstRegistration.get(waitMillis, TimeUnit.MILLISECONDS);
    } catch (ExecutionException e) {
      close();
      throw Errors.fromThrowable(settings.target(), "subscribe to job '" + jobName + "'", e.getCause());
    } catch (TimeoutException e) {
      close();
      throw new SidecarUnavailableException(
          settings.target(),
          "subscribe to job '" + jobName + "': no answer from the shardcar sidecar at " + settings.target()
              + " within " + waitMillis + " ms",
          e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      close();
      throw new ShardcarException("interrupted while subscribing to job '" + jobName + "'", e);
    }
  }

  public String getJobName() {
    return jobName;
  }

  /** The instance id the sidecar gave this worker ({@code {ip}@-@{pid}} unless overridden). */
  public String getInstanceId() {
    return instanceId;
  }

  /** The job's configuration as the sidecar uses it (ZooKeeper's, when the job already existed). */
  public JobConfig getEffectiveConfig() {
    return effectiveConfig;
  }

  /** The latest assignment, {@link Assignment#NONE} before the first. */
  public Assignment getAssignment() {
    return assignment;
  }

  public State getState() {
    return state;
  }

  /**
   * Whether the latest lease from the sidecar is still valid, that is, whether this worker may
   * work now. False before the first lease, after it ran out unrenewed, and while reconnecting.
   */
  public boolean hasValidLease() {
    return publishedLeaseValid && publishedLeaseDeadline - System.nanoTime() > 0;
  }

  /**
   * Waits until this registration is closed.
   *
   * @return false if it is still open after {@code timeout}
   */
  public boolean awaitClosed(Duration timeout) throws InterruptedException {
    try {
      terminated.get(timeout.toMillis(), TimeUnit.MILLISECONDS);
      return true;
    } catch (TimeoutException e) {
      return false;
    } catch (ExecutionException e) {
      return true;
    }
  }

  /**
   * Stops taking work, lets running items finish and answer for up to the worker's shutdown grace
   * period (then interrupts them, unanswered), ends the stream so the sidecar removes the
   * instance, and releases the threads. Idempotent; never throws.
   */
  @Override
  public void close() {
    if (terminated.isDone()) {
      return;
    }
    try {
      events.execute(() -> beginClose("closed by the worker"));
    } catch (RejectedExecutionException e) {
      return;
    }
    if (Thread.currentThread() == eventThread) {
      return; // called from a listener: the close completes once this callback returns
    }
    long graceMillis = settings.shutdownGracePeriod().toMillis();
    try {
      terminated.get(graceMillis + settings.answerTimeout().toMillis() + 2_000, TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (ExecutionException | TimeoutException e) {
      LOG.log(System.Logger.Level.WARNING, "job {0}: close did not finish in time", jobName);
    }
  }

  CompletableFuture<Void> terminationFuture() {
    return terminated;
  }

  // ---- event thread -------------------------------------------------------------------------

  private void connect() {
    if (closing) {
      return;
    }
    generation++;
    final int gen = generation;
    shutdownReceived = false;
    if (gen > 1) {
      // The channel keeps its own (long) reconnect backoff; ours decides when to try.
      channel.resetConnectBackoff();
    }
    SubscribeRequest.Builder request = SubscribeRequest.newBuilder()
        .setJobName(jobName)
        .setPid((int) settings.pid())
        .setInstanceId(settings.instanceId())
        .putAllLabels(settings.labels());
    if (config != null) {
      request.setConfig(ProtoMapping.toProto(config)).setOverwrite(config.isOverwrite());
    }
    stub.subscribe(request.build(), new ClientResponseObserver<SubscribeRequest, WorkerEvent>() {
      @Override
      public void beforeStart(ClientCallStreamObserver<SubscribeRequest> requestStream) {
        call = requestStream; // runs synchronously inside subscribe(), on the event thread
      }

      @Override
      public void onNext(WorkerEvent event) {
        long receivedAt = System.nanoTime();
        post(() -> onEvent(gen, event, receivedAt));
      }

      @Override
      public void onError(Throwable t) {
        post(() -> onStreamEnd(gen, t));
      }

      @Override
      public void onCompleted() {
        post(() -> onStreamEnd(gen, null));
      }
    });
  }

  private void onEvent(int gen, WorkerEvent event, long receivedAt) {
    if (gen != generation || terminated.isDone()) {
      return;
    }
    switch (event.getEventCase()) {
      case REGISTERED -> {
        instanceId = event.getRegistered().getInstanceId();
        if (event.getRegistered().hasConfig()) {
          try {
            effectiveConfig = ProtoMapping.fromProto(event.getRegistered().getConfig());
          } catch (ShardcarException e) {
            LOG.log(System.Logger.Level.WARNING, "job {0}: unreadable effective config: {1}", jobName, e.getMessage());
          }
        }
        state = closing ? state : State.ACTIVE;
        backoff.reset();
        LOG.log(System.Logger.Level.INFO, "job {0}: registered as {1} (stream {2})", jobName, instanceId, gen);
        notify(() -> listener.onRegistered(jobName, instanceId, effectiveConfig));
      }
      case ASSIGNMENT -> {
        assignment = ProtoMapping.fromProto(event.getAssignment());
        Assignment a = assignment;
        notify(() -> listener.onAssignment(jobName, a));
        // register() returns once the current assignment is known (it follows Registered).
        firstRegistration.complete(null);
      }
      case LEASE -> {
        onLease(gen, event.getLease(), receivedAt);
        firstRegistration.complete(null);
      }
      case TRIGGER -> onTrigger(gen, event.getTrigger());
      case REVOKE -> onRevoke(new HashSet<>(event.getRevoke().getItemsList()), event.getRevoke().getReason());
      case SHUTDOWN -> {
        shutdownReceived = true;
        String reason = event.getShutdown().getReason();
        LOG.log(System.Logger.Level.INFO, "job {0}: sidecar shutdown: {1}", jobName, reason);
        dropHeld("sidecar shutdown: " + reason);
        notify(() -> listener.onShutdown(jobName, reason));
      }
      default -> LOG.log(System.Logger.Level.DEBUG, "job {0}: ignoring unknown event", jobName);
    }
  }

  private void onLease(int gen, Lease lease, long receivedAt) {
    long validNanos = TimeUnit.SECONDS.toNanos(lease.getValidFor().getSeconds()) + lease.getValidFor().getNanos();
    leaseDeadlineNanos = receivedAt + validNanos;
    if (leaseTimer != null) {
      leaseTimer.cancel(false);
    }
    long remaining = leaseDeadlineNanos - System.nanoTime();
    if (remaining <= 0) {
      expireLease();
      return;
    }
    boolean wasValid = leaseValid;
    leaseValid = true;
    publishedLeaseDeadline = leaseDeadlineNanos;
    publishedLeaseValid = true;
    leaseTimer = events.schedule(() -> checkLease(gen), remaining, TimeUnit.NANOSECONDS);
    if (!wasValid && !held.isEmpty() && !closing) {
      List<ShardingContext> start = new ArrayList<>(held);
      held.clear();
      LOG.log(System.Logger.Level.INFO, "job {0}: lease renewed, starting {1} held item(s)", jobName, start.size());
      start.forEach(ctx -> submit(gen, ctx));
    }
  }

  private void checkLease(int gen) {
    if (gen != generation || !leaseValid) {
      return;
    }
    long remaining = leaseDeadlineNanos - System.nanoTime();
    if (remaining <= 0) {
      expireLease();
    } else {
      leaseTimer = events.schedule(() -> checkLease(gen), remaining, TimeUnit.NANOSECONDS);
    }
  }

  private boolean leaseValidNow() {
    if (leaseValid && leaseDeadlineNanos - System.nanoTime() <= 0) {
      expireLease();
    }
    return leaseValid;
  }

  private void expireLease() {
    if (!leaseValid && runs.isEmpty()) {
      return;
    }
    leaseValid = false;
    publishedLeaseValid = false;
    LOG.log(System.Logger.Level.WARNING,
        "job {0}: lease ran out without renewal; stopping {1} running item(s) until the sidecar renews it",
        jobName, runs.size());
    notify(() -> listener.onLeaseExpired(jobName));
    cancelRuns(run -> true, "lease ran out without renewal");
    maybeFinishClose();
  }

  private void onTrigger(int gen, Trigger trigger) {
    List<ShardingContext> contexts = ProtoMapping.contexts(jobName, trigger);
    if (closing || shutdownReceived) {
      LOG.log(System.Logger.Level.INFO, "job {0}: ignoring trigger {1} while shutting down",
          jobName, trigger.getExecutionId());
      return;
    }
    if (!leaseValidNow()) {
      LOG.log(System.Logger.Level.INFO, "job {0}: holding trigger {1} until the lease is renewed",
          jobName, trigger.getExecutionId());
      held.addAll(contexts);
      return;
    }
    contexts.forEach(ctx -> submit(gen, ctx));
  }

  private void submit(int gen, ShardingContext ctx) {
    ItemRun run = new ItemRun(gen, ctx);
    runs.put(run.key, run);
    try {
      run.future = items.submit(() -> runItem(run));
    } catch (RejectedExecutionException e) {
      runs.remove(run.key);
    }
  }

  /** Item thread: runs the handler, then hands the outcome back to the event thread. */
  private void runItem(ItemRun run) {
    String failure = null;
    try {
      handler.execute(run.ctx);
    } catch (Throwable t) {
      failure = describe(t);
    }
    String outcome = failure;
    post(() -> onItemFinished(run, outcome));
  }

  private void onItemFinished(ItemRun run, String failure) {
    if (run.cancelled) {
      return; // its answer was given up when it was cancelled
    }
    runs.remove(run.key);
    if (run.generation != generation) {
      cancelled(run, "the stream it came from is gone");
    } else if (!leaseValidNow()) {
      cancelled(run, "lease ran out without renewal");
    } else {
      answer(run, failure);
    }
    maybeFinishClose();
  }

  private void answer(ItemRun run, String failure) {
    answersInFlight++;
    String execution = run.ctx.getExecutionId();
    int item = run.ctx.getShardingItem();
    answers.send(instanceId, execution, item, failure, refused -> {
      if (refused != null) {
        LOG.log(System.Logger.Level.WARNING, "job {0}: {1}", jobName, refused.getMessage());
      }
      post(() -> answered(execution, item, failure, refused));
    });
  }

  private void answered(String execution, int item, String failure, ShardcarException refused) {
    answersInFlight--;
    notify(() -> listener.onAnswered(jobName, execution, item, failure, refused));
    maybeFinishClose();
  }

  private void onRevoke(Set<Integer> revoked, String reason) {
    LOG.log(System.Logger.Level.INFO, "job {0}: items {1} revoked: {2}", jobName, revoked, reason);
    cancelRuns(run -> revoked.contains(run.ctx.getShardingItem()), "revoked: " + reason);
    for (Iterator<ShardingContext> it = held.iterator(); it.hasNext(); ) {
      ShardingContext ctx = it.next();
      if (revoked.contains(ctx.getShardingItem())) {
        it.remove();
        notify(() -> listener.onCancelled(jobName, ctx.getExecutionId(), ctx.getShardingItem(), "revoked: " + reason));
      }
    }
    maybeFinishClose();
  }

  private void onStreamEnd(int gen, Throwable error) {
    if (gen != generation || terminated.isDone()) {
      return;
    }
    call = null;
    if (closing) {
      maybeFinishClose();
      return;
    }
    if (!firstRegistration.isDone()) {
      if (error != null && Errors.isTransient(error) && System.nanoTime() - connectDeadlineNanos < 0) {
        events.schedule(this::connect, backoff.nextDelayMillis(), TimeUnit.MILLISECONDS);
      } else {
        firstRegistration.completeExceptionally(error != null ? error
            : new SidecarUnavailableException(settings.target(),
                "subscribe to job '" + jobName + "': the sidecar ended the stream before registering the worker", null));
        beginClose("the first subscription failed");
      }
      return;
    }
    if (shutdownReceived) {
      // Remote shutdown or drain: running items may finish and answer while the lease lasts.
      beginClose("the sidecar shut the worker down");
      return;
    }
    ShardcarException cause = error == null
        ? new SidecarUnavailableException(settings.target(), "the sidecar ended the stream of job '" + jobName + "'", null)
        : Errors.fromThrowable(settings.target(), "stream of job '" + jobName + "'", error);
    leaseValid = false;
    publishedLeaseValid = false;
    if (leaseTimer != null) {
      leaseTimer.cancel(false);
    }
    cancelRuns(run -> true, "the stream to the sidecar was lost");
    dropHeld("the stream to the sidecar was lost");
    long delay = backoff.nextDelayMillis();
    state = State.RECONNECTING;
    LOG.log(System.Logger.Level.WARNING, "job {0}: {1}; reconnecting in {2} ms", jobName, cause.getMessage(), delay);
    notify(() -> listener.onDisconnected(jobName, cause, delay));
    events.schedule(this::connect, delay, TimeUnit.MILLISECONDS);
  }

  private void beginClose(String reason) {
    if (closing) {
      return;
    }
    closing = true;
    closeReason = reason;
    dropHeld(reason);
    events.schedule(this::forceClose, settings.shutdownGracePeriod().toMillis(), TimeUnit.MILLISECONDS);
    maybeFinishClose();
  }

  private void forceClose() {
    cancelRuns(run -> true, closeReason + " (shutdown grace period over)");
    finish();
  }

  private void maybeFinishClose() {
    if (closing && runs.isEmpty() && answersInFlight == 0) {
      finish();
    }
  }

  private void finish() {
    if (terminated.isDone()) {
      return;
    }
    if (call != null) {
      call.cancel(closeReason, null);
      call = null;
    }
    if (leaseTimer != null) {
      leaseTimer.cancel(false);
    }
    state = State.CLOSED;
    publishedLeaseValid = false;
    items.shutdownNow();
    firstRegistration.completeExceptionally(new WorkerClosedException("registration of job '" + jobName + "' closed: " + closeReason));
    LOG.log(System.Logger.Level.INFO, "job {0}: registration closed: {1}", jobName, closeReason);
    onTerminated.run();
    terminated.complete(null);
    events.shutdown();
  }

  private void cancelRuns(java.util.function.Predicate<ItemRun> which, String reason) {
    List<ItemRun> victims = new ArrayList<>();
    for (ItemRun run : runs.values()) {
      if (which.test(run)) {
        victims.add(run);
      }
    }
    for (ItemRun run : victims) {
      runs.remove(run.key);
      run.cancelled = true;
      run.ctx.cancel();
      if (run.future != null) {
        run.future.cancel(true);
      }
      cancelled(run, reason);
    }
  }

  private void dropHeld(String reason) {
    for (ShardingContext ctx : held) {
      notify(() -> listener.onCancelled(jobName, ctx.getExecutionId(), ctx.getShardingItem(), reason));
    }
    held.clear();
  }

  private void cancelled(ItemRun run, String reason) {
    LOG.log(System.Logger.Level.INFO, "job {0}: item {1} of execution {2} stopped, not answered: {3}",
        jobName, run.ctx.getShardingItem(), run.ctx.getExecutionId(), reason);
    notify(() -> listener.onCancelled(jobName, run.ctx.getExecutionId(), run.ctx.getShardingItem(), reason));
  }

  private void notify(Runnable callback) {
    try {
      callback.run();
    } catch (RuntimeException e) {
      LOG.log(System.Logger.Level.WARNING, "job " + jobName + ": listener failed", e);
    }
  }

  private void post(Runnable task) {
    try {
      events.execute(task);
    } catch (RejectedExecutionException e) {
      // closed: nothing left to update
    }
  }

  static String describe(Throwable t) {
    StringBuilder text = new StringBuilder(t.toString());
    for (Throwable cause = t.getCause(); cause != null && cause != t; cause = cause.getCause()) {
      text.append("; caused by ").append(cause);
      if (text.length() > MAX_ERROR_TEXT) {
        break;
      }
    }
    return text.length() > MAX_ERROR_TEXT ? text.substring(0, MAX_ERROR_TEXT) : text.toString();
  }

  private static java.util.concurrent.ThreadFactory namedDaemon(String prefix) {
    AtomicInteger counter = new AtomicInteger();
    return r -> {
      Thread t = new Thread(r, prefix + "-" + counter.incrementAndGet());
      t.setDaemon(true);
      return t;
    };
  }
}
