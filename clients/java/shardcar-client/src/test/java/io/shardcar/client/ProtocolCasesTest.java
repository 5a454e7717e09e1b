package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.google.protobuf.Any;
import com.google.protobuf.Duration;
import com.google.protobuf.Timestamp;
import com.google.rpc.ErrorInfo;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import io.shardcar.client.RegistrationState.Call;
import io.shardcar.client.RegistrationState.CallResult;
import io.shardcar.client.RegistrationState.Cancel;
import io.shardcar.client.RegistrationState.ItemKey;
import io.shardcar.client.RegistrationState.Output;
import io.shardcar.client.RegistrationState.Start;
import io.shardcar.client.RegistrationState.Stop;
import io.shardcar.v1.Lease;
import io.shardcar.v1.Registered;
import io.shardcar.v1.Revoke;
import io.shardcar.v1.ShardItem;
import io.shardcar.v1.Shutdown;
import io.shardcar.v1.ShutdownKind;
import io.shardcar.v1.SubscribeResponse;
import io.shardcar.v1.Trigger;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * Every case of {@code clients/protocol-cases/cases.json} (the worker contract as data, shared
 * with the Python client) against {@link RegistrationState} with a fake clock, following the
 * schema of {@code clients/protocol-cases/README.md}: outputs are compared in order, one with
 * {@code at} must come from the step at that time, and no other output is allowed (in particular
 * no cancel of an item whose handler returned, and no repeat of a call whose result is pending).
 */
class ProtocolCasesTest {
  /** {@code clients/protocol-cases/cases.json}, from this module's directory. */
  static final Path CASES = Path.of(System.getProperty("user.dir"))
      .resolve("../../protocol-cases/cases.json").normalize();
  /** Wall time 0 of every case. */
  static final Instant WALL_ZERO = Instant.parse("2026-11-23T12:00:00Z");
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String TARGET = "127.0.0.1:50061";

  /** Both clocks read the step's {@code at}. */
  static final class FakeClock implements RegistrationState.Clock {
    long nowMillis;

    @Override
    public long monotonicNanos() {
      return TimeUnit.MILLISECONDS.toNanos(nowMillis);
    }

    @Override
    public long wallEpochNanos() {
      return TimeUnit.SECONDS.toNanos(WALL_ZERO.getEpochSecond()) + TimeUnit.MILLISECONDS.toNanos(nowMillis);
    }
  }

  /** An output the core produced, with the {@code at} of the step that produced it. */
  record Produced(long at, String what) {
    @Override
    public String toString() {
      return "@" + at + " " + what;
    }
  }

  /** An output a case expects; {@code at} null when any step before the next expected one will do. */
  record Expected(Long at, String what) {
    @Override
    public String toString() {
      return (at == null ? "@any" : "@" + at) + " " + what;
    }
  }

  static JsonNode cases() throws IOException {
    assertTrue(Files.isRegularFile(CASES), "the protocol cases are at " + CASES);
    return JSON.readTree(CASES.toFile()).get("cases");
  }

