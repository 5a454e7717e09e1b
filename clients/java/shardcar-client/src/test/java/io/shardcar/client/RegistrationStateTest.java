package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.rpc.Code;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.shardcar.client.ProtocolCasesTest.FakeClock;
import io.shardcar.client.RegistrationState.Call;
import io.shardcar.client.RegistrationState.CallResult;
import io.shardcar.client.RegistrationState.Cancel;
import io.shardcar.client.RegistrationState.ItemKey;
import io.shardcar.client.RegistrationState.Output;
import io.shardcar.client.RegistrationState.Rpc;
import io.shardcar.client.RegistrationState.Start;
import io.shardcar.client.RegistrationState.Stop;
import io.shardcar.v1.Lease;
import io.shardcar.v1.Registered;
import io.shardcar.v1.ShardItem;
import io.shardcar.v1.Shutdown;
import io.shardcar.v1.SubscribeResponse;
import io.shardcar.v1.Trigger;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** Rules of {@link RegistrationState} beyond the shared protocol cases. */
class RegistrationStateTest {
  private static final SubscribeResponse REGISTERED = SubscribeResponse.newBuilder()
      .setRegistered(Registered.newBuilder().setInstanceId("10.0.0.1@-@7")).build();
  private static final SubscribeResponse ASSIGNMENT = SubscribeResponse.newBuilder()
      .setAssignment(io.shardcar.v1.Assignment.newBuilder().addItems(ShardItem.newBuilder().setItem(0))).build();

  private final FakeClock clock = new FakeClock();

  /** Registered and assigned (the sidecar sends the assignment right after {@code Registered}). */
  private RegistrationState registered(boolean stopOnDrain) {
    RegistrationState s = new RegistrationState("job", clock, stopOnDrain);
    s.streamOpened();
    s.onEvent(s.generation(), REGISTERED);
    s.onEvent(s.generation(), ASSIGNMENT);
    return s;
  }

  private static SubscribeResponse lease(long validForMillis, long expiresAtMillis) {
    return SubscribeResponse.newBuilder().setLease(Lease.newBuilder()
        .setValidFor(com.google.protobuf.Duration.newBuilder()
            .setSeconds(validForMillis / 1000)
            .setNanos((int) TimeUnit.MILLISECONDS.toNanos(validForMillis % 1000)))
        .setExpiresAt(ProtocolCasesTest.wall(expiresAtMillis)))
        .build();
  }

  private static SubscribeResponse trigger(String execution, int... items) {
    Trigger.Builder t = Trigger.newBuilder().setExecutionId(execution).setShardingTotalCount(4);
    for (int i : items) {
      t.addItems(ShardItem.newBuilder().setItem(i));
    }
    return SubscribeResponse.newBuilder().setTrigger(t).build();
  }

  private static <T> List<T> only(List<Output> outputs, Class<T> kind) {
    return outputs.stream().filter(kind::isInstance).map(kind::cast).toList();
  }

  private ItemKey start(RegistrationState s, String execution) {
    List<Start> started = only(s.onEvent(s.generation(), trigger(execution, 0)), Start.class);
    assertEquals(1, started.size());
    return started.get(0).key();
  }

  @Test
  void anExpiresAtEarlierThanValidForBoundsTheLease() {
    RegistrationState s = registered(true);
    // Sent 2 s before it was read (valid_for 3 s): 1 s is left on the host's clock.
    s.onEvent(s.generation(), lease(3000, 1000));
    assertTrue(s.leaseValid());
    ItemKey key = start(s, "e1");
    assertEquals(TimeUnit.MILLISECONDS.toNanos(1000), s.nextWakeupNanos().orElseThrow(), "the timer is set for the wall deadline");
    clock.nowMillis = 999;
    assertFalse(s.check(key).cancelled());
    clock.nowMillis = 1000;
    RegistrationState.Check check = s.check(key);
    assertTrue(check.cancelled(), "void at its expires_at although valid_for has 2 s left");
    assertEquals(1, only(check.outputs(), Cancel.class).size());
    assertEquals(1, only(check.outputs(), RegistrationState.LeaseExpired.class).size());
  }

  @Test
  void aLeaseWithoutExpiresAtIsBoundedByValidForAlone() {
    RegistrationState s = registered(true);
    s.onEvent(s.generation(), SubscribeResponse.newBuilder().setLease(Lease.newBuilder()
        .setValidFor(com.google.protobuf.Duration.newBuilder().setSeconds(3))).build());
    clock.nowMillis = 2999;
    assertTrue(s.leaseValid());
    clock.nowMillis = 3000;
    assertFalse(s.leaseValid());
  }

