package io.shardcar.client.testing;

import io.shardcar.client.Assignment;
import io.shardcar.client.JobConfig;
import io.shardcar.client.ShardcarException;
import io.shardcar.client.WorkerListener;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Predicate;

/** A {@link WorkerListener} that records everything, with waits for tests. */
public final class Recorder implements WorkerListener {
  /** One recorded callback. {@code kind} is the callback's name without {@code on}. */
  public record Event(String kind, String jobName, String executionId, int item, String text, ShardcarException error,
      Assignment assignment) {
    @Override
    public String toString() {
      return kind + "{job=" + jobName + ", execution=" + executionId + ", item=" + item + ", text=" + text
          + (error == null ? "" : ", error=" + error.getMessage())
          + (assignment == null ? "" : ", assignment=" + assignment) + "}";
    }
  }

  private final List<Event> events = new ArrayList<>();

  private synchronized void add(Event e) {
    events.add(e);
    notifyAll();
  }

  public synchronized List<Event> events() {
    return new ArrayList<>(events);
  }

  public synchronized List<Event> events(String kind) {
    return events.stream().filter(e -> e.kind.equals(kind)).toList();
  }

  /** Waits until {@code count} recorded events match; fails with everything recorded when they don't. */
  public synchronized List<Event> await(String what, Duration timeout, int count, Predicate<Event> match) {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (true) {
      List<Event> found = events.stream().filter(match).toList();
      if (found.size() >= count) {
        return found;
      }
      long left = deadline - System.nanoTime();
      if (left <= 0) {
        throw new AssertionError("timed out after " + timeout + " waiting for " + what + "; recorded: " + events);
      }
      try {
        wait(Math.max(1, left / 1_000_000));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new AssertionError("interrupted", e);
      }
    }
  }

  public Event await(String what, Duration timeout, Predicate<Event> match) {
    return await(what, timeout, 1, match).get(0);
  }

  @Override
  public void onRegistered(String jobName, String instanceId, JobConfig effectiveConfig) {
    add(new Event("Registered", jobName, null, -1, instanceId, null, null));
  }

  @Override
  public void onAssignment(String jobName, Assignment assignment) {
    add(new Event("Assignment", jobName, null, -1, null, null, assignment));
  }

  @Override
  public void onAnswered(String jobName, String executionId, int item, String failure, ShardcarException refused) {
    add(new Event("Answered", jobName, executionId, item, failure, refused, null));
  }

  /** {@code text}: the reason; {@code item}: the first item given back. */
  @Override
  public void onDeclined(String jobName, String executionId, List<Integer> items, String reason,
      ShardcarException refused) {
    add(new Event("Declined", jobName, executionId, items.isEmpty() ? -1 : items.get(0), reason, refused, null));
  }

  /** {@code text}: the rpc and why. */
  @Override
  public void onAnswerDropped(String jobName, String rpc, String executionId, List<Integer> items, String why) {
    add(new Event("AnswerDropped", jobName, executionId, items.isEmpty() ? -1 : items.get(0), rpc + ": " + why,
        null, null));
  }

  @Override
  public void onCancelled(String jobName, String executionId, int item, String reason) {
    add(new Event("Cancelled", jobName, executionId, item, reason, null, null));
  }

  @Override
  public void onLeaseExpired(String jobName) {
    add(new Event("LeaseExpired", jobName, null, -1, null, null, null));
  }

  @Override
  public void onDisconnected(String jobName, ShardcarException cause, long retryInMillis) {
    add(new Event("Disconnected", jobName, null, -1, Long.toString(retryInMillis), cause, null));
  }

  @Override
  public void onShutdown(String jobName, String reason) {
    add(new Event("Shutdown", jobName, null, -1, reason, null, null));
  }
}
