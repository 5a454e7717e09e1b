package io.shardcar.client;

import io.grpc.ManagedChannel;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.shardcar.client.RegistrationState.ItemKey;
import io.shardcar.client.RegistrationState.Output;
import io.shardcar.v1.SubscribeRequest;
import io.shardcar.v1.SubscribeResponse;
import io.shardcar.v1.WorkerServiceGrpc;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import java.util.function.Function;

/**
 * One job subscribed by a {@link ShardcarWorker}: the driver of its {@link RegistrationState}.
 * The state decides every rule of the worker contract without I/O; this class feeds it (stream
 * events, finished handlers, call results, handlers asking {@link ShardingContext#isCancelled()},
 * timer ticks) and performs what it returns (runs and interrupts handlers, sends the calls, ends
 * the stream, subscribes again when and as often as the state's {@link ReconnectPolicy} says).
 *
 * <p>Threads: every input is applied under one lock, from whichever thread it comes (a gRPC
 * callback, an item thread, a timer), so a handler's {@code isCancelled()} compares the lease with
 * the clock at the moment of the call. The outputs are performed, in the order decided, on one
 * event thread per registration, which also runs the timer and every {@link WorkerListener}
 * callback. Handlers run on a bounded pool of item threads ({@code itemConcurrency}), shared by the
 * items of every execution that runs: with {@code maxConcurrentExecutions} above 1 the sidecar may
 * send a FAILOVER or MISFIRE trigger while an execution runs; its items are started at once, beside
 * the others, and each item is answered on its own. Nothing here keeps "the" current execution:
 * runs are keyed by (stream, execution, item), a revoke cancels the items it names, and a lapsed
 * lease, a lost stream or a close cancels the items of every execution. A resident job's
 * registration ({@link ShardcarWorker#registerResident}) runs each hold on a thread of its own
 * (a hold lasts until it is cancelled: a bounded pool would leave the items beyond its size held by
 * nobody) and sends no {@code max_concurrent_executions}.
 */
public final class JobRegistration implements AutoCloseable {
  /** Where a registration is in its life. */
  public enum State {
    /** The first subscription is being made. */
    CONNECTING,
    /** Registered on a live stream. */
    ACTIVE,
    /** The stream was lost, or the sidecar drained (restarts); a new one is being made. */
    RECONNECTING,
    /**
     * Closed by the worker, by a sidecar's remote {@code Shutdown} (or a drain, with
     * {@code stopOnDrain}), or by a fatal error ({@link JobRegistration#getFailure()}).
     */
    CLOSED
  }

  private static final System.Logger LOG = System.getLogger(JobRegistration.class.getName());

  private final Settings settings;
  private final ManagedChannel channel;
  private final WorkerServiceGrpc.WorkerServiceStub stub;
  private final Answers answers;
  private final String jobName;
  private final JobConfig config;
  private final JobHandler handler;
  private final boolean resident;
  private final WorkerListener listener;
  private final ItemTracing tracing;
  private final Consumer<Boolean> onTerminated;
  private final ScheduledThreadPoolExecutor events;
  private final ThreadPoolExecutor items;
  private final CompletableFuture<Void> firstRegistration = new CompletableFuture<>();
  private final CompletableFuture<Void> terminated = new CompletableFuture<>();

  /** Guards {@link #protocol}; held only while it decides (no I/O, no callbacks). */
  private final Object lock = new Object();
  private final RegistrationState protocol;

  /** Handlers started and not yet returned (removed by their item thread). */
  private final Map<ItemKey, ItemRun> runs = new ConcurrentHashMap<>();

  // Confined to the event thread.
  private ClientCallStreamObserver<SubscribeRequest> call;
  private int callGeneration;
  private ScheduledFuture<?> timer;
  private long timerAt;
  private RegistrationState.Stop stopped;

  // Published for other threads.
  private volatile State state = State.CONNECTING;
  private volatile Thread eventThread;
  private volatile String instanceId = "";
  private volatile JobConfig effectiveConfig;
  private volatile Assignment assignment = Assignment.NONE;
  /** The latest assignment of the current stream; null until its first (each stream gets its own). */
  private volatile Assignment streamAssignment;
  private volatile ShardcarException failure;

