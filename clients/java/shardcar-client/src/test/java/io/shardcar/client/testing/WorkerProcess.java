package io.shardcar.client.testing;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Predicate;

/**
 * A {@link WorkerMain} in a child JVM started with the test classpath, whose stdout lines the test
 * waits on, and which the test can freeze (SIGSTOP) and resume. Always closed by the test (it is
 * killed, even when stopped): use try-with-resources.
 */
public final class WorkerProcess implements AutoCloseable {
  private static final AtomicInteger STARTS = new AtomicInteger();

  private final Process process;
  private final Path log;
  private final List<String> lines = new ArrayList<>();

  private WorkerProcess(Process process, Path log) {
    this.process = process;
    this.log = log;
    Thread reader = new Thread(this::read, "worker-process-" + process.pid() + "-stdout");
    reader.setDaemon(true);
    reader.start();
  }

  /** Starts {@code WorkerMain target jobName mode} and waits for its {@code READY} line. */
  public static WorkerProcess start(String target, String jobName, String mode) {
    return start(target, jobName, mode, testClasspath());
  }

  /**
   * {@link #start(String, String, String)} with the test classpath less every OpenTelemetry jar,
   * as in an application that does not trace.
   */
  public static WorkerProcess startWithoutOpenTelemetry(String target, String jobName, String mode) {
    return start(target, jobName, mode, withoutOpenTelemetry(testClasspath()));
  }

  /** The test JVM's classpath. */
  public static String testClasspath() {
    return System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
  }

  /** {@code classpath} without its OpenTelemetry entries ({@code io/opentelemetry} in their path). */
  public static String withoutOpenTelemetry(String classpath) {
    return java.util.Arrays.stream(classpath.split(java.io.File.pathSeparator))
        .filter(entry -> !entry.replace('\\', '/').contains("/io/opentelemetry/"))
        .collect(java.util.stream.Collectors.joining(java.io.File.pathSeparator));
  }

  private static WorkerProcess start(String target, String jobName, String mode, String classpath) {
    List<String> cmd = List.of(
        Path.of(System.getProperty("java.home"), "bin", "java").toString(),
        "-Xmx256m",
        "-cp", classpath,
        WorkerMain.class.getName(),
        target, jobName, mode);
    Path log = Processes.logDir().resolve("worker-" + jobName + "-" + STARTS.incrementAndGet() + ".log");
    WorkerProcess worker;
    try {
      Process p = new ProcessBuilder(cmd).redirectError(log.toFile()).start();
      worker = new WorkerProcess(p, log);
    } catch (IOException e) {
      throw new IllegalStateException("cannot start " + cmd, e);
    }
    try {
      worker.await("READY", Duration.ofSeconds(60), l -> l.startsWith("READY "));
    } catch (RuntimeException | AssertionError e) {
      worker.close();
      throw e;
    }
    return worker;
  }

  private void read() {
    try (BufferedReader in = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
      for (String line = in.readLine(); line != null; line = in.readLine()) {
        synchronized (this) {
          lines.add(line);
          notifyAll();
        }
      }
    } catch (IOException e) {
      // the process is gone
    }
  }

  /** Every line printed so far. */
  public synchronized List<String> lines() {
    return new ArrayList<>(lines);
  }

  /** Waits for a line that matches; fails with every line and the log's tail when none comes. */
  public synchronized String await(String what, Duration timeout, Predicate<String> match) {
    return lines.get(awaitIndex(what, timeout, 0, match));
  }

  /** Waits for a line at index {@code from} or later that matches; returns its index. */
  public synchronized int awaitIndex(String what, Duration timeout, int from, Predicate<String> match) {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (true) {
      for (int i = from; i < lines.size(); i++) {
        if (match.test(lines.get(i))) {
          return i;
        }
      }
      long left = deadline - System.nanoTime();
      if (left <= 0) {
        throw new AssertionError("timed out after " + timeout + " waiting for " + what + " from the worker; lines: "
            + lines + "\nalive=" + process.isAlive() + ", log:\n" + Processes.tail(log));
      }
      try {
        wait(Math.max(1, left / 1_000_000));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new AssertionError("interrupted", e);
      }
    }
  }

  /** The instance id from the {@code READY} line. */
  public String instanceId() {
    return await("READY", Duration.ofSeconds(1), l -> l.startsWith("READY ")).substring("READY ".length());
  }

  /**
   * SIGSTOP: every thread of the worker JVM freezes (this returns once they all have); its
   * sockets stay open.
   */
  public void pause() {
    Processes.stop(process);
  }

  /** SIGCONT after {@link #pause()}. */
  public void resume() {
    Processes.signal(process, "CONT");
  }

  public Process process() {
    return process;
  }

  /** The worker's stderr (its log), last 4000 characters. */
  public String logTail() {
    return Processes.tail(log);
  }

  @Override
  public void close() {
    if (process.isAlive()) {
      try {
        Processes.signal(process, "CONT");
      } catch (IllegalStateException e) {
        // it may have exited meanwhile; SIGKILL below works either way
      }
    }
    Processes.kill(process);
  }
}
