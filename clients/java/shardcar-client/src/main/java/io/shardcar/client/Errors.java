package io.shardcar.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;

/** Turns gRPC failures into the client's {@link ShardcarException} hierarchy. */
final class Errors {
  private Errors() {}

  /**
   * The rich details of a sidecar error: the reason of its {@code ErrorInfo} (domain
   * {@value ErrorReasons#DOMAIN}) and the field of its {@code BadRequest}'s first violation.
   * Both null when the status carries none (the call never reached the sidecar).
   */
  record Details(String reason, String requestField) {
    static final Details NONE = new Details(null, null);

    /** Reads {@code grpc-status-details-bin} of the failure (or of a cause); never throws. */
    static Details of(Throwable t) {
      com.google.rpc.Status rich;
      try {
        rich = StatusProto.fromThrowable(t);
      } catch (RuntimeException e) {
        return NONE; // an unreadable trailer: as if there were none
      }
      if (rich == null) {
        return NONE;
      }
      String reason = null;
      String field = null;
      for (Any detail : rich.getDetailsList()) {
        try {
          if (reason == null && detail.is(ErrorInfo.class)) {
            ErrorInfo info = detail.unpack(ErrorInfo.class);
            if (ErrorReasons.DOMAIN.equals(info.getDomain()) && !info.getReason().isEmpty()) {
              reason = info.getReason();
            }
          } else if (field == null && detail.is(BadRequest.class)) {
            for (BadRequest.FieldViolation v : detail.unpack(BadRequest.class).getFieldViolationsList()) {
              if (!v.getField().isEmpty()) {
                field = v.getField();
                break;
              }
            }
          }
        } catch (InvalidProtocolBufferException e) {
          // a malformed detail is skipped; the others still count
        }
      }
      return new Details(reason, field);
    }
  }

  /** Maps any failure of a call to the sidecar at {@code target}. */
  static ShardcarException fromThrowable(String target, String what, Throwable t) {
    if (t instanceof ShardcarException se) {
      return se;
    }
    Status status = Status.fromThrowable(t);
    Details details = Details.of(t);
    String reason = details.reason();
    String desc = status.getDescription() == null ? status.getCode().name() : status.getDescription();
    switch (status.getCode()) {
      case UNAVAILABLE:
      case DEADLINE_EXCEEDED:
        if (reason != null) {
          // The sidecar answered: it is there, but cannot serve now (e.g. ZooKeeper unreachable).
          return new SidecarUnavailableException(
              target, what + ": the shardcar sidecar at " + target + " is unavailable (" + reason + "): " + desc,
              t, reason);
        }
        return new SidecarUnavailableException(
            target,
            what + ": cannot reach the shardcar sidecar at " + target + " (" + desc
                + "); is `shardcar run` listening there? Set the target with the builder or SHARDCAR_TARGET",
            t);
      case INVALID_ARGUMENT: {
        String field = details.requestField();
        String kind = field == null || field.equals("config") || field.startsWith("config.")
            ? "invalid job configuration" : "invalid request";
        return new InvalidJobConfigException(
            clientField(field), field, reason, what + ": " + kind + ": " + desc, t);
      }
      case NOT_FOUND:
        return new JobNotFoundException(what + ": " + desc, t, reason);
      case ALREADY_EXISTS:
        return new InstanceConflictException(what + ": " + desc, t, reason);
      default:
        return new ShardcarException(what + ": " + status.getCode() + ": " + desc, t, reason);
    }
  }

  /**
   * A request field path from the sidecar's {@code BadRequest} in the client's spelling: the
   * {@code config.} prefix dropped and snake case turned into camel case, which is ElasticJob's
   * spelling of the {@link JobConfig} fields ({@code config.sharding_total_count} is
   * {@code shardingTotalCount}, {@code instance_suffix} is {@code instanceSuffix}).
   */
  static String clientField(String requestField) {
    if (requestField == null || requestField.isEmpty()) {
      return null;
    }
    String path = requestField.startsWith("config.") ? requestField.substring("config.".length()) : requestField;
    StringBuilder out = new StringBuilder(path.length());
    boolean upper = false;
    for (int i = 0; i < path.length(); i++) {
      char c = path.charAt(i);
      if (c == '_' && out.length() > 0 && out.charAt(out.length() - 1) != '.') {
        upper = true;
      } else {
        out.append(upper ? Character.toUpperCase(c) : c);
        upper = false;
      }
    }
    return out.toString();
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
}