  JobRegistration(
      Settings settings,
      ManagedChannel channel,
      String jobName,
      JobConfig config,
      JobHandler handler,
      boolean resident,
      Consumer<Boolean> onTerminated) {
    this.settings = settings;
    this.resident = resident;
    this.channel = channel;
    this.stub = WorkerServiceGrpc.newStub(channel);
    this.answers = new Answers(stub, settings);
    this.jobName = jobName;
    this.config = config;
    this.effectiveConfig = config;
    this.handler = handler;
    this.listener = settings.listener();
    this.tracing = settings.tracing();
    this.onTerminated = onTerminated;
    this.protocol = new RegistrationState(jobName, RegistrationState.Clock.SYSTEM, settings.stopOnDrain(),
        new ReconnectPolicy(settings.target(), jobName, settings.connectTimeout(),
            new Backoff(settings.backoffInitial(), settings.backoffMax())),
        resident);
    ThreadFactory eventThreads = namedDaemon("shardcar-" + jobName + "-events");
    this.events = new ScheduledThreadPoolExecutor(1, r -> {
      Thread t = eventThreads.newThread(r);
      eventThread = t;
      return t;
    });
    this.events.setExecuteExistingDelayedTasksAfterShutdownPolicy(false);
    this.events.setRemoveOnCancelPolicy(true);
    if (resident) {
      this.items = new ThreadPoolExecutor(
          0, Integer.MAX_VALUE, 30, TimeUnit.SECONDS, new SynchronousQueue<>(),
          namedDaemon("shardcar-" + jobName + "-hold"));
    } else {
      this.items = new ThreadPoolExecutor(
          settings.itemConcurrency(),
          settings.itemConcurrency(),
          30,
          TimeUnit.SECONDS,
          new LinkedBlockingQueue<>(),
          namedDaemon("shardcar-" + jobName + "-item"));
      this.items.allowCoreThreadTimeOut(true);
    }
  }

