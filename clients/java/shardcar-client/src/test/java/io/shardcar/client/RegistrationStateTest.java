package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
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
  private final FakeClock clock = new FakeClock();

  private RegistrationState registered(boolean stopOnShutdown) {
    RegistrationState s = new RegistrationState("job", clock, stopOnShutdown);
    s.streamOpened();
    s.onEvent(s.generation(), SubscribeResponse.newBuilder()
        .setRegistered(Registered.newBuilder().setInstanceId("10.0.0.1@-@7")).build());
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
    Stop stop = only(s.streamEnded(s.generation(), "ended"), Stop.class).get(0);
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
    assertEquals(1, only(s.streamEnded(s.generation(), "drained"), Stop.class).size());
    assertTrue(s.hasCallsInFlight());
    List<Output> out = s.callResult(complete.id(), CallResult.accepted());
    RegistrationState.Answered answered = only(out, RegistrationState.Answered.class).get(0);
    assertNull(answered.refused());
    assertEquals(out, only(out, RegistrationState.Notice.class), "only a notice: nothing is sent after the stop");
    assertFalse(s.hasCallsInFlight());
  }

  @Test
  void withReconnectAfterShutdownTheEndedStreamIsJustLost() {
    RegistrationState s = registered(false);
    s.onEvent(s.generation(), SubscribeResponse.newBuilder().setShutdown(Shutdown.getDefaultInstance()).build());
    assertTrue(only(s.streamEnded(s.generation(), "ended"), Stop.class).isEmpty());
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
    s.streamEnded(s.generation(), "connection closed");
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
}
