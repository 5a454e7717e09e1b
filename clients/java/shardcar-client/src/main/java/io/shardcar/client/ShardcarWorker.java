package io.shardcar.client;

import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * A worker process's connection to its local shardcar sidecar. Register one handler per job; the
 * worker subscribes, runs the handler once per item of every trigger, answers each item, honours
 * leases and revokes, and reconnects when the sidecar restarts.
 *
 * <p>A {@code Shutdown} from the sidecar (drain on SIGTERM, remote shutdown) stops the
 * registration it names once running items were answered and the sidecar ended the stream; when
 * that leaves the worker without registrations, the worker closes itself, so
 * {@link #awaitTermination()} returns. {@link Builder#reconnectAfterShutdown(boolean)} subscribes
 * again instead.
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

  public static Builder builder() {
    return new Builder();
  }

  static boolean isUnixSocket(String target) {
    return target.startsWith("unix:");
  }

  /** The gRPC target this worker dials. */
  public String getTarget() {
    return settings.target();
  }

  /**
   * Subscribes to a job, creating it with {@code config} when it does not exist (and replacing its
   * stored configuration when {@link JobConfig#isOverwrite()}), and runs {@code handler} for its
   * items. Blocks until the sidecar registered the instance.
   *
   * @throws InvalidJobConfigException when the sidecar rejects the configuration
   * @throws SidecarUnavailableException when the sidecar cannot be reached within the connect timeout
   * @throws InstanceConflictException when the instance id is already live for this job
   * @throws WorkerClosedException after {@link #close()}
   */
  public JobRegistration register(JobConfig config, JobHandler handler) {
    Objects.requireNonNull(config, "config");
    return doRegister(config.getJobName(), config, handler);
  }

  /**
   * Subscribes to a job that already exists (its configuration is the stored one).
   *
   * @throws JobNotFoundException when the sidecar does not know the job
   * @throws SidecarUnavailableException when the sidecar cannot be reached within the connect timeout
   */
  public JobRegistration register(String jobName, JobHandler handler) {
    Objects.requireNonNull(jobName, "jobName");
    return doRegister(jobName, null, handler);
  }

  private JobRegistration doRegister(String jobName, JobConfig config, JobHandler handler) {
    Objects.requireNonNull(handler, "handler");
    if (closing) {
      throw new WorkerClosedException("register(" + jobName + ") on a closed ShardcarWorker");
    }
    JobRegistration[] self = new JobRegistration[1];
    JobRegistration registration = new JobRegistration(
        settings, channel, jobName, config, handler, bySidecar -> terminated(self[0], bySidecar));
    self[0] = registration;
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

  /** The registrations that are still open. */
  public List<JobRegistration> getRegistrations() {
    return new ArrayList<>(registrations);
  }

  /** Blocks until {@link #close()} has finished (for a worker's {@code main}). */
  public void awaitTermination() throws InterruptedException {
    closed.await();
  }

  /** @return false if the worker is still open after {@code timeout} */
  public boolean awaitTermination(Duration timeout) throws InterruptedException {
    return closed.await(timeout.toMillis(), TimeUnit.MILLISECONDS);
  }

  /**
   * Closes every registration (running items get the shutdown grace period to finish and answer),
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

  /** Configures a {@link ShardcarWorker}. */
  public static final class Builder {
    private String target;
    private long pid = ProcessHandle.current().pid();
    private String instanceId = "";
    private final Map<String, String> labels = new LinkedHashMap<>();
    private int itemConcurrency = Math.max(2, Runtime.getRuntime().availableProcessors());
    private Duration connectTimeout = Duration.ofSeconds(30);
    private Duration backoffInitial = Duration.ofMillis(200);
    private Duration backoffMax = Duration.ofSeconds(5);
    private Duration answerTimeout = Duration.ofSeconds(10);
    private Duration shutdownGracePeriod = Duration.ofSeconds(10);
    private boolean reconnectAfterShutdown;
    private WorkerListener listener = new WorkerListener() {};
    private Function<String, String> environment = System::getenv;

    private Builder() {}

    /**
     * {@code host:port} (default {@value #DEFAULT_TARGET}, or {@code $SHARDCAR_TARGET}), any gRPC
     * target such as {@code dns:///sidecar:50061}, or {@code unix:///path/to/socket}.
     */
    public Builder target(String target) {
      this.target = target;
      return this;
    }

    /** Overrides the pid sent to the sidecar (the instance id is {@code {ip}@-@{pid}}). */
    public Builder pid(long pid) {
      this.pid = pid;
      return this;
    }

    /** Uses this instance id instead of {@code {ip}@-@{pid}} (needed to run two workers of one job in one process). */
    public Builder instanceId(String instanceId) {
      this.instanceId = instanceId == null ? "" : instanceId;
      return this;
    }

    public Builder label(String key, String value) {
      labels.put(Objects.requireNonNull(key, "key"), value == null ? "" : value);
      return this;
    }

    /** How many items of this worker's triggers run at once, per job (default: cores, at least 2). */
    public Builder itemConcurrency(int threads) {
      if (threads < 1) {
        throw new IllegalArgumentException("itemConcurrency must be at least 1, got " + threads);
      }
      this.itemConcurrency = threads;
      return this;
    }

    /** How long {@code register} keeps trying to reach the sidecar (default 30 s). */
    public Builder connectTimeout(Duration timeout) {
      this.connectTimeout = positive(timeout, "connectTimeout");
      return this;
    }

    /** Reconnect delays: start at {@code initial} (200 ms), double up to {@code max} (5 s). */
    public Builder reconnectBackoff(Duration initial, Duration max) {
      this.backoffInitial = positive(initial, "reconnectBackoff initial");
      this.backoffMax = positive(max, "reconnectBackoff max");
      return this;
    }

    /** Deadline of each Complete/ReportFailure/Decline call (default 10 s); one that runs out is sent again. */
    public Builder answerTimeout(Duration timeout) {
      this.answerTimeout = positive(timeout, "answerTimeout");
      return this;
    }

    /** How long {@code close()} lets running items finish before interrupting them (default 10 s). */
    public Builder shutdownGracePeriod(Duration grace) {
      this.shutdownGracePeriod = Objects.requireNonNull(grace, "shutdownGracePeriod");
      if (grace.isNegative()) {
        throw new IllegalArgumentException("shutdownGracePeriod must not be negative");
      }
      return this;
    }

    /**
     * What a registration does once the sidecar sent {@code Shutdown} (drain, remote shutdown) and
     * ended the stream: stop (false, the default; the worker closes when no registration is left),
     * or subscribe again with the reconnect backoff (true; for a sidecar that is restarted).
     */
    public Builder reconnectAfterShutdown(boolean reconnect) {
      this.reconnectAfterShutdown = reconnect;
      return this;
    }

    public Builder listener(WorkerListener listener) {
      this.listener = Objects.requireNonNull(listener, "listener");
      return this;
    }

    /** Where environment variables are read from (tests pass a map). */
    Builder environment(Function<String, String> environment) {
      this.environment = environment;
      return this;
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
          Map.copyOf(labels),
          itemConcurrency,
          connectTimeout,
          backoffInitial,
          backoffMax,
          answerTimeout,
          shutdownGracePeriod,
          reconnectAfterShutdown,
          listener);
    }

    /** Creates the worker; nothing is dialled until the first {@code register}. */
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
