package io.shardcar.interop.harness;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A child process of the test: its output goes to a log file, {@link #kill()} is a real SIGKILL,
 * {@link #terminate()} a SIGTERM. Every {@code Proc} is registered with a {@link Cluster} (and
 * the suite's shutdown hook), so it is killed whatever happens to the test.
 */
public class Proc {
  private final String name;
  private final Path log;
  private final Process process;
  private volatile long killedAt;

  Proc(String name, List<String> command, Path log, java.util.Map<String, String> env) {
    this.name = name;
    this.log = log;
    ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile());
    pb.environment().keySet().removeIf(k -> k.startsWith("SHARDCAR_"));
    pb.environment().putAll(env);
    try {
      process = pb.start();
    } catch (IOException e) {
      throw new IllegalStateException("cannot start " + name + ": " + command, e);
    }
    Reaper.register(process);
  }

  public String name() {
    return name;
  }

  public long pid() {
    return process.pid();
  }

  public boolean isAlive() {
    return process.isAlive();
  }

  public Path log() {
    return log;
  }

  /**
   * SIGKILL, then waits until the process is gone. Returns (and remembers) the time after which
   * it certainly ran nothing: an item it was running ended at the latest then.
   */
  public long kill() {
    process.destroyForcibly();
    try {
      if (!process.waitFor(20, TimeUnit.SECONDS)) {
        throw new IllegalStateException(name + " survived SIGKILL for 20 s");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
    killedAt = System.currentTimeMillis();
    return killedAt;
  }

  /** When {@link #kill()} confirmed the process dead, 0 if it was not killed. */
  public long killedAt() {
    return killedAt;
  }

  /**
   * SIGSTOP: the process freezes (its sockets stay open, its timers stop). Returns once every one of
   * its threads is stopped ({@code T} in {@code /proc/{pid}/task/*}/stat): the signal is delivered
   * asynchronously, and a thread still running could act on what the test does next.
   */
  public void pause() {
    signal("STOP");
    Await.until(name + " stopped in every thread", Duration.ofSeconds(10), this::stopped, () -> "threads: " + threadStates());
  }

  private boolean stopped() {
    String states = threadStates();
    return !states.isEmpty() && states.chars().allMatch(c -> c == 'T' || c == 't');
  }

  /** One state letter per thread of the process ({@code /proc/{pid}/task/{tid}/stat}), threads gone meanwhile left out. */
  private String threadStates() {
    StringBuilder sb = new StringBuilder();
    try (java.util.stream.Stream<Path> tasks = Files.list(Path.of("/proc", Long.toString(process.pid()), "task"))) {
      for (Path task : tasks.toList()) {
        try {
          String stat = Files.readString(task.resolve("stat"), StandardCharsets.US_ASCII);
          // "tid (comm) S ...": the state follows the last ')' (comm may hold spaces and parentheses).
          sb.append(stat.charAt(stat.lastIndexOf(')') + 2));
        } catch (IOException e) {
          // the thread ended meanwhile
        }
      }
    } catch (IOException e) {
      return "";
    }
    return sb.toString();
  }

  /** SIGCONT after {@link #pause()}. */
  public void resume() {
    signal("CONT");
  }

  private void signal(String sig) {
    try {
      Process k = new ProcessBuilder("kill", "-" + sig, Long.toString(process.pid())).redirectErrorStream(true).start();
      if (!k.waitFor(10, TimeUnit.SECONDS) || k.exitValue() != 0) {
        throw new IllegalStateException("kill -" + sig + " " + process.pid() + " failed");
      }
    } catch (IOException e) {
      throw new IllegalStateException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  /** SIGTERM (the process's own shutdown path). */
  public void terminate() {
    process.destroy();
  }

  /** Waits for the process to exit; its exit code, or -1 when it is still running after {@code timeout}. */
  public int waitFor(Duration timeout) {
    try {
      return process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS) ? process.exitValue() : -1;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  /** The last {@code chars} characters of its log. */
  public String logTail(int chars) {
    try {
      String s = Files.readString(log, StandardCharsets.UTF_8);
      return s.length() > chars ? s.substring(s.length() - chars) : s;
    } catch (IOException e) {
      return "(no log at " + log + ")";
    }
  }

  void close() {
    if (process.isAlive()) {
      process.destroyForcibly();
      try {
        process.waitFor(10, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  @Override
  public String toString() {
    return name + " (pid " + process.pid() + ")";
  }
}
