package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.client.ProtocolCasesTest.FakeClock;
import io.shardcar.client.RegistrationState.Call;
import io.shardcar.client.RegistrationState.Cancel;
import io.shardcar.client.RegistrationState.ItemKey;
import io.shardcar.client.RegistrationState.Output;
import io.shardcar.client.RegistrationState.Rpc;
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
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Resident jobs without a sidecar: {@link JobConfig.Builder#resident(boolean)} on the wire and
 * refused with what a resident job cannot have, naming the field (as the sidecar's
 * {@code check_resident} would); {@code registerResident} sets it and {@code register} refuses it;
 * {@link ShardingContext#awaitCancelled(Duration)}; and the state's rules for holds: a close and a
 * {@code Shutdown} give every hold back at once (a close by ending the stream once they returned,
 * a {@code Shutdown} by declining them), a hold ended by its handler is answered, and a
 * registration of the wrong kind stops with an error naming {@code resident}.
 * Against a real sidecar: {@code ResidentIntegrationTest}.
 */
class ResidentTest {
  private final FakeClock clock = new FakeClock();

  @Test
  void residentGoesOnTheWireAndComesBack() {
    JobConfig config = JobConfig.newBuilder("p", 3).resident(true)
        .retry(RetryPolicy.newBuilder(2).initialBackoff(Duration.ofMillis(200)).build()).build();
    io.shardcar.v1.JobConfig wire = ProtoMapping.toProto(config);
    assertTrue(wire.getResident());
    assertEquals(config, ProtoMapping.fromProto(wire));
    assertFalse(ProtoMapping.toProto(JobConfig.newBuilder("p", 1).build()).getResident());
    // What the sidecar sends is read as it is (it checked the job when it was written).
    JobConfig stored = ProtoMapping.fromProto(io.shardcar.v1.JobConfig.newBuilder().setJobName("p")
        .setShardingTotalCount(1).setResident(true).setFailover(true).build());
    assertTrue(stored.isResident() && stored.isFailover());
  }

  @Test
  void aResidentConfigTheSidecarWouldRefuseNamesItsField() {
    refused("cron", "has no cron", JobConfig.newBuilder("p", 1).cron("0/5 * * * * ?"));
    refused("failover", "turn failover off", JobConfig.newBuilder("p", 1).failover(true));
    refused("monitorExecution", "turn it on", JobConfig.newBuilder("p", 1).monitorExecution(false));
    refused("executionTimeoutSeconds", "at 0, got 30", JobConfig.newBuilder("p", 1).executionTimeoutSeconds(30));
    // What a resident job may have.
    JobConfig.newBuilder("p", 2).resident(true).cron(" ").monitorExecution(true).misfire(false)
        .shardingItemParameters("0=topic-0,1=topic-1").build();
  }

  private static void refused(String field, String says, JobConfig.Builder builder) {
    builder.build(); // fine for a job that is not resident
    InvalidJobConfigException e = assertThrows(InvalidJobConfigException.class, () -> builder.resident(true).build());
    assertEquals(field, e.getField().orElse(null), e.getMessage());
    assertTrue(e.getMessage().startsWith(field + ": a resident job ") && e.getMessage().contains(says)
        && e.getMessage().endsWith("(or make the job not resident)"), e.getMessage());
  }

  @Test
  void registerRefusesAResidentConfigAndRegisterResidentChecksItsConfig() {
    try (ShardcarWorker worker = ShardcarWorker.builder().target("127.0.0.1:1").build()) {
      JobConfig resident = JobConfig.newBuilder("p", 2).resident(true).build();
      InvalidJobConfigException e = assertThrows(InvalidJobConfigException.class,
          () -> worker.register(resident, ctx -> { }));
      assertEquals("resident", e.getField().orElse(null));
      assertTrue(e.getMessage().contains("registerResident(config, handler)"), e.getMessage());
      assertThrows(InvalidJobConfigException.class, () -> worker.register(resident, new DataflowHandler<String>() {
        @Override
        public List<String> fetch(ShardingContext context) {
          return List.of();
        }

        @Override
        public void process(ShardingContext context, List<String> data) {}
      }));
      // registerResident sets resident, so a cron is refused before anything is sent.
      InvalidJobConfigException cron = assertThrows(InvalidJobConfigException.class,
          () -> worker.registerResident(JobConfig.newBuilder("p", 1).cron("0/5 * * * * ?").build(), ctx -> { }));
      assertEquals("cron", cron.getField().orElse(null));
      assertTrue(worker.getRegistrations().isEmpty());
    }
  }

  @Test
  void aResidentSubscriptionSendsNoExecutorBound() {
    Settings settings = ShardcarWorker.builder().itemConcurrency(3).settings();
    JobConfig config = JobConfig.newBuilder("p", 2).resident(true).build();
    assertEquals(0, JobRegistration.subscribeRequest(settings, "p", config, true).getMaxConcurrentExecutions());
    assertTrue(JobRegistration.subscribeRequest(settings, "p", config, true).getConfig().getResident());
    assertEquals(3, JobRegistration.subscribeRequest(settings, "p", null, false).getMaxConcurrentExecutions());
  }

  @Test
  void awaitCancelledReturnsWhenCancelledOrWhenTheTimeIsUp() throws Exception {
    ShardingContext ctx = new ShardingContext("p", "", 1, "", 0, "", "e", TriggerSource.RESIDENT, 7, null);
    AtomicBoolean cancelled = new AtomicBoolean();
    ctx.attach(cancelled::get);
    long t0 = System.nanoTime();
    assertFalse(ctx.awaitCancelled(Duration.ofMillis(150)));
    assertTrue(System.nanoTime() - t0 >= Duration.ofMillis(150).toNanos());
    assertFalse(ctx.awaitCancelled(Duration.ZERO));
    // A cancel interrupts the handler's thread: the wait ends at once, and the interrupt is consumed.
    Thread waiter = Thread.currentThread();
    Thread canceller = new Thread(() -> {
      sleep(100);
      cancelled.set(true);
      waiter.interrupt();
    });
    t0 = System.nanoTime();
    canceller.start();
    assertTrue(ctx.awaitCancelled(Duration.ofSeconds(30)));
    assertTrue(System.nanoTime() - t0 < Duration.ofSeconds(5).toNanos());
    canceller.join();
    assertFalse(Thread.interrupted(), "the cancel's interrupt leaked");
    assertTrue(ctx.awaitCancelled(Duration.ofSeconds(30)), "already cancelled: at once");
    // Another interrupt is the caller's to handle.
    cancelled.set(false);
    Thread.currentThread().interrupt();
    assertThrows(InterruptedException.class, () -> ctx.awaitCancelled(Duration.ofSeconds(30)));
  }

  private static void sleep(long millis) {
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  // ---- the state's rules for holds ----------------------------------------------------------

  private RegistrationState resident(boolean resident, boolean storedResident) {
    RegistrationState s = new RegistrationState("p", clock, false, ReconnectPolicy.defaults("p"), resident);
    s.streamOpened();
    s.onEvent(s.generation(), registered(storedResident));
    s.onEvent(s.generation(), SubscribeResponse.newBuilder().setLease(Lease.newBuilder()
        .setValidFor(com.google.protobuf.Duration.newBuilder().setSeconds(10))
        .setExpiresAt(ProtocolCasesTest.wall(10_000))).build());
    return s;
  }

  private static SubscribeResponse registered(boolean storedResident) {
    return SubscribeResponse.newBuilder().setRegistered(Registered.newBuilder().setInstanceId("10.0.0.1@-@7")
        .setConfig(io.shardcar.v1.JobConfig.newBuilder().setJobName("p").setShardingTotalCount(4)
            .setResident(storedResident))).build();
  }

  private static SubscribeResponse hold(String execution, int item) {
    return SubscribeResponse.newBuilder().setTrigger(Trigger.newBuilder().setExecutionId(execution)
        .setShardingTotalCount(4).setSource(io.shardcar.v1.TriggerSource.TRIGGER_SOURCE_RESIDENT)
        .addItems(ShardItem.newBuilder().setItem(item)).putFencingTokens(item, 40 + item)).build();
  }

  private static <T> List<T> only(List<Output> outputs, Class<T> kind) {
    return outputs.stream().filter(kind::isInstance).map(kind::cast).toList();
  }

  private static ItemKey started(RegistrationState s, String execution, int item) {
    List<Start> started = only(s.onEvent(s.generation(), hold(execution, item)), Start.class);
    assertEquals(1, started.size());
    assertEquals(TriggerSource.RESIDENT, started.get(0).context().getSource());
    return started.get(0).key();
  }

  private static Call answer(List<Output> outputs) {
    List<Call> calls = only(outputs, Call.class);
    assertEquals(1, calls.size(), outputs.toString());
    return calls.get(0);
  }

  @Test
  void aHoldEndedByItsHandlerIsAnsweredAndARevokedOneDeclined() {
    RegistrationState s = resident(true, true);
    ItemKey h0 = started(s, "h0", 0);
    ItemKey h1 = started(s, "h1", 1);
    ItemKey h2 = started(s, "h2", 2);
    assertEquals(Rpc.COMPLETE, answer(s.itemDone(h0, null)).rpc());
    Call failed = answer(s.itemDone(h1, "java.lang.IllegalStateException: broke"));
    assertEquals(Rpc.REPORT_FAILURE, failed.rpc());
    assertEquals("java.lang.IllegalStateException: broke", failed.text());
    List<Output> revoked = s.onEvent(s.generation(), SubscribeResponse.newBuilder()
        .setRevoke(Revoke.newBuilder().addItems(2).setReason("resident item 2: the item moved")).build());
    assertEquals(1, only(revoked, Cancel.class).size());
    assertEquals(Rpc.DECLINE, answer(s.itemDone(h2, null)).rpc(), "returned after the revoke: declined");
  }

  @Test
  void aCloseGivesEveryHoldBackAtOnce() {
    RegistrationState s = resident(true, true);
    ItemKey h0 = started(s, "h0", 0);
    ItemKey h1 = started(s, "h1", 1);
    List<Cancel> cancels = only(s.close("closed by the worker", Duration.ofSeconds(30), Duration.ofSeconds(10)),
        Cancel.class);
    assertEquals(List.of(h0, h1), cancels.stream().map(Cancel::key).toList());
    assertTrue(cancels.get(0).reason().contains("the resident item is given back"), cancels.get(0).reason());
    // Given back by the end of the stream, which ends once every hold returned: a Decline of a hold
    // the sidecar did not revoke would only have it started here again.
    assertTrue(only(s.itemDone(h0, null), Call.class).isEmpty());
    assertTrue(only(s.onEvent(s.generation(), hold("h2", 2)), Start.class).isEmpty(), "a hold meanwhile is not run");
    List<Output> last = s.itemDone(h1, "x");
    assertTrue(only(last, Call.class).isEmpty(), last.toString());
    assertEquals(1, only(last, Stop.class).size(), "the stream ends once every hold returned");
    // A plain job's close lets its items finish (the drain timeout) instead.
    RegistrationState plain = resident(false, false);
    started(plain, "e1", 0);
    assertTrue(only(plain.close("closed", Duration.ofSeconds(30), Duration.ofSeconds(10)), Cancel.class).isEmpty());
  }

  @Test
  void aHoldRunsOnlyUnderAValidLease() {
    RegistrationState s = new RegistrationState("p", clock, false, ReconnectPolicy.defaults("p"), true);
    s.streamOpened();
    s.onEvent(s.generation(), registered(true));
    // No lease yet: declined at once, never run (and never queued for a later lease).
    List<Output> early = s.onEvent(s.generation(), hold("h0", 0));
    assertTrue(only(early, Start.class).isEmpty());
    assertEquals(Rpc.DECLINE, answer(early).rpc());
    s.onEvent(s.generation(), SubscribeResponse.newBuilder().setLease(Lease.newBuilder()
        .setValidFor(com.google.protobuf.Duration.newBuilder().setSeconds(2))
        .setExpiresAt(ProtocolCasesTest.wall(2_000))).build());
    ItemKey h1 = started(s, "h1", 1);
    // The lease runs out unrenewed: the hold is cancelled, and declined once it returned.
    clock.nowMillis = 2_500;
    assertEquals(List.of(h1), only(s.tick(), Cancel.class).stream().map(Cancel::key).toList());
    assertEquals(Rpc.DECLINE, answer(s.itemDone(h1, null)).rpc());
  }

  @ParameterizedTest
  @ValueSource(booleans = {true, false})
  void aShutdownGivesEveryHoldBack(boolean drain) {
    RegistrationState s = resident(true, true);
    ItemKey h0 = started(s, "h0", 0);
    List<Output> out = s.onEvent(s.generation(), SubscribeResponse.newBuilder().setShutdown(Shutdown.newBuilder()
        .setReason("stopping").setKind(drain ? ShutdownKind.SHUTDOWN_KIND_DRAIN : ShutdownKind.SHUTDOWN_KIND_REMOTE))
        .build());
    assertEquals(List.of(h0), only(out, Cancel.class).stream().map(Cancel::key).toList());
    assertEquals(Rpc.DECLINE, answer(s.itemDone(h0, null)).rpc());
  }

  @ParameterizedTest
  @ValueSource(booleans = {true, false})
  void aRegistrationOfTheWrongKindStopsNamingResident(boolean resident) {
    RegistrationState s = new RegistrationState("p", clock, false, ReconnectPolicy.defaults("p"), resident);
    s.streamOpened();
    List<Stop> stops = only(s.onEvent(s.generation(), registered(!resident)), Stop.class);
    assertEquals(1, stops.size());
    InvalidJobConfigException e = assertInstanceOf(InvalidJobConfigException.class, stops.get(0).fatal());
    assertEquals("resident", e.getField().orElse(null));
    assertTrue(e.getMessage().contains(resident ? "is not resident" : "registerResident()"), e.getMessage());
    assertTrue(s.isStopped());
  }
}