  @Test
  void aTriggerWithoutASourceIsRunWithAnUnknownSourceNotAsACronFire() {
    RegistrationState s = registered(true);
    s.onEvent(s.generation(), lease(10_000, 10_000));
    List<Start> started = only(s.onEvent(s.generation(), trigger("e1", 0, 1)), Start.class);
    assertEquals(2, started.size());
    started.forEach(st -> assertEquals(TriggerSource.UNKNOWN, st.context().getSource()));

    SubscribeResponse manual = SubscribeResponse.newBuilder().setTrigger(trigger("e2", 2).getTrigger().toBuilder()
        .setSource(io.shardcar.v1.TriggerSource.TRIGGER_SOURCE_MANUAL)).build();
    started = only(s.onEvent(s.generation(), manual), Start.class);
    assertEquals(1, started.size());
    assertEquals(TriggerSource.MANUAL, started.get(0).context().getSource());
  }

  @Test
  void closeDeclinesNewWorkLetsRunningWorkAnswerThenStops() {
    RegistrationState s = registered(true);
    s.onEvent(s.generation(), lease(3000, 3000));
    ItemKey key = start(s, "e1");
    assertTrue(s.close("closed by the worker", Duration.ofSeconds(2), Duration.ofSeconds(1)).isEmpty(), "an item still runs");
    List<Call> declined = only(s.onEvent(s.generation(), trigger("e2", 1)), Call.class);
    assertEquals(Rpc.DECLINE, declined.get(0).rpc(), "no new work while closing");
    assertFalse(s.check(key).cancelled(), "the running item may finish");
    List<Call> complete = only(s.itemDone(key, null), Call.class);
    assertEquals(Rpc.COMPLETE, complete.get(0).rpc());
    List<Output> out = s.callResult(declined.get(0).id(), CallResult.accepted());
    assertTrue(only(out, Stop.class).isEmpty(), "the completion is still in flight");
    out = s.callResult(complete.get(0).id(), CallResult.accepted());
    assertEquals(1, only(out, RegistrationState.Answered.class).size());
    Stop stop = only(out, Stop.class).get(0);
    assertFalse(stop.bySidecar());
    assertTrue(s.isStopped());
  }

  @Test
  void closeCancelsWhatStillRunsWhenTheGraceIsOverAndDeclinesItOnceItReturns() {
    RegistrationState s = registered(true);
    s.onEvent(s.generation(), lease(10_000, 10_000));
    ItemKey key = start(s, "e1");
    s.close("closed by the worker", Duration.ofSeconds(2), Duration.ofSeconds(5));
    clock.nowMillis = 2000;
    List<Output> out = s.tick();
    assertEquals(List.of(key), only(out, Cancel.class).stream().map(Cancel::key).toList());
    Call decline = only(s.itemDone(key, null), Call.class).get(0);
    assertEquals(Rpc.DECLINE, decline.rpc());
    assertEquals(1, only(s.callResult(decline.id(), CallResult.accepted()), Stop.class).size());
  }

  @Test
  void afterShutdownTheRegistrationStopsOnlyOnceTheStreamHasEnded() {
    RegistrationState s = registered(true);
    s.onEvent(s.generation(), SubscribeResponse.newBuilder().setShutdown(Shutdown.newBuilder().setReason("drain")).build());
    assertFalse(s.isStopped());
    Stop stop = only(s.streamEnded(s.generation(), null), Stop.class).get(0);
    assertTrue(stop.bySidecar());
  }

  @Test
  void theRulingOnAnAnswerInFlightWhenTheStreamEndedIsStillReported() {
    // The sidecar records the answer and ends the stream at once: the end can overtake the reply.
    RegistrationState s = registered(true);
    s.onEvent(s.generation(), lease(3000, 3000));
    ItemKey key = start(s, "e1");
    s.onEvent(s.generation(), SubscribeResponse.newBuilder().setShutdown(Shutdown.getDefaultInstance()).build());
    Call complete = only(s.itemDone(key, null), Call.class).get(0);
    assertEquals(1, only(s.streamEnded(s.generation(), null), Stop.class).size());
    assertTrue(s.hasCallsInFlight());
    List<Output> out = s.callResult(complete.id(), CallResult.accepted());
    RegistrationState.Answered answered = only(out, RegistrationState.Answered.class).get(0);
    assertNull(answered.refused());
    assertEquals(out, only(out, RegistrationState.Notice.class), "only a notice: nothing is sent after the stop");
    assertFalse(s.hasCallsInFlight());
  }

