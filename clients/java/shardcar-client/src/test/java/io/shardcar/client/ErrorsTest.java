package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.protobuf.ByteString;
import com.google.rpc.BadRequest;
import com.google.rpc.Code;
import com.google.rpc.ErrorInfo;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import org.junit.jupiter.api.Test;

class ErrorsTest {
  /** A status as the sidecar sends it: ErrorInfo, and a BadRequest naming {@code field} when given. */
  static StatusRuntimeException rich(Code code, String message, String reason, String field) {
    com.google.rpc.Status.Builder status = com.google.rpc.Status.newBuilder()
        .setCode(code.getNumber())
        .setMessage(message)
        .addDetails(Any.pack(ErrorInfo.newBuilder().setReason(reason).setDomain("shardcar.v1").build()));
    if (field != null) {
      status.addDetails(Any.pack(BadRequest.newBuilder()
          .addFieldViolations(BadRequest.FieldViolation.newBuilder().setField(field).setDescription("bad"))
          .build()));
    }
    return StatusProto.toStatusRuntimeException(status.build());
  }

  @Test
  void invalidArgumentTakesTheFieldFromBadRequestAndTheReasonFromErrorInfo() {
    ShardcarException e = Errors.fromThrowable("t", "subscribe", rich(Code.INVALID_ARGUMENT,
        "config.sharding_total_count: must be between 1 and 100000, got 0", "INVALID_ARGUMENT",
        "config.sharding_total_count"));
    InvalidJobConfigException invalid = assertInstanceOf(InvalidJobConfigException.class, e);
    assertEquals(Optional.of("shardingTotalCount"), invalid.getField());
    assertEquals(Optional.of("config.sharding_total_count"), invalid.getRequestField());
    assertEquals(Optional.of(ErrorReasons.INVALID_ARGUMENT), invalid.getReason());
    assertTrue(e.getMessage().contains("between 1 and 100000"), e.getMessage());
    assertTrue(e.getMessage().contains("invalid job configuration"), e.getMessage());
  }

  @Test
  void theFieldComesFromBadRequestNotFromTheMessage() {
    // The message names another field (and could say anything): only BadRequest counts.
    InvalidJobConfigException named = assertInstanceOf(InvalidJobConfigException.class,
        Errors.fromThrowable("t", "subscribe", rich(Code.INVALID_ARGUMENT,
            "time_zone and cron disagree", "INVALID_ARGUMENT", "config.cron")));
    assertEquals(Optional.of("cron"), named.getField());
    // Without a BadRequest there is no field, whatever the message says.
    InvalidJobConfigException plain = assertInstanceOf(InvalidJobConfigException.class,
        Errors.fromThrowable("t", "subscribe",
            Status.INVALID_ARGUMENT.withDescription("config.cron: not a cron").asRuntimeException()));
    assertEquals(Optional.empty(), plain.getField());
    assertEquals(Optional.empty(), plain.getRequestField());
    assertEquals(Optional.empty(), plain.getReason());
  }

  @Test
  void requestFieldsOutsideTheConfigAreNamedInCamelCase() {
    InvalidJobConfigException suffix = assertInstanceOf(InvalidJobConfigException.class,
        Errors.fromThrowable("t", "subscribe", rich(Code.INVALID_ARGUMENT,
            "instance_suffix: \"a b\" must be 1 to 64 characters", "INVALID_ARGUMENT", "instance_suffix")));
    assertEquals(Optional.of("instanceSuffix"), suffix.getField());
    assertEquals(Optional.of("instance_suffix"), suffix.getRequestField());
    assertTrue(suffix.getMessage().contains("invalid request"), suffix.getMessage());
    InvalidJobConfigException pid = assertInstanceOf(InvalidJobConfigException.class,
        Errors.fromThrowable("t", "subscribe", rich(Code.INVALID_ARGUMENT, "pid: must not be 0", "INVALID_ARGUMENT", "pid")));
    assertEquals(Optional.of("pid"), pid.getField());
  }

  @Test
  void wireFieldsMapToTheClientsSpelling() {
    assertEquals("cron", Errors.clientField("config.cron"));
    assertEquals("shardingTotalCount", Errors.clientField("config.sharding_total_count"));
    assertEquals("shardingItemParameters", Errors.clientField("config.sharding_item_parameters"));
    assertEquals("timeZone", Errors.clientField("config.time_zone"));
    assertEquals("jobName", Errors.clientField("config.job_name"));
    assertEquals("jobName", Errors.clientField("job_name"));
    assertEquals("maxTimeDiffSeconds", Errors.clientField("config.max_time_diff_seconds"));
    assertEquals("config", Errors.clientField("config"));
    assertEquals("instanceId", Errors.clientField("instance_id"));
    assertNull(Errors.clientField(""));
    assertNull(Errors.clientField(null));
  }