  /** Starts subscribing and waits for the first {@code Registered} and assignment (or a definite failure). */
  void start() {
    post(this::connect);
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

  /**
   * The instance id the sidecar gave this worker: {@code {ip}@-@{pid}}, {@code {ip}@-@{pid}-{random}}
   * with an {@link ShardcarWorker#getInstanceSuffix() instance suffix}, or the explicit one.
   */
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
   * The error this registration stopped with, once it is {@link State#CLOSED}: the first
   * subscription's failure ({@code register()} threw it), or the sidecar's refusal of a later
   * subscription ({@link InvalidJobConfigException}: its configuration is refused;
   * {@link JobNotFoundException}: the job was removed), after which it does not reconnect. Empty
   * while it runs, and when it was closed or shut down without an error.
   *
   * @return the error, if it stopped with one
   */
  public Optional<ShardcarException> getFailure() {
    return Optional.ofNullable(failure);
  }

  /**
   * Whether the latest lease from the sidecar is valid now, that is, whether this worker may work:
   * until the earlier of {@code valid_for} after its receipt and its {@code expires_at}. False
   * before the first lease, after it ran out unrenewed, and while reconnecting.
   */
  public boolean hasValidLease() {
    synchronized (lock) {
      return protocol.leaseValid();
    }
  }

  /**
   * Whether this registration takes no new work now: a {@code Shutdown} from the sidecar was
   * received, or it is closing or closed (a streaming dataflow item stops fetching then).
   */
  boolean isStopping() {
    synchronized (lock) {
      return protocol.isDecliningWork();
    }
  }

  /**
   * Whether an assignment received since {@code ctx}'s trigger took its item from this instance
   * (ElasticJob's {@code isNeedSharding}, for a sidecar that reshards at once rather than at the next
   * fire): the current stream's latest assignment does not hold the item, and either the one the
   * trigger came under did (a second instance joined, {@code DisableJob}, ...), or the sharding
   * changed since (another epoch: for an item this instance does not own, a failover item). False
   * for a context this registration did not start, and before the current stream's first assignment.
   */
  boolean handedOver(ShardingContext ctx) {
    return handedOver(ctx.getShardingItem(), ctx.startAssignment(), streamAssignment);
  }

  /**
   * {@link #handedOver(ShardingContext)}: {@code then} is the assignment {@code item}'s trigger came
   * under ({@link Assignment#NONE} if none had arrived on its stream, null for an item not started
   * by a registration), {@code latest} the current stream's latest (null before its first).
   */
  static boolean handedOver(int item, Assignment then, Assignment latest) {
    if (then == null || latest == null || latest.itemNumbers().contains(item)) {
      return false;
    }
    return then.itemNumbers().contains(item) || latest.epoch() != then.epoch();
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
   * Stops taking work (new triggers are declined), lets running items finish and answer for up to
   * the worker's drain timeout (then interrupts them; each is declined once it returns),
   * ends the stream so the sidecar removes the instance, and releases the threads. Idempotent;
   * never throws.
   */
  @Override
  public void close() {
    if (terminated.isDone()) {
      return;
    }
    beginClose("closed by the worker", settings.drainTimeout());
    if (Thread.currentThread() == eventThread) {
      return; // called from a listener: the close completes once this callback returns
    }
    long waitMillis = settings.drainTimeout().toMillis() + settings.answerTimeout().toMillis() + 2_000;
    try {
      terminated.get(waitMillis, TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (ExecutionException | TimeoutException e) {
      LOG.log(System.Logger.Level.WARNING, "job {0}: close did not finish in time", jobName);
    }
  }

  CompletableFuture<Void> terminationFuture() {
    return terminated;
  }

  // ---- inputs (any thread) -------------------------------------------------------------------

  /** Applies one input under the lock and queues its outputs, then {@code then}, on the event thread. */
  private void input(Function<RegistrationState, List<Output>> step, Runnable then) {
    synchronized (lock) {
      List<Output> outputs = step.apply(protocol);
      // Queued under the lock: outputs are performed in the order they were decided.
      post(() -> {
        perform(outputs);
        if (then != null) {
          then.run();
        }
        rearm();
      });
    }
  }

  private void input(Function<RegistrationState, List<Output>> step) {
    input(step, null);
  }

  /** {@link ShardingContext#isCancelled()} of a started item: decided now, from the clock. */
  private boolean isCancelled(ItemKey key) {
    synchronized (lock) {
      RegistrationState.Check check = protocol.check(key);
      for (Output output : check.outputs()) {
        // Noted now, before the handler can act on the answer and return; the event thread
        // interrupts the handlers when it performs these outputs.
        if (output instanceof RegistrationState.Cancel cancel) {
          ItemRun run = runs.get(cancel.key());
          if (run != null) {
            run.noteCancelled(cancel.reason());
          }
        }
      }
      if (!check.outputs().isEmpty()) {
        post(() -> {
          perform(check.outputs());
          rearm();
        });
      }
      return check.cancelled();
    }
  }

  private void beginClose(String reason, Duration grace) {
    input(s -> s.close(reason, grace, settings.answerTimeout()));
  }

  // ---- event thread --------------------------------------------------------------------------

  private void connect() {
    synchronized (lock) {
      if (protocol.isClosing()) {
        return;
      }
      List<Output> outputs = protocol.streamOpened();
      int gen = protocol.generation();
      post(() -> {
        perform(outputs);
        subscribe(gen);
        rearm();
      });
    }
  }

  private void subscribe(int gen) {
    if (terminated.isDone()) {
      return;
    }
    if (gen > 1) {
      // The channel keeps its own (long) reconnect backoff; ours decides when to try.
      channel.resetConnectBackoff();
    }
    stub.subscribe(subscribeRequest(settings, jobName, config, resident), new ClientResponseObserver<SubscribeRequest, SubscribeResponse>() {
      @Override
      public void beforeStart(ClientCallStreamObserver<SubscribeRequest> requestStream) {
        call = requestStream; // runs synchronously inside subscribe(), on the event thread
        callGeneration = gen;
      }

      @Override
      public void onNext(SubscribeResponse event) {
        input(s -> s.onEvent(gen, event));
      }

      @Override
      public void onError(Throwable t) {
        streamEnded(gen, t);
      }

      @Override
      public void onCompleted() {
        streamEnded(gen, null);
      }
    });
  }

  /**
   * What every subscription of a registration sends, the first and each reconnect alike: the same
   * pid, explicit instance id or instance suffix, so the instance keeps its id; and the worker's
   * {@code max_concurrent_executions}, how many executions of the job it runs at once (its item
   * pool runs the items of all of them).
   */
  static SubscribeRequest subscribeRequest(Settings settings, String jobName, JobConfig config) {
    return subscribeRequest(settings, jobName, config, false);
  }

  /** {@link #subscribeRequest(Settings, String, JobConfig)}; a resident one sends no {@code max_concurrent_executions}. */
  static SubscribeRequest subscribeRequest(Settings settings, String jobName, JobConfig config, boolean resident) {
    SubscribeRequest.Builder request = SubscribeRequest.newBuilder()
        .setJobName(jobName)
        .setPid((int) settings.pid())
        .setInstanceId(settings.instanceId())
        .setInstanceSuffix(settings.instanceSuffix())
        .putAllLabels(settings.labels());
    if (!resident) {
      request.setMaxConcurrentExecutions(settings.maxConcurrentExecutions());
    }
    if (config != null) {
      request.setConfig(ProtoMapping.toProto(config)).setOverwrite(config.isOverwrite());
    }
    return request.build();
  }

  private void streamEnded(int gen, Throwable error) {
    synchronized (lock) {
      List<Output> outputs = protocol.streamEnded(gen, error);
      post(() -> {
        if (gen == callGeneration) {
          call = null; // it has ended: nothing to cancel
        }
        perform(outputs);
        rearm();
      });
    }
  }

  /** Subscribes again after the delay the state chose; a registered worker tells its listener. */
  private void reconnect(RegistrationState.Reconnect reconnect) {
    if (terminated.isDone()) {
      return;
    }
    if (reconnect.disconnected()) {
      state = State.RECONNECTING;
      LOG.log(System.Logger.Level.WARNING, "job {0}: {1}; reconnecting in {2} ms",
          jobName, reconnect.cause().getMessage(), reconnect.delayMillis());
      notify(() -> listener.onDisconnected(jobName, reconnect.cause(), reconnect.delayMillis()));
    }
    events.schedule(this::connect, reconnect.delayMillis(), TimeUnit.MILLISECONDS);
  }

  private void perform(List<Output> outputs) {
    for (Output output : outputs) {
      if (output instanceof RegistrationState.Start start) {
        startItem(start.key(), start.context());
      } else if (output instanceof RegistrationState.Cancel cancel) {
        ItemRun run = runs.get(cancel.key());
        if (run != null) {
          run.cancel(cancel.reason());
        }
        LOG.log(System.Logger.Level.INFO, "job {0}: item {1} of execution {2} stopped, not answered: {3}",
            jobName, cancel.key().item(), cancel.key().executionId(), cancel.reason());
        notify(() -> listener.onCancelled(jobName, cancel.key().executionId(), cancel.key().item(), cancel.reason()));
      } else if (output instanceof RegistrationState.Call c) {
        answers.send(c, result -> input(s -> s.callResult(c.id(), result)));
      } else if (output instanceof RegistrationState.Reconnect r) {
        reconnect(r);
      } else if (output instanceof RegistrationState.Stop stop) {
        finish(stop);
      } else if (output instanceof RegistrationState.Notice notice) {
        observe(notice);
      }
    }
    maybeTerminate();
  }

  private void startItem(ItemKey key, ShardingContext ctx) {
    ItemRun run = new ItemRun(key, ctx);
    ctx.attach(() -> isCancelled(key));
    // On the event thread, after every assignment the stream delivered before the trigger.
    Assignment current = streamAssignment;
    ctx.startAssignment(current != null ? current : Assignment.NONE);
    runs.put(key, run);
    try {
      items.execute(() -> runItem(run));
    } catch (RejectedExecutionException e) {
      runs.remove(key); // the pool is shut down: the registration is over
    }
  }

  /**
   * Item thread: runs the handler (unless it was cancelled before it started) in its span, if
   * traced, then reports, and ends the span with the answer decided.
   */
  private void runItem(ItemRun run) {
    String failure = null;
    ItemTracing.ItemSpan span = ItemTracing.ItemSpan.NONE;
    try {
      if (run.begin() && !isCancelled(run.key)) {
        span = run.traced(tracing.start(run.ctx, instanceId));
        ItemTracing.Scope scope = span.makeCurrent();
        try {
          handler.execute(run.ctx);
        } finally {
          scope.close();
        }
      }
    } catch (Throwable t) {
      failure = describe(t);
      span.failed(t);
    } finally {
      run.end();
      runs.remove(run.key);
    }
    RegistrationState.Call answer;
    synchronized (lock) {
      List<Output> outputs = protocol.itemDone(run.key, failure);
      answer = answerTo(run.key, outputs);
      // From now on the context tells how the item ended: answered (not cancelled), or not.
      boolean answered = answer != null && answer.rpc() != RegistrationState.Rpc.DECLINE;
      run.ctx.attach(answered ? () -> false : () -> true);
      post(() -> {
        perform(outputs);
        rearm();
      });
    }
    if (answer == null) {
      span.end(ItemTracing.Outcome.DECLINED, "not answered: its stream ended or the registration stopped");
    } else if (answer.rpc() == RegistrationState.Rpc.DECLINE) {
      span.end(ItemTracing.Outcome.DECLINED, answer.text());
    } else if (answer.rpc() == RegistrationState.Rpc.REPORT_FAILURE) {
      span.end(ItemTracing.Outcome.FAILED, failure);
    } else {
      span.end(ItemTracing.Outcome.COMPLETED, null);
    }
  }

  /** The answer decided for the item {@code key} among {@code outputs} (which may also hold resends of others). */
  private static RegistrationState.Call answerTo(ItemKey key, List<Output> outputs) {
    for (Output o : outputs) {
      if (o instanceof RegistrationState.Call c && c.executionId().equals(key.executionId())
          && c.items().contains(key.item())) {
        return c;
      }
    }
    return null;
  }

  private void observe(RegistrationState.Notice notice) {
    if (notice instanceof RegistrationState.Registered r) {
      streamAssignment = null; // a new stream: its own assignments follow
      instanceId = r.registered().getInstanceId();
      if (r.registered().hasConfig()) {
        try {
          effectiveConfig = ProtoMapping.fromProto(r.registered().getConfig());
        } catch (ShardcarException e) {
          LOG.log(System.Logger.Level.WARNING, "job {0}: unreadable effective config: {1}", jobName, e.getMessage());
        }
      }
      if (state != State.CLOSED) {
        state = State.ACTIVE;
      }
      LOG.log(System.Logger.Level.INFO, "job {0}: registered as {1}", jobName, instanceId);
      String id = instanceId;
      JobConfig effective = effectiveConfig;
      notify(() -> listener.onRegistered(jobName, id, effective));
    } else if (notice instanceof RegistrationState.Assigned a) {
      Assignment now = ProtoMapping.fromProto(a.assignment());
      assignment = now;
      streamAssignment = now;
      notify(() -> listener.onAssignment(jobName, now));
      firstRegistration.complete(null); // register() returns once the current assignment is known
    } else if (notice instanceof RegistrationState.ShutdownReceived s) {
      LOG.log(System.Logger.Level.INFO, "job {0}: sidecar shutdown ({1}): {2}", jobName,
          s.drain() ? "drain: subscribing again once the stream has ended" : "remote: the registration stops",
          s.reason());
      notify(() -> listener.onShutdown(jobName, s.reason()));
    } else if (notice instanceof RegistrationState.LeaseExpired e) {
      LOG.log(System.Logger.Level.WARNING, "job {0}: {1}; running items stop until the sidecar renews it",
          jobName, e.reason());
      notify(() -> listener.onLeaseExpired(jobName));
    } else if (notice instanceof RegistrationState.Answered a) {
      if (a.refused() != null) {
        LOG.log(System.Logger.Level.WARNING, "job {0}: {1}", jobName, a.refused().getMessage());
      }
      notify(() -> listener.onAnswered(jobName, a.executionId(), a.item(), a.failure(), a.refused()));
    } else if (notice instanceof RegistrationState.Declined d) {
      if (d.refused() != null) {
        LOG.log(System.Logger.Level.WARNING, "job {0}: {1}", jobName, d.refused().getMessage());
      } else {
        LOG.log(System.Logger.Level.INFO, "job {0}: declined item(s) {1} of execution {2}: {3}",
            jobName, d.items(), d.executionId(), d.reason());
      }
      notify(() -> listener.onDeclined(jobName, d.executionId(), d.items(), d.reason(), d.refused()));
    } else if (notice instanceof RegistrationState.Dropped d) {
      LOG.log(System.Logger.Level.INFO, "job {0}: {1} of item(s) {2} of execution {3} dropped: {4}",
          jobName, d.rpc(), d.items(), d.executionId(), d.why());
      notify(() -> listener.onAnswerDropped(jobName, d.rpc().name(), d.executionId(), d.items(), d.why()));
    }
  }

  /** Keeps one timer armed for the state's next deadline (a lapse, a resend, a close deadline). */
  private void rearm() {
    if (terminated.isDone()) {
      return;
    }
    OptionalLong next;
    synchronized (lock) {
      next = protocol.nextWakeupNanos();
    }
    if (next.isEmpty()) {
      if (timer != null) {
        timer.cancel(false);
        timer = null;
      }
      return;
    }
    if (timer != null && timerAt == next.getAsLong()) {
      return;
    }
    if (timer != null) {
      timer.cancel(false);
    }
    timerAt = next.getAsLong();
    long delay = Math.max(0, timerAt - System.nanoTime());
    timer = events.schedule(() -> {
      timer = null;
      input(RegistrationState::tick);
    }, delay, TimeUnit.NANOSECONDS);
  }

  /**
   * The state stopped: ends the stream, stops the handlers, and terminates once the calls still in
   * flight have their results (each has a deadline), so their rulings reach the listener.
   */
  private void finish(RegistrationState.Stop stop) {
    if (terminated.isDone() || stopped != null) {
      return;
    }
    stopped = stop;
    failure = stop.fatal();
    if (call != null) {
      call.cancel(stop.reason(), null); // the sidecar removes the instance at once
      call = null;
    }
    if (timer != null) {
      timer.cancel(false);
      timer = null;
    }
    state = State.CLOSED;
    items.shutdownNow();
    runs.values().forEach(run -> run.cancel(stop.reason()));
    // The first subscription's fatal error, or (once register() returned: a no-op) the close.
    firstRegistration.completeExceptionally(stop.fatal() != null ? stop.fatal()
        : new WorkerClosedException("registration of job '" + jobName + "' closed: " + stop.reason()));
    if (stop.fatal() != null) {
      LOG.log(System.Logger.Level.ERROR, "job {0}: registration closed, no reconnect: {1}: {2}",
          jobName, stop.reason(), stop.fatal().getMessage());
    } else {
      LOG.log(System.Logger.Level.INFO, "job {0}: registration closed: {1}", jobName, stop.reason());
    }
  }

  /** After {@link #finish}: the end, once no call is in flight. */
  private void maybeTerminate() {
    if (stopped == null || terminated.isDone()) {
      return;
    }
    synchronized (lock) {
      if (protocol.hasCallsInFlight()) {
        return;
      }
    }
    try {
      onTerminated.accept(stopped.bySidecar());
    } finally {
      terminated.complete(null);
      events.shutdown();
    }
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

  /**
   * The failure text reported for a handler that threw: its {@code toString()} and its causes, at
   * most {@value Answers#MAX_TEXT_BYTES} bytes of UTF-8 (cut at a character boundary).
   */
  static String describe(Throwable t) {
    StringBuilder text = new StringBuilder(String.valueOf(t));
    for (Throwable cause = t.getCause(); cause != null && cause != t; cause = cause.getCause()) {
      if (text.length() > Answers.MAX_TEXT_BYTES) {
        break;
      }
      text.append("; caused by ").append(cause);
    }
    return Answers.truncateUtf8(text.toString(), Answers.MAX_TEXT_BYTES);
  }

  private static ThreadFactory namedDaemon(String prefix) {
    AtomicInteger counter = new AtomicInteger();
    return r -> {
      Thread t = new Thread(r, prefix + "-" + counter.incrementAndGet());
      t.setDaemon(true);
      return t;
    };
  }
}