  @Test
  void afterADrainTheEndedStreamIsFollowedByANewSubscription() {
    RegistrationState s = registered(false);
    s.onEvent(s.generation(), SubscribeResponse.newBuilder().setShutdown(Shutdown.getDefaultInstance()).build());
    assertTrue(only(s.streamEnded(s.generation(), null), Stop.class).isEmpty());
    assertFalse(s.isStopped());
    assertTrue(s.streamOpened().isEmpty());
    assertEquals(2, s.generation());
  }

  @Test
  void aTransportFailureIsNeverReportedAsTheSidecarsAnswer() {
    RegistrationState s = registered(true);
    s.onEvent(s.generation(), lease(3000, 3000));
    ItemKey key = start(s, "e1");
    Call complete = only(s.itemDone(key, null), Call.class).get(0);
    CallResult goaway = Errors.callResult("t", "complete", Status.INTERNAL.withDescription("GOAWAY").asRuntimeException());
    assertEquals(CallResult.Kind.TRANSPORT_FAILURE, goaway.kind());
    s.streamEnded(s.generation(), Status.UNAVAILABLE.withDescription("connection closed").asRuntimeException());
    List<Output> out = s.callResult(complete.id(), goaway);
    assertTrue(only(out, RegistrationState.Answered.class).isEmpty(), "not an answer of the sidecar: " + out);
    assertEquals(1, only(out, RegistrationState.Dropped.class).size());
    assertTrue(only(out, Call.class).isEmpty(), "not sent again on an ended stream");
  }

  @Test
  void aRefusalIsTheSidecarsAnswerAndFinal() {
    RegistrationState s = registered(true);
    s.onEvent(s.generation(), lease(3000, 3000));
    ItemKey key = start(s, "e1");
    Call failure = only(s.itemDone(key, "java.lang.IllegalStateException: boom"), Call.class).get(0);
    assertEquals(Rpc.REPORT_FAILURE, failure.rpc());
    assertEquals("java.lang.IllegalStateException: boom", failure.text());
    CallResult refused = Errors.callResult("t", "report failure",
        Status.FAILED_PRECONDITION.withDescription("execution e1 was taken back").asRuntimeException());
    List<Output> out = s.callResult(failure.id(), refused);
    RegistrationState.Answered answered = only(out, RegistrationState.Answered.class).get(0);
    assertEquals("java.lang.IllegalStateException: boom", answered.failure());
    assertTrue(answered.refused().getMessage().contains("FAILED_PRECONDITION"), answered.toString());
    clock.nowMillis = 10_000;
    assertTrue(only(s.tick(), Call.class).isEmpty());
  }

  @Test
  void resendsBackOffUpToTheirMaximum() {
    assertEquals(TimeUnit.MILLISECONDS.toNanos(100), RegistrationState.resendDelayNanos(1));
    assertEquals(TimeUnit.MILLISECONDS.toNanos(200), RegistrationState.resendDelayNanos(2));
    assertEquals(TimeUnit.MILLISECONDS.toNanos(1600), RegistrationState.resendDelayNanos(5));
    assertEquals(TimeUnit.SECONDS.toNanos(2), RegistrationState.resendDelayNanos(6));
    assertEquals(TimeUnit.SECONDS.toNanos(2), RegistrationState.resendDelayNanos(1000));
  }

  @Test
  void aRenewalAfterAGapDoesNotBridgeIt() {
    RegistrationState s = registered(true);
    s.onEvent(s.generation(), lease(1000, 1000));
    ItemKey key = start(s, "e1");
    clock.nowMillis = 1500; // the worker was paused; this renewal was sent just now and is valid
    List<Output> out = s.onEvent(s.generation(), lease(1000, 2500));
    assertEquals(1, only(out, Cancel.class).size(), "the gap cancelled the item before the renewal applied");
    assertTrue(s.leaseValid());
    assertTrue(s.check(key).cancelled());
    assertEquals(Rpc.DECLINE, only(s.itemDone(key, null), Call.class).get(0).rpc(), "declined, never answered");
  }

  @Test
  void aDeclinedTriggerRepeatedLaterStartsNothing() {
    RegistrationState s = registered(true);
    assertEquals(Rpc.DECLINE, only(s.onEvent(s.generation(), trigger("e1", 0)), Call.class).get(0).rpc());
    s.onEvent(s.generation(), lease(3000, 3000));
    assertTrue(s.onEvent(s.generation(), trigger("e1", 0)).isEmpty());
  }