  @Test
  void everyExceptionCarriesTheReason() {
    ShardcarException notFound = Errors.fromThrowable("t", "x",
        rich(Code.NOT_FOUND, "job \"j\" not found", "JOB_NOT_FOUND", null));
    assertInstanceOf(JobNotFoundException.class, notFound);
    assertEquals(Optional.of(ErrorReasons.JOB_NOT_FOUND), notFound.getReason());

    ShardcarException conflict = Errors.fromThrowable("t", "x",
        rich(Code.ALREADY_EXISTS, "instance live", "ALREADY_EXISTS", null));
    assertInstanceOf(InstanceConflictException.class, conflict);
    assertEquals(Optional.of(ErrorReasons.ALREADY_EXISTS), conflict.getReason());

    ShardcarException fenced = Errors.fromThrowable("t", "complete",
        rich(Code.FAILED_PRECONDITION, "execution fenced", "FAILED_PRECONDITION", null));
    assertEquals(ShardcarException.class, fenced.getClass());
    assertEquals(Optional.of(ErrorReasons.FAILED_PRECONDITION), fenced.getReason());

    ShardcarException corrupt = Errors.fromThrowable("t", "x",
        rich(Code.FAILED_PRECONDITION, "bad yaml", "CORRUPT_JOB_DATA", null));
    assertEquals(Optional.of(ErrorReasons.CORRUPT_JOB_DATA), corrupt.getReason());

    SidecarUnavailableException registry = assertInstanceOf(SidecarUnavailableException.class,
        Errors.fromThrowable("127.0.0.1:1", "x", rich(Code.UNAVAILABLE, "zk down", "REGISTRY_UNAVAILABLE", null)));
    assertEquals(Optional.of(ErrorReasons.REGISTRY_UNAVAILABLE), registry.getReason());
    assertEquals("127.0.0.1:1", registry.getTarget());
    assertTrue(registry.getMessage().contains("REGISTRY_UNAVAILABLE"), registry.getMessage());
    assertFalse(registry.getMessage().contains("is `shardcar run` listening"), "the sidecar answered: " + registry.getMessage());
  }

  @Test
  void detailsAreFoundThroughWrappersAndForeignOrBrokenDetailsAreIgnored() {
    StatusRuntimeException sre = rich(Code.INVALID_ARGUMENT, "config.cron: nope", "INVALID_ARGUMENT", "config.cron");
    InvalidJobConfigException wrapped = assertInstanceOf(InvalidJobConfigException.class,
        Errors.fromThrowable("t", "x", new ExecutionException(sre)));
    assertEquals(Optional.of("cron"), wrapped.getField());

    // An ErrorInfo of another domain is not the sidecar's reason; an undecodable detail is skipped.
    StatusRuntimeException foreign = StatusProto.toStatusRuntimeException(com.google.rpc.Status.newBuilder()
        .setCode(Code.FAILED_PRECONDITION.getNumber())
        .setMessage("proxy says no")
        .addDetails(Any.newBuilder().setTypeUrl("type.googleapis.com/google.rpc.BadRequest")
            .setValue(ByteString.copyFrom(new byte[] {0x0a, 0x05}))) // a truncated message
        .addDetails(Any.pack(ErrorInfo.newBuilder().setReason("QUOTA").setDomain("proxy.example").build()))
        .build());
    ShardcarException e = Errors.fromThrowable("t", "x", foreign);
    assertEquals(Optional.empty(), e.getReason());
    assertTrue(e.getMessage().contains("proxy says no"), e.getMessage());
  }

  @Test
  void codesMapToTheirExceptions() {
    assertInstanceOf(SidecarUnavailableException.class,
        Errors.fromThrowable("127.0.0.1:1", "x", Status.UNAVAILABLE.asRuntimeException()));
    assertInstanceOf(JobNotFoundException.class,
        Errors.fromThrowable("t", "x", Status.NOT_FOUND.withDescription("no job").asRuntimeException()));
    assertInstanceOf(InstanceConflictException.class,
        Errors.fromThrowable("t", "x", Status.ALREADY_EXISTS.asRuntimeException()));
    ShardcarException other = Errors.fromThrowable("t", "complete",
        Status.FAILED_PRECONDITION.withDescription("execution fenced").asRuntimeException());
    assertEquals(ShardcarException.class, other.getClass());
    assertTrue(other.getMessage().contains("FAILED_PRECONDITION") && other.getMessage().contains("fenced"));
    SidecarUnavailableException unreachable = assertInstanceOf(SidecarUnavailableException.class,
        Errors.fromThrowable("127.0.0.1:1", "x", Status.UNAVAILABLE.asRuntimeException()));
    assertTrue(unreachable.getMessage().contains("127.0.0.1:1"));
    assertEquals(Optional.empty(), unreachable.getReason(), "a transport failure has no reason");
  }

  @Test
  void onlyConnectionProblemsAreTransient() {
    assertTrue(Errors.isTransient(Status.UNAVAILABLE.asRuntimeException()));
    assertTrue(Errors.isTransient(rich(Code.UNAVAILABLE, "zk down", "REGISTRY_UNAVAILABLE", null)));
    assertFalse(Errors.isTransient(Status.INVALID_ARGUMENT.asRuntimeException()));
    assertFalse(Errors.isTransient(new IllegalStateException()));
  }

  @Test
  void describeKeepsTheExceptionTextAndCauses() {
    String text = JobRegistration.describe(new IllegalStateException("boom", new java.io.IOException("disk")));
    assertEquals("java.lang.IllegalStateException: boom; caused by java.io.IOException: disk", text);
  }
}