  @TestFactory
  Stream<DynamicTest> everyProtocolCase() throws IOException {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode c : cases()) {
      tests.add(DynamicTest.dynamicTest(c.get("name").asText(), () -> run(c)));
    }
    return tests.stream();
  }

  @Test
  void theCasesFileHoldsCasesWithDistinctNames() throws IOException {
    Set<String> names = new HashSet<>();
    for (JsonNode c : cases()) {
      assertTrue(names.add(c.get("name").asText()), "duplicate case name " + c.get("name"));
      assertFalse(c.get("steps").isEmpty());
    }
    assertFalse(names.isEmpty(), "no cases in " + CASES);
  }

  /** The harness itself: a case whose expectation is wrong in any way fails. */
  @Test
  void theHarnessFailsACaseThatExpectsSomethingElse() throws IOException {
    String steps = "[{\"at\": 0, \"stream\": \"open\"},"
        + "{\"at\": 0, \"event\": \"registered\", \"instance_id\": \"i\"},"
        + "{\"at\": 0, \"event\": \"lease\", \"valid_for\": 3000},"
        + "{\"at\": 100, \"event\": \"trigger\", \"execution_id\": \"e1\", \"items\": [0]},"
        + "{\"at\": 200, \"done\": {\"execution_id\": \"e1\", \"item\": 0, \"outcome\": \"complete\"}}]";
    String start = "{\"at\": 100, \"start\": {\"execution_id\": \"e1\", \"item\": 0}}";
    String complete = "{\"at\": 200, \"call\": \"complete\", \"execution_id\": \"e1\", \"items\": [0]}";
    run(JSON.readTree("{\"name\": \"ok\", \"steps\": " + steps + ", \"expect\": [" + start + ", " + complete + "]}"));
    for (String expect : List.of(
        "[" + start + "]", // an output the case does not expect
        "[" + start + ", " + complete + ", {\"stop\": true}]", // a missing output
        "[" + start + ", " + complete.replace("200", "150") + "]", // at the wrong time
        "[" + start + ", " + complete.replace("complete", "report_failure") + "]", // another call
        "[" + complete + ", " + start + "]")) { // out of order
      JsonNode c = JSON.readTree("{\"name\": \"wrong\", \"steps\": " + steps + ", \"expect\": " + expect + "}");
      org.junit.jupiter.api.Assertions.assertThrows(AssertionError.class, () -> run(c), expect);
    }
  }

  /** The harness compares reconnect decisions and fatal stops too, delay, code and reason. */
  @Test
  void theHarnessFailsACaseThatExpectsAnotherDecision() throws IOException {
    String settings = "{\"backoff_initial_ms\": 100, \"backoff_max_ms\": 1000, \"connect_timeout_ms\": 1000}";
    String lost = "[{\"at\": 0, \"stream\": \"open\"},"
        + "{\"at\": 0, \"event\": \"registered\", \"instance_id\": \"i\"},"
        + "{\"at\": 0, \"event\": \"assignment\", \"items\": [0]},"
        + "{\"at\": 50, \"stream\": \"ended\", \"status\": \"UNAVAILABLE\"},"
        + "{\"at\": 150, \"stream\": \"open\"},"
        + "{\"at\": 160, \"stream\": \"ended\"}]";
    String reconnects = "{\"at\": 50, \"reconnect\": {\"after_ms\": 100}}, {\"at\": 160, \"reconnect\": {\"after_ms\": 200}}";
    run(JSON.readTree("{\"name\": \"ok\", \"settings\": " + settings + ", \"steps\": " + lost
        + ", \"expect\": [" + reconnects + "]}"));
    String refused = "[{\"at\": 0, \"stream\": \"open\"},"
        + "{\"at\": 5, \"stream\": \"ended\", \"status\": \"NOT_FOUND\", \"reason\": \"JOB_NOT_FOUND\"}]";
    String fatal = "{\"at\": 5, \"stop\": true, \"error\": \"NOT_FOUND\", \"reason\": \"JOB_NOT_FOUND\"}";
    run(JSON.readTree("{\"name\": \"ok\", \"settings\": " + settings + ", \"steps\": " + refused
        + ", \"expect\": [" + fatal + "]}"));
    for (String[] wrong : new String[][] {
        {lost, "{\"at\": 50, \"reconnect\": {\"after_ms\": 100}}, {\"at\": 160, \"reconnect\": {\"after_ms\": 100}}"},
        {lost, "{\"at\": 50, \"reconnect\": {\"after_ms\": 100}}, {\"at\": 160, \"stop\": true}"},
        {lost, "{\"at\": 50, \"reconnect\": {\"after_ms\": 100}}"},
        {refused, "{\"at\": 5, \"stop\": true}"},
        {refused, "{\"at\": 5, \"stop\": true, \"error\": \"NOT_FOUND\"}"},
        {refused, "{\"at\": 5, \"stop\": true, \"error\": \"UNAVAILABLE\", \"reason\": \"JOB_NOT_FOUND\"}"},
        {refused, "{\"at\": 5, \"reconnect\": {\"after_ms\": 100}}"}}) {
      JsonNode c = JSON.readTree("{\"name\": \"wrong\", \"settings\": " + settings + ", \"steps\": " + wrong[0]
          + ", \"expect\": [" + wrong[1] + "]}");
      org.junit.jupiter.api.Assertions.assertThrows(AssertionError.class, () -> run(c), wrong[1]);
    }
  }

  // ---- one case -----------------------------------------------------------------------------

  static void run(JsonNode c) {
    FakeClock clock = new FakeClock();
    RegistrationState state = state(c.get("settings"), clock);
    List<Produced> produced = new ArrayList<>();
    Map<String, ItemKey> started = new HashMap<>(); // "exec/item" -> key
    Set<ItemKey> returned = new HashSet<>();
    Map<String, Call> lastCall = new HashMap<>(); // "rpc exec" -> last call
    Map<Long, Call> pending = new HashMap<>();
    long lastAt = Long.MIN_VALUE;
    int stepNo = 0;
    for (JsonNode step : c.get("steps")) {
      stepNo++;
      String where = "step " + stepNo + " " + step;
      long at = step.get("at").asLong();
      assertTrue(at >= lastAt, "steps go forward in time: " + where);
      lastAt = at;
      clock.nowMillis = at;
      List<Output> outputs;
      if (step.has("stream")) {
        outputs = switch (step.get("stream").asText()) {
          case "open" -> state.streamOpened();
          case "ended" -> {
            boolean decides = state.isStreamOpen() && !state.isStopped();
            List<Output> out = state.streamEnded(state.generation(), streamEnd(step));
            if (decides) {
              // The README: every end of the open stream is followed by exactly one decision, last.
              List<Output> decisions = out.stream()
                  .filter(o -> o instanceof RegistrationState.Reconnect || o instanceof Stop).toList();
              assertEquals(1, decisions.size(), "one decision (stop or reconnect) at " + where + ": " + out);
              assertEquals(decisions.get(0), out.get(out.size() - 1), "the decision comes last at " + where);
            }
            yield out;
          }
          default -> throw new AssertionError("unknown stream step: " + where);
        };
      } else if (step.has("event")) {
        outputs = state.onEvent(state.generation(), event(step, where));
      } else if (step.has("done")) {
        JsonNode done = step.get("done");
        ItemKey key = startedKey(started, done, where);
        String outcome = done.get("outcome").asText();
        assertTrue(outcome.equals("complete") || outcome.equals("failure"), "outcome: " + where);
        returned.add(key);
        outputs = state.itemDone(key, outcome.equals("failure") ? "java.lang.IllegalStateException: failed" : null);
      } else if (step.has("answer_result")) {
        JsonNode r = step.get("answer_result");
        String rpc = r.get("rpc").asText();
        Call call = lastCall.get(rpc + " " + r.get("execution_id").asText());
        if (call == null) {
          throw new AssertionError("no " + rpc + " call was made to answer: " + where);
        }
        assertTrue(pending.remove(call.id()) != null, "the result of a call that is not pending: " + where);
        outputs = state.callResult(call.id(), result(r.get("status").asText()));
      } else if (step.has("check")) {
        ItemKey key = startedKey(started, step.get("check"), where);
        RegistrationState.Check check = state.check(key);
        assertEquals(step.get("cancelled").asBoolean(), check.cancelled(), "isCancelled() at " + where);
        outputs = check.outputs();
      } else if (step.has("tick")) {
        outputs = state.tick();
      } else if (step.has("close")) {
        // JobRegistration.close(): graces long enough that no case reaches them.
        outputs = state.close("closed by the case", java.time.Duration.ofSeconds(10), java.time.Duration.ofSeconds(10));
      } else {
        throw new AssertionError("unknown step: " + where);
      }
      for (Output o : outputs) {
        if (o instanceof RegistrationState.Notice) {
          continue; // for the application's listener, not part of the protocol
        }
        if (o instanceof Start s) {
          started.put(s.key().executionId() + "/" + s.key().item(), s.key());
        } else if (o instanceof Cancel x) {
          assertFalse(returned.contains(x.key()), "cancel of an item whose handler returned, at " + where);
        } else if (o instanceof Call call) {
          for (Call p : pending.values()) {
            assertFalse(p.rpc() == call.rpc() && p.executionId().equals(call.executionId())
                    && p.items().equals(call.items()),
                "a repeat of a call whose result is pending, at " + where + ": " + call);
          }
          pending.put(call.id(), call);
          lastCall.put(rpcName(call.rpc()) + " " + call.executionId(), call);
        }
        produced.add(new Produced(at, render(o)));
      }
    }
    compare(expected(c.get("expect")), produced);
  }

  /**
   * The state of a case: its {@code settings} (README: reconnect policy and stop on drain),
   * the backoff's jitter fixed at its middle so that every delay is the nominal one.
   */
  static RegistrationState state(JsonNode settings, FakeClock clock) {
    Map<String, Long> millis = new HashMap<>(Map.of(
        "backoff_initial_ms", 100L, "backoff_max_ms", 5000L, "connect_timeout_ms", 10_000L));
    boolean stopOnDrain = false;
    if (settings != null) {
      for (Iterator<String> keys = settings.fieldNames(); keys.hasNext(); ) {
        String key = keys.next();
        if (key.equals("stop_on_drain")) {
          stopOnDrain = settings.get(key).asBoolean();
        } else if (millis.containsKey(key)) {
          millis.put(key, settings.get(key).asLong());
        } else {
          throw new AssertionError("unknown setting " + key + " in " + settings);
        }
      }
    }
    ReconnectPolicy policy = new ReconnectPolicy(TARGET, "job",
        java.time.Duration.ofMillis(millis.get("connect_timeout_ms")),
        new Backoff(java.time.Duration.ofMillis(millis.get("backoff_initial_ms")),
            java.time.Duration.ofMillis(millis.get("backoff_max_ms")), () -> 0.5));
    return new RegistrationState("job", clock, stopOnDrain, policy);
  }

  /**
   * How a {@code stream: ended} step reaches the client: null for {@code OK} (the sidecar closed
   * the stream), else the status as gRPC reports it, with an {@code ErrorInfo} when the step
   * names a {@code reason}.
   */
  static Throwable streamEnd(JsonNode step) {
    String status = step.has("status") ? step.get("status").asText() : "OK";
    if (status.equals("OK")) {
      assertFalse(step.has("reason"), "a reason without an error status: " + step);
      return null;
    }
    Status.Code code = Status.Code.valueOf(status);
    if (!step.has("reason")) {
      return Status.fromCode(code).withDescription("ended by the case").asRuntimeException();
    }
    return StatusProto.toStatusRuntimeException(com.google.rpc.Status.newBuilder()
        .setCode(code.value())
        .setMessage("ended by the case")
        .addDetails(Any.pack(ErrorInfo.newBuilder()
            .setDomain(ErrorReasons.DOMAIN)
            .setReason(step.get("reason").asText())
            .build()))
        .build());
  }

  /** The status code name a fatal error stands for: its exception class, else its gRPC status. */
  static String errorName(ShardcarException e) {
    if (e instanceof SidecarUnavailableException) {
      return "UNAVAILABLE";
    } else if (e instanceof InvalidJobConfigException) {
      return "INVALID_ARGUMENT";
    } else if (e instanceof JobNotFoundException) {
      return "NOT_FOUND";
    } else if (e instanceof InstanceConflictException) {
      return "ALREADY_EXISTS";
    }
    return Status.fromThrowable(e).getCode().name();
  }

  static ItemKey startedKey(Map<String, ItemKey> started, JsonNode ref, String where) {
    ItemKey key = started.get(ref.get("execution_id").asText() + "/" + ref.get("item").asInt());
    if (key == null) {
      throw new AssertionError("the item was never started: " + where);
    }
    return key;
  }

  static SubscribeResponse event(JsonNode step, String where) {
    long at = step.get("at").asLong();
    long sentAt = step.has("sent_at") ? step.get("sent_at").asLong() : at;
    return switch (step.get("event").asText()) {
      case "registered" -> SubscribeResponse.newBuilder()
          .setRegistered(Registered.newBuilder().setInstanceId(step.get("instance_id").asText()))
          .build();
      case "assignment" -> {
        io.shardcar.v1.Assignment.Builder a = io.shardcar.v1.Assignment.newBuilder();
        step.get("items").forEach(i -> a.addItems(ShardItem.newBuilder().setItem(i.asInt())));
        yield SubscribeResponse.newBuilder().setAssignment(a).build();
      }
      case "lease" -> {
        long validFor = step.get("valid_for").asLong();
        yield SubscribeResponse.newBuilder()
            .setLease(Lease.newBuilder()
                .setValidFor(Duration.newBuilder()
                    .setSeconds(validFor / 1000)
                    .setNanos((int) TimeUnit.MILLISECONDS.toNanos(validFor % 1000)))
                .setExpiresAt(wall(sentAt + validFor)))
            .build();
      }
      case "trigger" -> {
        String execution = step.get("execution_id").asText();
        Trigger.Builder t = Trigger.newBuilder()
            .setExecutionId(execution)
            .setTaskId("job@-@" + step.get("items") + "@-@READY@-@10.0.0.1@-@7")
            .setShardingTotalCount(4)
            .setFireTime(wall(sentAt));
        for (JsonNode item : step.get("items")) {
          t.addItems(ShardItem.newBuilder().setItem(item.asInt()));
          t.putFencingTokens(item.asInt(), 1);
        }
        yield SubscribeResponse.newBuilder().setTrigger(t).build();
      }
      case "revoke" -> {
        Revoke.Builder r = Revoke.newBuilder().setReason("revoked by the case");
        step.get("items").forEach(i -> r.addItems(i.asInt()));
        yield SubscribeResponse.newBuilder().setRevoke(r).build();
      }
      case "shutdown" -> SubscribeResponse.newBuilder()
          .setShutdown(Shutdown.newBuilder().setReason("shutdown by the case").setKind(shutdownKind(step, where)))
          .build();
      default -> throw new AssertionError("unknown event: " + where);
    };
  }

  /** A shutdown step's {@code kind}: drain, remote, or (absent) unspecified, which means drain. */
  static ShutdownKind shutdownKind(JsonNode step, String where) {
    JsonNode kind = step.get("kind");
    if (kind == null) {
      return ShutdownKind.SHUTDOWN_KIND_UNSPECIFIED;
    }
    return switch (kind.asText()) {
      case "drain" -> ShutdownKind.SHUTDOWN_KIND_DRAIN;
      case "remote" -> ShutdownKind.SHUTDOWN_KIND_REMOTE;
      default -> throw new AssertionError("unknown shutdown kind " + kind + ": " + where);
    };
  }

  static Timestamp wall(long millis) {
    Instant t = WALL_ZERO.plusMillis(millis);
    return Timestamp.newBuilder().setSeconds(t.getEpochSecond()).setNanos(t.getNano()).build();
  }

  /** A status name of the schema as the driver would see it, classified by the client's own rules. */
  static CallResult result(String status) {
    if (status.equals("OK")) {
      return CallResult.accepted();
    }
    Status s = status.equals("INTERNAL_GOAWAY")
        ? Status.INTERNAL.withDescription("Received Goaway; stream closed by the server")
        : Status.fromCode(Status.Code.valueOf(status)).withDescription("from the case");
    return Errors.callResult("127.0.0.1:50061", "answer", s.asRuntimeException());
  }

  static String rpcName(RegistrationState.Rpc rpc) {
    return switch (rpc) {
      case COMPLETE -> "complete";
      case REPORT_FAILURE -> "report_failure";
      case DECLINE -> "decline";
    };
  }

  static String render(Output o) {
    if (o instanceof Start s) {
      return "start " + s.key().executionId() + "/" + s.key().item();
    } else if (o instanceof Cancel c) {
      return "cancel " + c.key().executionId() + "/" + c.key().item();
    } else if (o instanceof Call c) {
      return "call " + rpcName(c.rpc()) + " " + c.executionId() + " " + new TreeSet<>(c.items());
    } else if (o instanceof RegistrationState.Reconnect r) {
      return "reconnect after " + r.delayMillis() + " ms";
    } else if (o instanceof Stop stop) {
      if (stop.fatal() == null) {
        return "stop";
      }
      return "stop error=" + errorName(stop.fatal()) + stop.fatal().getReason().map(r -> " reason=" + r).orElse("");
    }
    throw new AssertionError("not a protocol output: " + o);
  }

  static List<Expected> expected(JsonNode expect) {
    List<Expected> out = new ArrayList<>();
    for (JsonNode e : expect) {
      Long at = e.has("at") ? e.get("at").asLong() : null;
      String what;
      if (e.has("start")) {
        what = "start " + e.get("start").get("execution_id").asText() + "/" + e.get("start").get("item").asInt();
      } else if (e.has("cancel")) {
        what = "cancel " + e.get("cancel").get("execution_id").asText() + "/" + e.get("cancel").get("item").asInt();
      } else if (e.has("call")) {
        TreeSet<Integer> items = new TreeSet<>();
        e.get("items").forEach(i -> items.add(i.asInt()));
        what = "call " + e.get("call").asText() + " " + e.get("execution_id").asText() + " " + items;
      } else if (e.has("reconnect")) {
        what = "reconnect after " + e.get("reconnect").get("after_ms").asLong() + " ms";
      } else if (e.has("stop")) {
        what = "stop" + (e.has("error") ? " error=" + e.get("error").asText() : "")
            + (e.has("reason") ? " reason=" + e.get("reason").asText() : "");
      } else {
        throw new AssertionError("unknown expected output: " + e);
      }
      out.add(new Expected(at, what));
    }
    return out;
  }

  /** In order; {@code at} where given; an output without one before the next expected output's time. */
  static void compare(List<Expected> expected, List<Produced> produced) {
    String both = "\n  expected: " + expected + "\n  produced: " + produced;
    Iterator<Produced> it = produced.iterator();
    for (int i = 0; i < expected.size(); i++) {
      Expected e = expected.get(i);
      if (!it.hasNext()) {
        fail("missing output #" + (i + 1) + " " + e + both);
      }
      Produced p = it.next();
      assertEquals(e.what(), p.what(), "output #" + (i + 1) + both);
      if (e.at() != null) {
        assertEquals(e.at().longValue(), p.at(), "time of output #" + (i + 1) + " " + e.what() + both);
      } else {
        Long nextAt = expected.stream().skip(i + 1).map(Expected::at).filter(a -> a != null).findFirst().orElse(null);
        assertTrue(nextAt == null || p.at() <= nextAt,
            "output #" + (i + 1) + " " + e.what() + " came after the next expected output" + both);
      }
    }
    if (it.hasNext()) {
      List<Produced> extra = new ArrayList<>();
      it.forEachRemaining(extra::add);
      fail("outputs no case expects: " + extra.stream().map(Produced::toString).collect(Collectors.joining(", ")) + both);
    }
  }
}
