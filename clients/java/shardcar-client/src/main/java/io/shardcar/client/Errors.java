package io.shardcar.client;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Turns gRPC failures into the client's {@link ShardcarException} hierarchy. */
final class Errors {
  /** Proto field name and the matching ElasticJob-style {@link JobConfig} name. */
  private static final List<String[]> FIELDS = List.of(
      new String[] {"sharding_item_parameters", "shardingItemParameters"},
      new String[] {"sharding_total_count", "shardingTotalCount"},
      new String[] {"sharding_strategy", "shardingStrategy"},
      new String[] {"max_time_diff_seconds", "maxTimeDiffSeconds"},
      new String[] {"reconcile_interval_minutes", "reconcileIntervalMinutes"},
      new String[] {"execution_timeout_seconds", "executionTimeoutSeconds"},
      new String[] {"monitor_execution", "monitorExecution"},
      new String[] {"job_parameter", "jobParameter"},
      new String[] {"time_zone", "timeZone"},
      new String[] {"job_name", "jobName"},
      new String[] {"description", "description"},
      new String[] {"failover", "failover"},
      new String[] {"disabled", "disabled"},
      new String[] {"misfire", "misfire"},
      new String[] {"props", "props"},
      new String[] {"cron", "cron"});

  private Errors() {}

  /** Maps any failure of a call to the sidecar at {@code target}. */
  static ShardcarException fromThrowable(String target, String what, Throwable t) {
    if (t instanceof ShardcarException se) {
      return se;
    }
    Status status = Status.fromThrowable(t);
    String desc = status.getDescription() == null ? status.getCode().name() : status.getDescription();
    switch (status.getCode()) {
      case UNAVAILABLE:
      case DEADLINE_EXCEEDED:
        return new SidecarUnavailableException(
            target,
            what + ": cannot reach the shardcar sidecar at " + target + " (" + desc
                + "); is `shardcar run` listening there? Set the target with the builder or SHARDCAR_TARGET",
            t);
      case INVALID_ARGUMENT:
        return new InvalidJobConfigException(fieldOf(desc), what + ": invalid job configuration: " + desc, t);
      case NOT_FOUND:
        return new JobNotFoundException(what + ": " + desc, t);
      case ALREADY_EXISTS:
        return new InstanceConflictException(what + ": " + desc, t);
      default:
        return new ShardcarException(what + ": " + status.getCode() + ": " + desc, t);
    }
  }

  /**
   * Whether a call failed on its way rather than being answered by the sidecar (contract rule 3):
   * the sidecar neither accepted nor refused it. UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED, and
   * INTERNAL or UNKNOWN (an HTTP/2 GOAWAY or RST_STREAM on a connection the sidecar closed, a local
   * failure): the sidecar itself never answers INTERNAL or UNKNOWN. The sidecar's own UNAVAILABLE
   * ("send it again") is to be treated the same way.
   */
  static boolean isTransportFailure(Throwable t) {
    return switch (Status.fromThrowable(t).getCode()) {
      case UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN -> true;
      default -> false;
    };
  }

  /** How the result of an answer or decline call counts: accepted, refused, or not delivered. */
  static RegistrationState.CallResult callResult(String target, String what, Throwable t) {
    if (t == null) {
      return RegistrationState.CallResult.accepted();
    }
    if (isTransportFailure(t)) {
      Status status = Status.fromThrowable(t);
      return RegistrationState.CallResult.transportFailure(
          status.getCode() + (status.getDescription() == null ? "" : ": " + status.getDescription()));
    }
    return RegistrationState.CallResult.refused(fromThrowable(target, what, t));
  }

  /** Whether a failed first subscription is worth retrying (the sidecar may still be starting). */
  static boolean isTransient(Throwable t) {
    if (!(t instanceof StatusRuntimeException) && !(t instanceof io.grpc.StatusException)) {
      return false;
    }
    Status.Code code = Status.fromThrowable(t).getCode();
    return code == Status.Code.UNAVAILABLE
        || code == Status.Code.DEADLINE_EXCEEDED
        || code == Status.Code.ABORTED
        || code == Status.Code.RESOURCE_EXHAUSTED;
  }

  /** The first {@link JobConfig} field the sidecar's message names, in ElasticJob's spelling. */
  static String fieldOf(String message) {
    if (message == null) {
      return null;
    }
    String lower = message.toLowerCase(Locale.ROOT);
    String best = null;
    int bestAt = Integer.MAX_VALUE;
    for (String[] names : FIELDS) {
      for (String name : names) {
        Matcher m = Pattern.compile("(?<![a-z_])" + Pattern.quote(name.toLowerCase(Locale.ROOT)) + "(?![a-z_])")
            .matcher(lower);
        if (m.find() && m.start() < bestAt) {
          bestAt = m.start();
          best = names[1];
        }
      }
    }
    return best;
  }
}