  @Test
  void transportFailuresAreTheCodesNoSidecarReplyCarries() {
    for (Status status : List.of(Status.UNAVAILABLE, Status.CANCELLED, Status.DEADLINE_EXCEEDED, Status.INTERNAL,
        Status.UNKNOWN)) {
      assertTrue(Errors.isTransportFailure(status.asRuntimeException()), status.toString());
    }
    for (Status status : List.of(Status.FAILED_PRECONDITION, Status.PERMISSION_DENIED, Status.INVALID_ARGUMENT,
        Status.NOT_FOUND, Status.ALREADY_EXISTS)) {
      assertFalse(Errors.isTransportFailure(status.asRuntimeException()), status.toString());
      CallResult r = Errors.callResult("t", "x", status.asRuntimeException());
      assertEquals(CallResult.Kind.REFUSED, r.kind());
      assertInstanceOf(ShardcarException.class, r.refusal());
    }
    assertNull(Errors.callResult("t", "x", null).refusal());
  }

  // ---- reconnects and fatal errors (ReconnectPolicy) -----------------------------------------

  private static final String TARGET = "127.0.0.1:50061";

  /** Connect timeout 1 s, backoff 100 ms to 400 ms, the jitter fixed at its middle (factor 1). */
  private RegistrationState withPolicy(boolean stopOnDrain) {
    return new RegistrationState("job", clock, stopOnDrain, new ReconnectPolicy(TARGET, "job",
        Duration.ofSeconds(1), new Backoff(Duration.ofMillis(100), Duration.ofMillis(400), () -> 0.5)));
  }

  private static RegistrationState.Reconnect reconnect(List<Output> out) {
    List<RegistrationState.Reconnect> found = only(out, RegistrationState.Reconnect.class);
    assertEquals(1, found.size(), "one reconnect: " + out);
    assertTrue(only(out, Stop.class).isEmpty(), "and no stop: " + out);
    assertEquals(found.get(0), out.get(out.size() - 1), "the reconnect comes last: " + out);
    return found.get(0);
  }

  /** The fatal stop of a first subscription. */
  private static Stop fatal(List<Output> out) {
    return fatal(out, RegistrationState.FIRST_SUBSCRIPTION_FAILED);
  }

  private static Stop fatal(List<Output> out, String reason) {
    List<Stop> found = only(out, Stop.class);
    assertEquals(1, found.size(), "one stop: " + out);
    assertTrue(only(out, RegistrationState.Reconnect.class).isEmpty(), "and no reconnect: " + out);
    Stop stop = found.get(0);
    assertEquals(stop, out.get(out.size() - 1), "the stop comes last: " + out);
    assertFalse(stop.bySidecar());
    assertEquals(reason, stop.reason());
    assertTrue(stop.fatal() != null, "a fatal error: " + stop);
    return stop;
  }

  @Test
  void aFirstSubscriptionThatCannotConnectIsTriedAgainWithBackoffUntilTheConnectTimeout() {
    RegistrationState s = withPolicy(true);
    StatusRuntimeException refused = Status.UNAVAILABLE.withDescription("io exception").asRuntimeException();
    long[] delays = new long[4];
    for (int i = 0; i < delays.length; i++) {
      s.streamOpened();
      RegistrationState.Reconnect r = reconnect(s.streamEnded(s.generation(), refused));
      assertFalse(r.disconnected(), "not registered yet: the listener hears nothing");
      assertInstanceOf(SidecarUnavailableException.class, r.cause());
      delays[i] = r.delayMillis();
      clock.nowMillis += r.delayMillis();
    }
    assertEquals(List.of(100L, 200L, 400L, 400L), java.util.Arrays.stream(delays).boxed().toList(),
        "doubling up to the maximum");
    assertEquals(1100, clock.nowMillis);
    // The deadline runs from the first subscription (at 0), not from the latest one.
    s.streamOpened();
    Stop stop = fatal(s.streamEnded(s.generation(), refused));
    SidecarUnavailableException e = assertInstanceOf(SidecarUnavailableException.class, stop.fatal());
    assertEquals(TARGET, e.getTarget());
    assertTrue(e.getMessage().startsWith("subscribe to job 'job': cannot reach the shardcar sidecar at " + TARGET),
        e.getMessage());
    assertTrue(s.isStopped());
    assertTrue(s.streamOpened().isEmpty(), "a stopped registration opens nothing");
  }

