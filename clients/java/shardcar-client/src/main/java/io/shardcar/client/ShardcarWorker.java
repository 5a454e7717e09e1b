package io.shardcar.client;

import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;
import java.util.function.Predicate;
import java.util.function.Supplier;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * A worker process's connection to its local shardcar sidecar. Register one handler per job; the
 * worker subscribes, runs the handler once per item of every trigger, answers each item, honours
 * leases and revokes, and reconnects when the sidecar restarts.
 *
 * <p><b>Workers outlive a sidecar restart.</b> On a {@code Shutdown} the registration takes no
 * new work (new triggers are declined), lets the running items finish and answers them while the
 * lease lasts. Once the sidecar has ended the stream: after a drain (SIGTERM: a restart, an
 * upgrade) it subscribes again with the reconnect backoff until the sidecar is back; after a remote
 * shutdown ({@code ShutdownInstance}, an operator's decision) the registration closes, and when
 * that leaves the worker without registrations the worker closes itself, so
 * {@link #awaitTermination()} returns. {@link Builder#stopOnDrain(boolean) stopOnDrain(true)}
 * makes a drain close the registration too.
 *
 * <p>A failed item (the handler threw: {@code ReportFailure}) is not retried before the job's
 * next fire: it runs again at the next cron fire or manual trigger, not at once.
 *
 * <p><b>Concurrent executions.</b> Each job's handlers run on a pool of
 * {@link Builder#itemConcurrency(int) itemConcurrency} threads (the executor size), shared by the
 * items of all of the job's executions. The worker tells the sidecar how many executions it runs at
 * once, {@link Builder#maxConcurrentExecutions(int) maxConcurrentExecutions}, by default the
 * executor size: while it runs fewer, the sidecar also sends it FAILOVER runs (a crashed peer's
 * items) and MISFIRE catch-ups, which start at once beside what runs and are answered each on its
 * own; cron fires and trigger-once requests still come only when it runs nothing, as in ElasticJob.
 * {@code maxConcurrentExecutions(1)} keeps ElasticJob's one execution at a time.
 *
 * <p>Instance ids: the sidecar names the instance {@code {sidecar ip}@-@{pid}}. In a container
 * (where several workers sharing a sidecar may all be pid 1) the worker sends an instance suffix
 * instead, and the id is {@code {ip}@-@{pid}-{8 random hex chars}}, the random part chosen once
 * per JVM; see {@link Builder#instanceSuffix(InstanceSuffix)}.
 *
 * <p>Tracing: with {@code io.opentelemetry:opentelemetry-api} on the classpath (an optional
 * dependency of this client), each item's handler runs in a span {@code shardcar.handler}, a child
 * of the sidecar's {@code shardcar.execution} span named by the trigger's {@code traceparent},
 * made current while the handler runs; see {@link Builder#openTelemetry} and
 * {@link Builder#tracing(boolean)}. Without the API there is no tracing and nothing to configure.
 *
 * <pre>{@code
 * try (ShardcarWorker worker = ShardcarWorker.builder().target("127.0.0.1:50061").build()) {
 *   worker.register(
 *       JobConfig.newBuilder("orders", 3).cron("0/5 * * * * ?").build(),
 *       ctx -> process(ctx.getShardingItem(), ctx.getShardingParameter()));
 *   worker.awaitTermination();
 * }
 * }</pre>
 */
public final class ShardcarWorker implements AutoCloseable {
  /** The sidecar's default listen address. */
  public static final String DEFAULT_TARGET = "127.0.0.1:50061";
  /** Environment variable naming the sidecar when the builder sets no target. */
  public static final String TARGET_ENV = "SHARDCAR_TARGET";
  /** The most executions a worker may ask to run at once ({@code SubscribeRequest.max_concurrent_executions}). */
  public static final int MAX_CONCURRENT_EXECUTIONS = 1024;

  /**
   * Whether the worker sends an {@code instance_suffix}, so that its instance id is
   * {@code {ip}@-@{pid}-{random}} instead of {@code {ip}@-@{pid}}. The pid alone is not unique when
   * several containers share one sidecar (each may be pid 1); the suffix adds eight random hex
   * characters chosen once per JVM, reused by every reconnect. An explicit
   * {@link Builder#instanceId(String) instance id} always wins.
   */
  public enum InstanceSuffix {
    /**
     * The default: a suffix when the worker runs in a container (its pid is 1, {@code /.dockerenv}
     * or {@code /run/.containerenv} exists, or {@code KUBERNETES_SERVICE_HOST} is set), none
     * otherwise.
     */
    AUTO,
    /** Always a suffix. */
    ALWAYS,
    /** Never a suffix: the instance id is {@code {ip}@-@{pid}}. */
    NEVER
  }

  /** Held so that the level set on it is not lost to garbage collection. */
  private static final Logger NETTY_BOOTSTRAP_LOG =
      Logger.getLogger("io.grpc.netty.shaded.io.netty.bootstrap.Bootstrap");

  private final Settings settings;
  private final ManagedChannel channel;
  private final List<JobRegistration> registrations = new CopyOnWriteArrayList<>();
  private final CountDownLatch closed = new CountDownLatch(1);
  private volatile boolean closing;

  private ShardcarWorker(Settings settings) {
    this.settings = settings;
    ManagedChannelBuilder<?> builder = Grpc.newChannelBuilder(settings.target(), InsecureChannelCredentials.create())
        .userAgent("shardcar-java");
    if (isUnixSocket(settings.target())) {
      // grpc-java would send the socket path as :authority, which the sidecar's HTTP/2 stack
      // refuses (PROTOCOL_ERROR); any valid host name will do over a local socket.
      builder.overrideAuthority("localhost");
      // Netty warns on every connection that a domain socket has no SO_KEEPALIVE; it is harmless.
      NETTY_BOOTSTRAP_LOG.setLevel(Level.SEVERE);
    }
    this.channel = builder.build();
  }

  /**
   * A builder with the defaults.
   *
   * @return a new builder
   */
  public static Builder builder() {
    return new Builder();
  }

  static boolean isUnixSocket(String target) {
    return target.startsWith("unix:");
  }

  /**
   * The gRPC target this worker dials.
   *
   * @return the target, e.g. {@code 127.0.0.1:50061}
   */
  public String getTarget() {
    return settings.target();
  }

  /**
   * The {@code instance_suffix} this worker sends ({@code {pid}-{random}}), so that its instance
   * ids are {@code {sidecar ip}@-@{suffix}}; empty when it sends none (an explicit instance id, or
   * no container and {@link InstanceSuffix#AUTO}, or {@link InstanceSuffix#NEVER}).
   *
   * @return the suffix, or an empty string
   */
  public String getInstanceSuffix() {
    return settings.instanceSuffix();
  }

  /**
   * The executor size: how many items of one job run at once on this worker, whichever execution
   * they belong to.
   *
   * @return the size of each job's item pool
   */
  public int getItemConcurrency() {
    return settings.itemConcurrency();
  }

  /**
   * How many executions of one job this worker runs at once, as every subscription tells the
   * sidecar ({@code max_concurrent_executions}): {@link Builder#maxConcurrentExecutions(int)}, else
   * the executor size ({@link #getItemConcurrency()}, at most {@value #MAX_CONCURRENT_EXECUTIONS}).
   *
   * @return from 1 to {@value #MAX_CONCURRENT_EXECUTIONS}
   */
  public int getMaxConcurrentExecutions() {
    return settings.maxConcurrentExecutions();
  }

  /**
   * Subscribes to a job, creating it with {@code config} when it does not exist (and replacing its
   * stored configuration when {@link JobConfig#isOverwrite()}), and runs {@code handler} for its
   * items. Blocks until the sidecar registered the instance.
   *
   * @param config the job's configuration
   * @param handler runs each item of each trigger
   * @return the open registration
   * @throws InvalidJobConfigException when the sidecar rejects the configuration
   * @throws SidecarUnavailableException when the sidecar cannot be reached within the connect timeout
   * @throws InstanceConflictException when the instance id is already live for this job
   * @throws WorkerClosedException after {@link #close()}
   */
  public JobRegistration register(JobConfig config, JobHandler handler) {
    Objects.requireNonNull(config, "config");
    refuseResident(config, "register(config, JobHandler)");
    return doRegister(config.getJobName(), config, handler);
  }

  /**
   * Subscribes to a job that already exists (its configuration is the stored one).
   *
   * @param jobName the job
   * @param handler runs each item of each trigger
   * @return the open registration
   * @throws JobNotFoundException when the sidecar does not know the job
   * @throws SidecarUnavailableException when the sidecar cannot be reached within the connect timeout
   */
  public JobRegistration register(String jobName, JobHandler handler) {
    Objects.requireNonNull(jobName, "jobName");
    return doRegister(jobName, null, handler);
  }

  /**
   * Subscribes to a dataflow job, creating it with {@code config} when it does not exist (as
   * {@link #register(JobConfig, JobHandler)}), and runs {@code handler} for its items: one-off or
   * streaming as the job's {@link JobConfig#STREAMING_PROCESS streaming.process} property says in
   * its effective configuration (the stored one, when the job existed and {@code overwrite} is off).
   *
   * @param config the job's configuration
   * @param handler fetches and processes each item's data
   * @param <T> the type of the data items
   * @return the open registration
   * @throws InvalidJobConfigException when the sidecar rejects the configuration
   * @throws SidecarUnavailableException when the sidecar cannot be reached within the connect timeout
   * @throws InstanceConflictException when the instance id is already live for this job
   * @throws WorkerClosedException after {@link #close()}
   */
  public <T> JobRegistration register(JobConfig config, DataflowHandler<T> handler) {
    Objects.requireNonNull(config, "config");
    refuseResident(config, "register(config, DataflowHandler)");
    return doRegisterDataflow(config.getJobName(), config, handler, null);
  }

  /**
   * {@link #register(JobConfig, DataflowHandler)} with the streaming mode set explicitly: writes
   * {@link JobConfig#STREAMING_PROCESS streaming.process} = {@code streaming} into the configuration
   * sent. The effective configuration still decides (as in ElasticJob, a job stored before keeps
   * its own properties unless {@code overwrite} is on); a mismatch is logged as a warning.
   *
   * @param config the job's configuration
   * @param handler fetches and processes each item's data
   * @param streaming true to fetch and process while a fetch returns data; false for one fetch per item
   * @param <T> the type of the data items
   * @return the open registration
   * @throws InvalidJobConfigException when the sidecar rejects the configuration
   * @throws SidecarUnavailableException when the sidecar cannot be reached within the connect timeout
   * @throws InstanceConflictException when the instance id is already live for this job
   * @throws WorkerClosedException after {@link #close()}
   */
  public <T> JobRegistration register(JobConfig config, DataflowHandler<T> handler, boolean streaming) {
    Objects.requireNonNull(config, "config");
    refuseResident(config, "register(config, DataflowHandler, streaming)");
    return doRegisterDataflow(config.getJobName(), config.toBuilder().streamingProcess(streaming).build(), handler,
        streaming);
  }

  /**
   * Subscribes to a dataflow job that already exists; its stored {@code streaming.process} property
   * chooses the mode.
   *
   * @param jobName the job
   * @param handler fetches and processes each item's data
   * @param <T> the type of the data items
   * @return the open registration
   * @throws JobNotFoundException when the sidecar does not know the job
   * @throws SidecarUnavailableException when the sidecar cannot be reached within the connect timeout
   */
  public <T> JobRegistration register(String jobName, DataflowHandler<T> handler) {
    Objects.requireNonNull(jobName, "jobName");
    return doRegisterDataflow(jobName, null, handler, null);
  }

  /**
   * Subscribes to a resident job ({@link JobConfig.Builder#resident(boolean)}, which this sets),
   * creating it with {@code config} when it does not exist (as {@link #register(JobConfig, JobHandler)}),
   * and runs {@code handler} for each item this worker holds, from the sidecar's
   * {@link TriggerSource#RESIDENT} trigger until the hold is cancelled (a revoke when the item moves,
   * the lease running out, a lost stream, a {@code Shutdown}, {@link #close()}); see
   * {@link ResidentHandler} for how the end of a hold is answered. Each hold runs on its own thread.
   * Blocks until the sidecar registered the instance.
   *
   * <p>Not an overload of {@code register}: a lambda would fit both {@link JobHandler} and
   * {@link ResidentHandler}.
   *
   * @param config the job's configuration (a cron, failover, an execution timeout or
   *     {@code monitorExecution(false)} are refused, naming the field)
   * @param handler holds each item
   * @return the open registration
   * @throws InvalidJobConfigException when the configuration cannot be resident, or the sidecar
   *     rejects it
   * @throws SidecarUnavailableException when the sidecar cannot be reached within the connect timeout
   * @throws InstanceConflictException when the instance id is already live for this job
   * @throws WorkerClosedException after {@link #close()}
   */
  public JobRegistration registerResident(JobConfig config, ResidentHandler handler) {
    Objects.requireNonNull(config, "config");
    JobConfig resident = config.isResident() ? config : config.toBuilder().resident(true).build();
    return doRegisterResident(config.getJobName(), resident, handler);
  }

  /**
   * Subscribes to a resident job that already exists (its configuration is the stored one), as
   * {@link #registerResident(JobConfig, ResidentHandler)}.
   *
   * @param jobName the job
   * @param handler holds each item
   * @return the open registration
   * @throws InvalidJobConfigException (field {@code resident}) when the stored job is not resident
   * @throws JobNotFoundException when the sidecar does not know the job
   * @throws SidecarUnavailableException when the sidecar cannot be reached within the connect timeout
   */
  public JobRegistration registerResident(String jobName, ResidentHandler handler) {
    Objects.requireNonNull(jobName, "jobName");
    return doRegisterResident(jobName, null, handler);
  }

  private JobRegistration doRegisterResident(String jobName, JobConfig config, ResidentHandler handler) {
    Objects.requireNonNull(handler, "handler");
    return registerWith(jobName, config, true, self -> handler::hold);
  }

  private static void refuseResident(JobConfig config, String method) {
    if (config.isResident()) {
      throw new InvalidJobConfigException("resident", "resident: job '" + config.getJobName()
          + "' is resident; register its handler, a ResidentHandler, with registerResident(config, handler), not "
          + method, null);
    }
  }

  private <T> JobRegistration doRegisterDataflow(
      String jobName, JobConfig config, DataflowHandler<T> handler, Boolean streaming) {
    Objects.requireNonNull(handler, "handler");
    AtomicReference<DataflowRunner<T>> runner = new AtomicReference<>();
    JobRegistration registration = registerWith(jobName, config, false, self -> {
      runner.set(new DataflowRunner<>(
          jobName,
          handler,
          () -> self.get().getEffectiveConfig(),
          streaming,
          () -> self.get().isStopping(),
          ctx -> self.get().handedOver(ctx)));
      return runner.get();
    });
    runner.get().streaming(); // warns now if the stored streaming.process differs from the explicit one
    return registration;
  }

  private JobRegistration doRegister(String jobName, JobConfig config, JobHandler handler) {
    Objects.requireNonNull(handler, "handler");
    return registerWith(jobName, config, false, self -> handler);
  }

  /** {@code handlerOf} gets the registration (readable once its handlers run) and returns its handler. */
  private JobRegistration registerWith(
      String jobName, JobConfig config, boolean resident,
      Function<Supplier<JobRegistration>, JobHandler> handlerOf) {
    if (closing) {
      throw new WorkerClosedException("register(" + jobName + ") on a closed ShardcarWorker");
    }
    AtomicReference<JobRegistration> self = new AtomicReference<>();
    JobRegistration registration = new JobRegistration(
        settings, channel, jobName, config, handlerOf.apply(self::get), resident,
        bySidecar -> terminated(self.get(), bySidecar));
    self.set(registration);
    registrations.add(registration);
    registration.start();
    return registration;
  }

  /** A registration ended; after the sidecar's {@code Shutdown} of the last one, the worker stops. */
  private void terminated(JobRegistration registration, boolean bySidecarShutdown) {
    registrations.remove(registration);
    if (bySidecarShutdown && registrations.isEmpty() && !closing) {
      // Not on the registration's event thread: close() waits for the channel.
      Thread stopper = new Thread(this::close, "shardcar-worker-stop");
      stopper.setDaemon(true);
      stopper.start();
    }
  }

  /**
   * The registrations that are still open.
   *
   * @return a snapshot of them
   */
  public List<JobRegistration> getRegistrations() {
    return new ArrayList<>(registrations);
  }

  /**
   * Blocks until the worker has closed (for a worker's {@code main}): after {@link #close()}, or
   * once a sidecar's remote {@code Shutdown} stopped its last registration (a drain too, with
   * {@link Builder#stopOnDrain(boolean)}).
   *
   * @throws InterruptedException when interrupted while waiting
   */
  public void awaitTermination() throws InterruptedException {
    closed.await();
  }

  /**
   * Waits at most {@code timeout} for the worker to close (see {@link #awaitTermination()}).
   *
   * @param timeout how long to wait
   * @return false if the worker is still open after {@code timeout}
   * @throws InterruptedException when interrupted while waiting
   */
  public boolean awaitTermination(Duration timeout) throws InterruptedException {
    return closed.await(timeout.toMillis(), TimeUnit.MILLISECONDS);
  }

  /**
   * Closes every registration (running items get the drain timeout to finish and answer),
   * then the channel. Idempotent; never throws.
   */
  @Override
  public void close() {
    if (closing) {
      return;
    }
    closing = true;
    List<JobRegistration> open = new ArrayList<>(registrations);
    open.parallelStream().forEach(JobRegistration::close);
    channel.shutdown();
    try {
      if (!channel.awaitTermination(settings.answerTimeout().toMillis(), TimeUnit.MILLISECONDS)) {
        channel.shutdownNow();
      }
    } catch (InterruptedException e) {
      channel.shutdownNow();
      Thread.currentThread().interrupt();
    }
    closed.countDown();
  }

  /** The deprecated option names a warning was logged for, so that each is logged once per JVM. */
  static final Set<String> DEPRECATED_USED = ConcurrentHashMap.newKeySet();

  /**
   * Logs a warning (once per JVM and name) that the deprecated option {@code name} was used, as the
   * Python client's {@code DeprecationWarning} does: {@code @Deprecated} alone tells only a compiler.
   *
   * @return whether this call logged it (the first use of {@code name})
   */
  static boolean warnDeprecated(String name, String replacement) {
    if (!DEPRECATED_USED.add(name)) {
      return false;
    }
    System.getLogger(ShardcarWorker.class.getName()).log(System.Logger.Level.WARNING,
        "shardcar: ShardcarWorker.Builder.{0} is deprecated and will be removed: use {1}", name, replacement);
    return true;
  }

  /** Configures a {@link ShardcarWorker}. */
  public static final class Builder {
    private String target;
    private long pid = ProcessHandle.current().pid();
    private String instanceId = "";
    private InstanceSuffix instanceSuffix = InstanceSuffix.AUTO;
    private String instanceSuffixToken = InstanceIds.JVM_TOKEN;
    private Predicate<String> fileExists = path -> Files.exists(Path.of(path));
    private final Map<String, String> labels = new LinkedHashMap<>();
    private int itemConcurrency = 8;
    /** Null: the executor size ({@link #itemConcurrency}, at most 1024). */
    private Integer maxConcurrentExecutions;
    private Duration connectTimeout = Duration.ofSeconds(30);
    private Duration backoffInitial = Duration.ofMillis(100);
    private Duration backoffMax = Duration.ofSeconds(5);
    private Duration answerTimeout = Duration.ofSeconds(10);
    private Duration drainTimeout = Duration.ofSeconds(30);
    private boolean stopOnDrain;
    private WorkerListener listener = new WorkerListener() {};
    private boolean tracing = true;
    /** An {@code io.opentelemetry.api.OpenTelemetry}, typed Object so that the API need not be present. */
    private Object openTelemetry;
    private Function<String, String> environment = System::getenv;

    private Builder() {}

    /**
     * {@code host:port} (default {@value #DEFAULT_TARGET}, or {@code $SHARDCAR_TARGET}), any gRPC
     * target such as {@code dns:///sidecar:50061}, or {@code unix:///path/to/socket}.
     *
     * @param target the sidecar's gRPC target
     * @return this builder
     */
    public Builder target(String target) {
      this.target = target;
      return this;
    }

    /**
     * Overrides the pid sent to the sidecar (the instance id is {@code {ip}@-@{pid}}, or
     * {@code {ip}@-@{pid}-{random}} with an {@link #instanceSuffix(InstanceSuffix) instance
     * suffix}); a pid of 1 counts as running in a container.
     *
     * @param pid the pid to send
     * @return this builder
     */
    public Builder pid(long pid) {
      this.pid = pid;
      return this;
    }

    /**
     * Uses this instance id instead of {@code {ip}@-@{pid}} (needed to run two workers of one job
     * in one process). It wins over the {@link #instanceSuffix(InstanceSuffix) instance suffix}.
     *
     * @param instanceId the instance id, or null or empty for none
     * @return this builder
     */
    public Builder instanceId(String instanceId) {
      this.instanceId = instanceId == null ? "" : instanceId;
      return this;
    }

    /**
     * Whether to send an {@code instance_suffix} {@code {pid}-{random}} so that the instance id is
     * unique per worker process on the host even when pids are not (containers sharing a
     * sidecar): {@link InstanceSuffix#AUTO} (the default) when running in a container,
     * {@link InstanceSuffix#ALWAYS}, or {@link InstanceSuffix#NEVER}. Ignored when an explicit
     * {@link #instanceId(String) instance id} is set.
     *
     * @param mode when to send a suffix
     * @return this builder
     */
    public Builder instanceSuffix(InstanceSuffix mode) {
      this.instanceSuffix = Objects.requireNonNull(mode, "mode");
      return this;
    }

    /**
     * Adds a label sent with every subscription.
     *
     * @param key the label's name
     * @param value its value (null is sent as empty)
     * @return this builder
     */
    public Builder label(String key, String value) {
      labels.put(Objects.requireNonNull(key, "key"), value == null ? "" : value);
      return this;
    }

    /**
     * Adds labels sent with every subscription (Python: {@code WorkerOptions(labels=...)}).
     *
     * @param labels names and values (a null value is sent as empty)
     * @return this builder
     */
    public Builder labels(Map<String, String> labels) {
      Objects.requireNonNull(labels, "labels").forEach(this::label);
      return this;
    }

    /**
     * The executor size: how many items run at once per job (default 8), on one pool per job
     * shared by the items of all of its executions (see {@link #maxConcurrentExecutions(int)}).
     *
     * @param threads items run at once, at least 1
     * @return this builder
     */
    public Builder itemConcurrency(int threads) {
      if (threads < 1) {
        throw new IllegalArgumentException("itemConcurrency must be at least 1, got " + threads);
      }
      this.itemConcurrency = threads;
      return this;
    }

    /**
     * How many executions of one job the worker runs at once, sent to the sidecar with every
     * subscription ({@code max_concurrent_executions}). Unset, it is the executor size
     * ({@link #itemConcurrency(int)}, at most {@value ShardcarWorker#MAX_CONCURRENT_EXECUTIONS}): an
     * execution needs at least one item thread, so that many can all be running, while more could
     * only queue for a thread with the sidecar counting them as running. While the worker runs
     * fewer executions than this, the sidecar also sends it FAILOVER runs (a crashed peer's items)
     * and MISFIRE catch-ups, started at once beside what runs, each answered on its own; cron fires
     * and trigger-once requests still come only when it runs nothing. The items of concurrent
     * executions share the pool, first come first served, so a FAILOVER run that arrives while
     * every thread is busy starts when the first of them returns. {@code 1} is ElasticJob's
     * behaviour: work only while the worker runs nothing.
     *
     * @param executions from 1 to {@value ShardcarWorker#MAX_CONCURRENT_EXECUTIONS}, and at most
     *     the executor size (checked by {@link #build()})
     * @return this builder
     * @throws IllegalArgumentException outside 1 to {@value ShardcarWorker#MAX_CONCURRENT_EXECUTIONS}
     */
    public Builder maxConcurrentExecutions(int executions) {
      if (executions < 1 || executions > MAX_CONCURRENT_EXECUTIONS) {
        throw new IllegalArgumentException("maxConcurrentExecutions must be 1 to " + MAX_CONCURRENT_EXECUTIONS
            + " (how many executions of a job the worker runs at once), got " + executions);
      }
      this.maxConcurrentExecutions = executions;
      return this;
    }

    /** {@link #maxConcurrentExecutions(int)} as {@link #build()} will send it. */
    int resolveMaxConcurrentExecutions() {
      if (maxConcurrentExecutions == null) {
        return Math.min(itemConcurrency, MAX_CONCURRENT_EXECUTIONS);
      }
      if (maxConcurrentExecutions > itemConcurrency) {
        throw new IllegalArgumentException("maxConcurrentExecutions " + maxConcurrentExecutions
            + " exceeds itemConcurrency " + itemConcurrency + ": every execution needs at least one of the job's "
            + itemConcurrency + " item threads, so at most " + itemConcurrency + " executions can run at once");
      }
      return maxConcurrentExecutions;
    }

    /**
     * How long {@code register} keeps trying to reach the sidecar (default 30 s). Once registered
     * there is no deadline: lost streams and drains are followed by new subscriptions.
     *
     * @param timeout how long, positive
     * @return this builder
     */
    public Builder connectTimeout(Duration timeout) {
      this.connectTimeout = positive(timeout, "connectTimeout");
      return this;
    }

    /**
     * Delays between subscriptions after a lost stream or a drain: start at {@code initial}
     * (100 ms), double up to {@code max} (5 s), with ±20 % jitter, and start over once registered.
     *
     * @param initial the first delay
     * @param max the longest delay
     * @return this builder
     */
    public Builder reconnectBackoff(Duration initial, Duration max) {
      this.backoffInitial = positive(initial, "reconnectBackoff initial");
      this.backoffMax = positive(max, "reconnectBackoff max");
      return this;
    }

    /**
     * Deadline of each Complete/ReportFailure/Decline call (default 10 s); one that runs out is sent again.
     *
     * @param timeout the deadline, positive
     * @return this builder
     */
    public Builder answerTimeout(Duration timeout) {
      this.answerTimeout = positive(timeout, "answerTimeout");
      return this;
    }

    /**
     * How long {@code close()} lets running items finish and answer before it interrupts them
     * (default 30 s); each interrupted item is declined once it returns.
     *
     * @param timeout how long, not negative
     * @return this builder
     */
    public Builder drainTimeout(Duration timeout) {
      this.drainTimeout = Objects.requireNonNull(timeout, "drainTimeout");
      if (timeout.isNegative()) {
        throw new IllegalArgumentException("drainTimeout must not be negative");
      }
      return this;
    }

    /**
     * Deprecated: use {@link #drainTimeout(Duration)}, the same setting.
     *
     * @param grace how long, not negative
     * @return this builder
     * @deprecated since 0.1.0, for removal: the option is {@link #drainTimeout(Duration)}, named as
     *     in the Python client ({@code drain_timeout})
     */
    @Deprecated(since = "0.1.0", forRemoval = true)
    public Builder shutdownGracePeriod(Duration grace) {
      warnDeprecated("shutdownGracePeriod(Duration)", "drainTimeout(Duration), the same setting");
      return drainTimeout(grace);
    }

    /**
     * Whether a drain of the sidecar (SIGTERM: a restart, an upgrade) stops the registrations it
     * drains (default false). Either way a {@code Shutdown} first makes a registration take no new
     * work (new triggers are declined) and lets the running items finish and answer. Once the
     * sidecar has ended the stream, a drain is followed by a new subscription, with the reconnect
     * backoff, until the sidecar is back (false), or closes the registration (true); a remote
     * shutdown ({@code ShutdownInstance}) always closes it. The worker closes itself when no
     * registration is left, so {@link ShardcarWorker#awaitTermination()} returns.
     *
     * @param stop true to stop on any {@code Shutdown}, a drain as a remote shutdown
     * @return this builder
     */
    public Builder stopOnDrain(boolean stop) {
      this.stopOnDrain = stop;
      return this;
    }

    /**
     * Deprecated: use {@link #stopOnDrain(boolean)}, of the opposite sense:
     * {@code reconnectAfterShutdown(r)} is {@code stopOnDrain(!r)}. A remote shutdown now always
     * closes the registration, whatever this says.
     *
     * @param reconnect whether to subscribe again after a drain
     * @return this builder
     * @deprecated since 0.1.0, for removal: the option is {@link #stopOnDrain(boolean)}, named as
     *     in the Python client ({@code stop_on_drain})
     */
    @Deprecated(since = "0.1.0", forRemoval = true)
    public Builder reconnectAfterShutdown(boolean reconnect) {
      warnDeprecated("reconnectAfterShutdown(boolean)",
          "stopOnDrain(boolean), of the opposite sense: reconnectAfterShutdown(r) is stopOnDrain(!r)");
      return stopOnDrain(!reconnect);
    }

    /**
     * Observes the worker's registrations, answers, cancellations and disconnects.
     *
     * @param listener the observer
     * @return this builder
     */
    public Builder listener(WorkerListener listener) {
      this.listener = Objects.requireNonNull(listener, "listener");
      return this;
    }

    /**
     * The OpenTelemetry whose tracer makes the handlers' spans, instead of {@code GlobalOpenTelemetry}
     * (the default, read when each handler starts, so an SDK installed after {@code build()} counts).
     * Each item's handler runs in a span {@code shardcar.handler} (kind {@code CONSUMER}), a child of
     * the trigger's {@code traceparent}, current while the handler runs; it ends when the handler
     * returns, with an exception event and status {@code ERROR} when it threw, and an event
     * {@code shardcar.cancelled} when the item was cancelled. Only callable with
     * {@code opentelemetry-api} on the classpath; without it the worker does not trace.
     *
     * @param openTelemetry the instance to trace with
     * @return this builder
     */
    public Builder openTelemetry(io.opentelemetry.api.OpenTelemetry openTelemetry) {
      this.openTelemetry = Objects.requireNonNull(openTelemetry, "openTelemetry");
      return this;
    }

    /**
     * Whether handlers run in spans when {@code opentelemetry-api} is on the classpath (default
     * true); false opts out even then.
     *
     * @param enabled false for no spans
     * @return this builder
     */
    public Builder tracing(boolean enabled) {
      this.tracing = enabled;
      return this;
    }

    /** Where environment variables are read from (tests pass a map). */
    Builder environment(Function<String, String> environment) {
      this.environment = environment;
      return this;
    }

    /** Which files exist, for the container detection (tests pass a set). */
    Builder fileExists(Predicate<String> fileExists) {
      this.fileExists = fileExists;
      return this;
    }

    /** The random part of the instance suffix (tests give two workers of one JVM their own). */
    Builder instanceSuffixToken(String token) {
      this.instanceSuffixToken = token;
      return this;
    }

    /** The {@code instance_suffix} {@link #build()} will send, empty for none. */
    String resolveInstanceSuffix() {
      String suffix = InstanceIds.suffix(
          instanceSuffix, instanceId, new InstanceIds.Probe(pid, fileExists, environment), instanceSuffixToken);
      if (!suffix.isEmpty() && !InstanceIds.isValidSuffix(suffix)) {
        throw new IllegalArgumentException("instance suffix " + suffix + " is not 1 to 64 characters of [A-Za-z0-9._-]");
      }
      return suffix;
    }

    /** The target that {@link #build()} will dial: explicit, else {@code $SHARDCAR_TARGET}, else the default. */
    String resolveTarget() {
      if (target != null && !target.isBlank()) {
        return target.trim();
      }
      String fromEnv = environment.apply(TARGET_ENV);
      if (fromEnv != null && !fromEnv.isBlank()) {
        return fromEnv.trim();
      }
      return DEFAULT_TARGET;
    }

    Settings settings() {
      return new Settings(
          resolveTarget(),
          pid,
          instanceId,
          resolveInstanceSuffix(),
          Map.copyOf(labels),
          itemConcurrency,
          resolveMaxConcurrentExecutions(),
          connectTimeout,
          backoffInitial,
          backoffMax,
          answerTimeout,
          drainTimeout,
          stopOnDrain,
          listener,
          ItemTracing.create(tracing, openTelemetry));
    }

    /**
     * Creates the worker; nothing is dialled until the first {@code register}.
     *
     * @return the worker
     * @throws IllegalArgumentException when {@link #maxConcurrentExecutions(int)} exceeds
     *     {@link #itemConcurrency(int)}
     */
    public ShardcarWorker build() {
      return new ShardcarWorker(settings());
    }

    private static Duration positive(Duration d, String what) {
      Objects.requireNonNull(d, what);
      if (d.isNegative() || d.isZero()) {
        throw new IllegalArgumentException(what + " must be positive, got " + d);
      }
      return d;
    }
  }
}
