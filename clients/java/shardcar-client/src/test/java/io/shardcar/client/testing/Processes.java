package io.shardcar.client.testing;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

/** Helpers shared by the process harnesses: free ports, readiness polling, signals, logs. */
public final class Processes {
  private Processes() {}

  /** A loopback port that was free a moment ago. */
  public static int freePort() {
    try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      s.setReuseAddress(true);
      return s.getLocalPort();
    } catch (IOException e) {
      throw new IllegalStateException("no free loopback port", e);
    }
  }

  /** Whether something accepts TCP connections on 127.0.0.1:{@code port}. */
  public static boolean accepts(int port) {
    try (Socket s = new Socket()) {
      s.connect(new InetSocketAddress("127.0.0.1", port), 200);
      return true;
    } catch (IOException e) {
      return false;
    }
  }

  /** Whether something accepts connections on the Unix domain socket {@code path}. */
  public static boolean accepts(Path path) {
    try (java.nio.channels.SocketChannel ch = java.nio.channels.SocketChannel.open(java.net.StandardProtocolFamily.UNIX)) {
      return ch.connect(java.net.UnixDomainSocketAddress.of(path));
    } catch (IOException e) {
      return false;
    }
  }

  /** Sends a ZooKeeper four-letter command and returns the answer ("" when it cannot). */
  public static String fourLetter(int port, String command) {
    try (Socket s = new Socket()) {
      s.connect(new InetSocketAddress("127.0.0.1", port), 200);
      s.setSoTimeout(1000);
      OutputStream out = s.getOutputStream();
      out.write(command.getBytes(StandardCharsets.US_ASCII));
      out.flush();
      InputStream in = s.getInputStream();
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      return "";
    }
  }

  /**
   * SIGSTOP, then waits until every thread of the process has stopped. {@code kill} returns once
   * the signal is queued: the kernel wakes one thread to act on it, and only when that thread
   * gets a CPU are the others told to stop, so under CPU load the threads of a JVM (or of the
   * sidecar's runtime) went on running, and reading their sockets, for up to hundreds of
   * milliseconds after {@code kill} returned (measured here: 233 ms idle, 450 ms with three CPU
   * burners, for a JVM of 27 threads). A test that sends something to a process it froze must
   * not begin before the process can no longer read it.
   */
  public static void stop(Process process) {
    signal(process, "STOP");
    Path tasks = Path.of("/proc", Long.toString(process.pid()), "task");
    if (!Files.isDirectory(tasks)) {
      return; // no procfs: nothing to wait on
    }
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (true) {
      String running = runningThreads(tasks);
      if (running.isEmpty()) {
        return;
      }
      if (System.nanoTime() - deadline > 0) {
        throw new IllegalStateException("process " + process.pid() + " not stopped 10 s after SIGSTOP: " + running);
      }
      sleep(1);
    }
  }

  /** The threads of a process (its {@code task} directory) that are not stopped, with their states. */
  private static String runningThreads(Path tasks) {
    StringBuilder running = new StringBuilder();
    try (java.util.stream.Stream<Path> threads = Files.list(tasks)) {
      for (Path thread : (Iterable<Path>) threads::iterator) {
        String stat;
        try {
          stat = Files.readString(thread.resolve("stat"));
        } catch (IOException e) {
          continue; // the thread has exited
        }
        // "pid (comm) S ...": the state follows the last ')' (comm may hold anything).
        char state = stat.charAt(stat.lastIndexOf(')') + 2);
        if ("TtZX".indexOf(state) < 0) {
          running.append(thread.getFileName()).append('=').append(state).append(' ');
        }
      }
    } catch (IOException e) {
      return ""; // the process has exited
    }
    return running.toString().trim();
  }

  /** Sends a signal ({@code STOP}, {@code CONT}, {@code KILL}, {@code TERM}) to one process by pid. */
  public static void signal(Process process, String signal) {
    try {
      Process kill = new ProcessBuilder("kill", "-" + signal, Long.toString(process.pid()))
          .redirectErrorStream(true)
          .start();
      if (!kill.waitFor(5, TimeUnit.SECONDS) || kill.exitValue() != 0) {
        throw new IllegalStateException("kill -" + signal + " " + process.pid() + " failed");
      }
    } catch (IOException e) {
      throw new IllegalStateException("cannot run kill", e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted", e);
    }
  }

  /** Kills {@code process} (SIGKILL) and waits for it to be gone. */
  public static void kill(Process process) {
    if (process == null || !process.isAlive()) {
      return;
    }
    // A stopped process cannot act on SIGTERM; SIGKILL works either way.
    process.destroyForcibly();
    try {
      process.waitFor(10, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** Polls {@code ready} until it holds or {@code timeout} passes; fails with {@code what} and the log. */
  public static void await(Process process, Path log, Duration timeout, String what, java.util.function.BooleanSupplier ready) {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (System.nanoTime() - deadline < 0) {
      if (ready.getAsBoolean()) {
        return;
      }
      if (!process.isAlive()) {
        throw new IllegalStateException(what + " exited with " + process.exitValue() + " before it was ready:\n" + tail(log));
      }
      sleep(50);
    }
    kill(process);
    throw new IllegalStateException(what + " not ready after " + timeout + ":\n" + tail(log));
  }

  /** The last 4000 characters of a log file. */
  public static String tail(Path log) {
    try {
      String s = Files.readString(log, StandardCharsets.UTF_8);
      return s.length() > 4000 ? s.substring(s.length() - 4000) : s;
    } catch (IOException e) {
      return "(no log at " + log + ")";
    }
  }

  public static void sleep(long millis) {
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted", e);
    }
  }

  /** {@code target/it-logs} of the module running the tests. */
  static Path logDir() {
    Path dir = Path.of(System.getProperty("user.dir"), "target", "it-logs");
    try {
      Files.createDirectories(dir);
    } catch (IOException e) {
      throw new IllegalStateException("cannot create " + dir, e);
    }
    return dir;
  }
}