  @Test
  void theConnectTimeoutIsTheFirstSubscriptionsDeadlineToTheNanosecond() {
    RegistrationState s = withPolicy(true);
    StatusRuntimeException busy = Status.RESOURCE_EXHAUSTED.asRuntimeException();
    s.streamOpened();
    clock.nowMillis = 999;
    reconnect(s.streamEnded(s.generation(), busy));
    s.streamOpened();
    clock.nowMillis = 1000;
    fatal(s.streamEnded(s.generation(), busy));
  }

  @Test
  void everyTransientStatusOfAFirstSubscriptionIsTriedAgainThenTheDeadlineMakesItUnavailable() {
    for (Status status : List.of(Status.DEADLINE_EXCEEDED, Status.ABORTED, Status.RESOURCE_EXHAUSTED)) {
      clock.nowMillis = 0;
      RegistrationState s = withPolicy(true);
      StatusRuntimeException error = status.withDescription("busy").asRuntimeException();
      s.streamOpened();
      RegistrationState.Reconnect r = reconnect(s.streamEnded(s.generation(), error));
      assertFalse(r.disconnected());
      assertEquals(100, r.delayMillis());
      clock.nowMillis = 1000;
      s.streamOpened();
      Stop stop = fatal(s.streamEnded(s.generation(), error));
      // Whatever the transient status, the deadline's error is UNAVAILABLE, without a reason.
      SidecarUnavailableException e = assertInstanceOf(SidecarUnavailableException.class, stop.fatal(), status.toString());
      assertTrue(e.getReason().isEmpty(), e.toString());
      assertEquals(TARGET, e.getTarget());
      assertEquals("subscribe to job 'job': no registration from the shardcar sidecar at " + TARGET
          + " within the connect timeout of 1000 ms (last stream: " + status.getCode() + ": busy)", e.getMessage());
      assertEquals(error, e.getCause());
    }
  }

  @Test
  void aFirstSubscriptionRefusedBySidecarIsFatalAtOnceWithTheMappedError() {
    record Refusal(StatusRuntimeException status, Class<? extends ShardcarException> kind, String reason) {}
    for (Refusal refusal : List.of(
        new Refusal(ErrorsTest.rich(Code.INVALID_ARGUMENT, "config.cron: bad", "INVALID_ARGUMENT", "config.cron"),
            InvalidJobConfigException.class, ErrorReasons.INVALID_ARGUMENT),
        new Refusal(ErrorsTest.rich(Code.NOT_FOUND, "no job", "JOB_NOT_FOUND", null),
            JobNotFoundException.class, ErrorReasons.JOB_NOT_FOUND),
        new Refusal(ErrorsTest.rich(Code.ALREADY_EXISTS, "live", "ALREADY_EXISTS", null),
            InstanceConflictException.class, ErrorReasons.ALREADY_EXISTS),
        new Refusal(ErrorsTest.rich(Code.FAILED_PRECONDITION, "corrupt", "CORRUPT_JOB_DATA", null),
            ShardcarException.class, ErrorReasons.CORRUPT_JOB_DATA),
        // Not transient for a first subscription: only a broken connection is.
        new Refusal(Status.INTERNAL.withDescription("GOAWAY").asRuntimeException(), ShardcarException.class, null))) {
      RegistrationState s = withPolicy(true);
      s.streamOpened();
      Stop stop = fatal(s.streamEnded(s.generation(), refusal.status()));
      assertInstanceOf(refusal.kind(), stop.fatal(), refusal.toString());
      assertEquals(refusal.reason(), stop.fatal().getReason().orElse(null), stop.fatal().toString());
      assertTrue(stop.fatal().getMessage().startsWith("subscribe to job 'job': "), stop.fatal().getMessage());
      assertTrue(s.isStopped());
    }
  }

  @Test
  void aFirstStreamTheSidecarEndsNormallyIsTriedAgainUntilTheConnectTimeout() {
    // The sidecar may be restarting. register() returns once the assignment is known: until then
    // the connect timeout counts, even after Registered.
    RegistrationState s = withPolicy(true);
    s.streamOpened();
    s.onEvent(s.generation(), REGISTERED);
    RegistrationState.Reconnect r = reconnect(s.streamEnded(s.generation(), null));
    assertFalse(r.disconnected(), "not registered yet: the listener hears nothing");
    assertEquals(100, r.delayMillis(), "Registered reset the backoff");
    assertEquals("subscribe to job 'job': the sidecar ended the stream before registering the worker",
        r.cause().getMessage());
    clock.nowMillis = 1000;
    s.streamOpened();
    Stop stop = fatal(s.streamEnded(s.generation(), null));
    SidecarUnavailableException e = assertInstanceOf(SidecarUnavailableException.class, stop.fatal());
    assertEquals("subscribe to job 'job': no registration from the shardcar sidecar at " + TARGET
        + " within the connect timeout of 1000 ms (last stream: the sidecar ended it)", e.getMessage());
    assertTrue(e.getReason().isEmpty());
    assertTrue(s.isStopped());
  }

