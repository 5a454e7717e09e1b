package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import org.junit.jupiter.api.Test;

class ErrorsTest {
  @Test
  void invalidArgumentNamesTheFieldInElasticJobSpelling() {
    ShardcarException e = Errors.fromThrowable("t", "subscribe",
        Status.INVALID_ARGUMENT.withDescription("config.sharding_total_count: must be between 1 and 100000, got 0")
            .asRuntimeException());
    InvalidJobConfigException invalid = assertInstanceOf(InvalidJobConfigException.class, e);
    assertEquals("shardingTotalCount", invalid.getField().orElseThrow());
    assertTrue(e.getMessage().contains("between 1 and 100000"), e.getMessage());

    assertEquals("cron", Errors.fieldOf("invalid cron expression 'nope': expected 6 or 7 fields"));
    assertEquals("jobName", Errors.fieldOf("job_name must not contain '/'"));
    assertEquals("shardingItemParameters", Errors.fieldOf("shardingItemParameters: item 7 >= count"));
    assertEquals("timeZone", Errors.fieldOf("time_zone 'Mars/Base' is unknown"));
    assertNull(Errors.fieldOf("something else went wrong"));
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
    assertTrue(Errors.fromThrowable("127.0.0.1:1", "x", Status.UNAVAILABLE.asRuntimeException())
        .getMessage().contains("127.0.0.1:1"));
  }

  @Test
  void onlyConnectionProblemsAreTransient() {
    assertTrue(Errors.isTransient(Status.UNAVAILABLE.asRuntimeException()));
    assertFalse(Errors.isTransient(Status.INVALID_ARGUMENT.asRuntimeException()));
    assertFalse(Errors.isTransient(new IllegalStateException()));
  }

  @Test
  void describeKeepsTheExceptionTextAndCauses() {
    String text = JobRegistration.describe(new IllegalStateException("boom", new java.io.IOException("disk")));
    assertEquals("java.lang.IllegalStateException: boom; caused by java.io.IOException: disk", text);
  }
}