  @Test
  void onceRegisteredEveryLostStreamIsFollowedByAReconnectWhateverEndedIt() {
    RegistrationState s = withPolicy(true);
    s.streamOpened();
    s.onEvent(s.generation(), REGISTERED);
    s.onEvent(s.generation(), ASSIGNMENT);
    clock.nowMillis = 60_000; // long past the connect timeout: it no longer matters

    RegistrationState.Reconnect clean = reconnect(s.streamEnded(s.generation(), null));
    assertTrue(clean.disconnected());
    assertEquals(100, clean.delayMillis());
    assertInstanceOf(SidecarUnavailableException.class, clean.cause());
    assertEquals("the sidecar ended the stream of job 'job'", clean.cause().getMessage());

    // A refusal that would have been fatal for the first subscription is tried again now.
    s.streamOpened();
    RegistrationState.Reconnect refused = reconnect(s.streamEnded(s.generation(),
        ErrorsTest.rich(Code.ALREADY_EXISTS, "live", "ALREADY_EXISTS", null)));
    assertTrue(refused.disconnected());
    assertEquals(200, refused.delayMillis(), "no Registered in between: the backoff grows");
    assertInstanceOf(InstanceConflictException.class, refused.cause());
    assertTrue(refused.cause().getMessage().startsWith("stream of job 'job': "), refused.cause().getMessage());

    // The sidecar cannot reach ZooKeeper: UNAVAILABLE with its reason.
    s.streamOpened();
    RegistrationState.Reconnect registry = reconnect(s.streamEnded(s.generation(),
        ErrorsTest.rich(Code.UNAVAILABLE, "zk down", "REGISTRY_UNAVAILABLE", null)));
    assertEquals(400, registry.delayMillis());
    assertEquals(ErrorReasons.REGISTRY_UNAVAILABLE, registry.cause().getReason().orElse(null));

    s.streamOpened();
    assertEquals(400, reconnect(s.streamEnded(s.generation(), Status.UNAVAILABLE.asRuntimeException())).delayMillis(),
        "at most the maximum");
    // Registered again: the backoff starts over.
    s.streamOpened();
    s.onEvent(s.generation(), REGISTERED);
    assertEquals(100, reconnect(s.streamEnded(s.generation(), Status.UNAVAILABLE.asRuntimeException())).delayMillis());
    assertFalse(s.isClosing());
  }

  @Test
  void onceRegisteredARefusalOfTheJobStopsTheRegistrationWithItsError() {
    record Refusal(StatusRuntimeException status, Class<? extends ShardcarException> kind, String reason) {}
    for (Refusal refusal : List.of(
        new Refusal(ErrorsTest.rich(Code.INVALID_ARGUMENT, "config.cron: bad", "INVALID_ARGUMENT", "config.cron"),
            InvalidJobConfigException.class, ErrorReasons.INVALID_ARGUMENT),
        new Refusal(ErrorsTest.rich(Code.NOT_FOUND, "no job", "JOB_NOT_FOUND", null),
            JobNotFoundException.class, ErrorReasons.JOB_NOT_FOUND),
        new Refusal(Status.NOT_FOUND.withDescription("no job").asRuntimeException(), JobNotFoundException.class, null))) {
      clock.nowMillis = 0;
      RegistrationState s = withPolicy(true);
      s.streamOpened();
      s.onEvent(s.generation(), REGISTERED);
      s.onEvent(s.generation(), ASSIGNMENT);
      s.onEvent(s.generation(), lease(3000, 3000));
      ItemKey key = start(s, "e1");
      clock.nowMillis = 60_000; // long past the connect timeout: it does not matter
      // The stream of a registered worker ends with the refusal (or a reconnect is refused).
      List<Output> out = s.streamEnded(s.generation(), refusal.status());
      assertEquals(List.of(key), only(out, Cancel.class).stream().map(Cancel::key).toList());
      Stop stop = fatal(out, RegistrationState.JOB_REFUSED);
      assertInstanceOf(refusal.kind(), stop.fatal(), refusal.toString());
      assertEquals(refusal.reason(), stop.fatal().getReason().orElse(null));
      assertTrue(stop.fatal().getMessage().startsWith("stream of job 'job': "), stop.fatal().getMessage());
      assertTrue(s.isStopped());
      assertTrue(s.itemDone(key, null).isEmpty(), "the void execution is not answered");
      assertTrue(s.streamOpened().isEmpty(), "a stopped registration opens nothing");
    }
  }

  @Test
  void aCloseComesBeforeAFatalErrorWhichComesBeforeAShutdown() {
    // A close the worker asked for: stop without an error, even when the stream ends refused.
    RegistrationState closed = withPolicy(true);
    closed.streamOpened();
    closed.onEvent(closed.generation(), REGISTERED);
    closed.onEvent(closed.generation(), ASSIGNMENT);
    closed.onEvent(closed.generation(), lease(3000, 3000));
    start(closed, "e1");
    assertTrue(closed.close("closed by the worker", Duration.ofSeconds(5), Duration.ofSeconds(1)).isEmpty());
    Stop stop = only(closed.streamEnded(closed.generation(),
        ErrorsTest.rich(Code.NOT_FOUND, "no job", "JOB_NOT_FOUND", null)), Stop.class).get(0);
    assertEquals("closed by the worker", stop.reason());
    assertNull(stop.fatal());

    // A close before the first registration: no error either, even for a refused subscription.
    RegistrationState first = withPolicy(true);
    first.streamOpened();
    first.onEvent(first.generation(), REGISTERED);
    first.onEvent(first.generation(), lease(3000, 3000));
    start(first, "e1"); // something runs, so the close waits for the stream to end
    first.close("closed by the worker", Duration.ofSeconds(5), Duration.ofSeconds(1));
    stop = only(first.streamEnded(first.generation(), Status.INVALID_ARGUMENT.asRuntimeException()), Stop.class).get(0);
    assertNull(stop.fatal());

    // A fatal error after a Shutdown: the error, not the shutdown.
    RegistrationState shut = withPolicy(true);
    shut.streamOpened();
    shut.onEvent(shut.generation(), REGISTERED);
    shut.onEvent(shut.generation(), ASSIGNMENT);
    shut.onEvent(shut.generation(), SubscribeResponse.newBuilder().setShutdown(Shutdown.getDefaultInstance()).build());
    stop = fatal(shut.streamEnded(shut.generation(),
        ErrorsTest.rich(Code.INVALID_ARGUMENT, "config.cron: bad", "INVALID_ARGUMENT", "config.cron")),
        RegistrationState.JOB_REFUSED);
    assertInstanceOf(InvalidJobConfigException.class, stop.fatal());

    // A Shutdown before the first assignment, then a refusal of the first subscription: fatal too.
    RegistrationState early = withPolicy(true);
    early.streamOpened();
    early.onEvent(early.generation(), REGISTERED);
    early.onEvent(early.generation(), SubscribeResponse.newBuilder().setShutdown(Shutdown.getDefaultInstance()).build());
    fatal(early.streamEnded(early.generation(), Status.FAILED_PRECONDITION.asRuntimeException()));

    // A status that is not fatal after a Shutdown: stop without an error, no reconnect.
    RegistrationState busy = withPolicy(true);
    busy.streamOpened();
    busy.onEvent(busy.generation(), REGISTERED);
    busy.onEvent(busy.generation(), ASSIGNMENT);
    busy.onEvent(busy.generation(), SubscribeResponse.newBuilder().setShutdown(Shutdown.getDefaultInstance()).build());
    List<Output> out = busy.streamEnded(busy.generation(), Status.ALREADY_EXISTS.asRuntimeException());
    assertTrue(only(out, RegistrationState.Reconnect.class).isEmpty(), out.toString());
    stop = only(out, Stop.class).get(0);
    assertTrue(stop.bySidecar());
    assertNull(stop.fatal());
  }

  @Test
  void aStreamLostWhileWorkRunsCancelsItBeforeTheReconnect() {
    RegistrationState s = withPolicy(true);
    s.streamOpened();
    s.onEvent(s.generation(), REGISTERED);
    s.onEvent(s.generation(), ASSIGNMENT);
    s.onEvent(s.generation(), lease(3000, 3000));
    ItemKey key = start(s, "e1");
    List<Output> out = s.streamEnded(s.generation(), Status.UNAVAILABLE.asRuntimeException());
    assertEquals(List.of(key), only(out, Cancel.class).stream().map(Cancel::key).toList());
    assertTrue(reconnect(out).disconnected());
    assertTrue(s.itemDone(key, null).isEmpty(), "the void execution is not answered");
  }

  @Test
  void afterARemoteShutdownOrADrainWithStopOnDrainTheEndOfTheStreamStopsTheRegistration() {
    // A remote shutdown stops the registration, whatever stopOnDrain says.
    RegistrationState remote = withPolicy(false);
    remote.streamOpened();
    remote.onEvent(remote.generation(), REGISTERED);
    remote.onEvent(remote.generation(), ASSIGNMENT);
    remote.onEvent(remote.generation(), SubscribeResponse.newBuilder().setShutdown(
        Shutdown.newBuilder().setKind(io.shardcar.v1.ShutdownKind.SHUTDOWN_KIND_REMOTE)).build());
    List<Output> ended = remote.streamEnded(remote.generation(), null);
    assertTrue(only(ended, RegistrationState.Reconnect.class).isEmpty(), ended.toString());
    assertTrue(only(ended, Stop.class).get(0).bySidecar());

    // With stopOnDrain, a drain (here unspecified, which means drain) does too.
    RegistrationState s = withPolicy(true);
    s.streamOpened();
    s.onEvent(s.generation(), REGISTERED);
    s.onEvent(s.generation(), ASSIGNMENT);
    s.onEvent(s.generation(), SubscribeResponse.newBuilder().setShutdown(Shutdown.getDefaultInstance()).build());
    List<Output> out = s.streamEnded(s.generation(), Status.UNAVAILABLE.asRuntimeException());
    assertTrue(only(out, RegistrationState.Reconnect.class).isEmpty(), out.toString());
    Stop stop = only(out, Stop.class).get(0);
    assertTrue(stop.bySidecar());
    assertNull(stop.fatal(), "done, not failed");

    // By default a drain is followed by a new subscription (a restarted sidecar).
    RegistrationState again = withPolicy(false);
    again.streamOpened();
    again.onEvent(again.generation(), REGISTERED);
    again.onEvent(again.generation(), ASSIGNMENT);
    again.onEvent(again.generation(), SubscribeResponse.newBuilder().setShutdown(Shutdown.getDefaultInstance()).build());
    assertTrue(reconnect(again.streamEnded(again.generation(), null)).disconnected());
  }

  @Test
  void aStreamEndingWhileTheWorkerClosesStopsItAndAStaleEndDecidesNothing() {
    RegistrationState s = withPolicy(true);
    s.streamOpened();
    s.onEvent(s.generation(), REGISTERED);
    s.onEvent(s.generation(), ASSIGNMENT);
    s.onEvent(s.generation(), lease(3000, 3000));
    ItemKey key = start(s, "e1");
    s.close("closed by the worker", Duration.ofSeconds(2), Duration.ofSeconds(1));
    int gen = s.generation();
    assertTrue(s.streamEnded(gen - 1, Status.UNAVAILABLE.asRuntimeException()).isEmpty(), "an earlier stream's end");
    List<Output> out = s.streamEnded(gen, Status.UNAVAILABLE.asRuntimeException());
    assertEquals(List.of(key), only(out, Cancel.class).stream().map(Cancel::key).toList());
    Stop stop = only(out, Stop.class).get(0);
    assertEquals("closed by the worker", stop.reason());
    assertNull(stop.fatal());
    assertTrue(only(out, RegistrationState.Reconnect.class).isEmpty());
    assertTrue(s.streamEnded(gen, null).isEmpty(), "stopped: nothing more");
  }

  @Test
  void aStreamReplacedByANewOneDecidesNoReconnect() {
    RegistrationState s = withPolicy(true);
    s.streamOpened();
    s.onEvent(s.generation(), REGISTERED);
    assertTrue(s.streamOpened().isEmpty(), "the driver is subscribing already: no reconnect, no stop");
    assertEquals(2, s.generation());
  }

  @Test
  void theBackoffJitterIsTwentyPercentEitherWay() {
    assertEquals(80, new Backoff(Duration.ofMillis(100), Duration.ofSeconds(1), () -> 0.0).nextDelayMillis());
    assertEquals(120, new Backoff(Duration.ofMillis(100), Duration.ofSeconds(1), () -> 0.999_999).nextDelayMillis());
    Backoff real = new Backoff(Duration.ofMillis(1000), Duration.ofMillis(1000));
    for (int i = 0; i < 100; i++) {
      long d = real.nextDelayMillis();
      assertTrue(d >= 800 && d <= 1200, Long.toString(d));
    }
  }
}
