"""The exceptions of the client, all rooted at :class:`ShardcarError`.

gRPC status codes from the sidecar are mapped to one class each, so callers can catch what they
can act on: a sidecar that is not there, an invalid job config (with the field named), a job that
does not exist, an answer the sidecar refused (unknown or fenced execution).
"""

from __future__ import annotations

import re
from typing import Optional

import grpc

from ._core import is_transport_failure

__all__ = [
    "ShardcarError",
    "SidecarUnavailableError",
    "InvalidJobConfigError",
    "JobNotFoundError",
    "InstanceConflictError",
    "AnswerRejectedError",
    "AnswerTransportError",
    "ExecutionNotFoundError",
    "ExecutionFencedError",
    "PermissionDeniedError",
    "SidecarShutdownError",
    "RpcError",
    "from_rpc_error",
]

# JobConfig field names, longest first so `sharding_item_parameters` wins over shorter names.
_CONFIG_FIELDS = sorted(
    [
        "job_name",
        "cron",
        "time_zone",
        "sharding_total_count",
        "sharding_item_parameters",
        "job_parameter",
        "failover",
        "misfire",
        "monitor_execution",
        "sharding_strategy",
        "max_time_diff_seconds",
        "reconcile_interval_minutes",
        "description",
        "disabled",
        "props",
        "execution_timeout_seconds",
    ],
    key=len,
    reverse=True,
)


class ShardcarError(Exception):
    """Root of every error raised by the shardcar client.

    ``code`` is the gRPC status code when the error came from the sidecar, else ``None``;
    ``details`` is the sidecar's message.
    """

    def __init__(
        self, message: str, *, code: Optional[grpc.StatusCode] = None, details: str = ""
    ) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


class SidecarUnavailableError(ShardcarError):
    """The sidecar could not be reached at the target (not running, wrong address or socket)."""


class InvalidJobConfigError(ShardcarError):
    """The sidecar refused the job configuration (INVALID_ARGUMENT).

    ``field`` names the offending ``JobConfig`` field when the sidecar's message names one.
    """

    def __init__(self, message: str, *, field: Optional[str] = None, **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.field = field


class JobNotFoundError(ShardcarError):
    """Subscribed without a config to a job that does not exist (NOT_FOUND)."""


class InstanceConflictError(ShardcarError):
    """Another live stream already uses this instance id (ALREADY_EXISTS)."""


class AnswerRejectedError(ShardcarError):
    """The sidecar refused a ``Complete``, ``ReportFailure`` or ``Decline``: its final answer."""


class AnswerTransportError(SidecarUnavailableError):
    """An answer failed in transport: the sidecar neither accepted nor refused it.

    UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED, or INTERNAL from the HTTP/2 layer (a call written
    on a connection the sidecar had already closed with GOAWAY). Answers are idempotent: send it
    again while the stream that delivered the trigger is open; once that stream has ended, drop
    it (the sidecar refuses it and hands the items to others). Never a refusal, never an
    acceptance.
    """


class ExecutionNotFoundError(AnswerRejectedError):
    """The execution is unknown to the sidecar (NOT_FOUND)."""


class ExecutionFencedError(AnswerRejectedError):
    """The execution was revoked or superseded; the answer changed nothing (FAILED_PRECONDITION)."""


class PermissionDeniedError(AnswerRejectedError):
    """The execution belongs to another instance (PERMISSION_DENIED)."""


class SidecarShutdownError(ShardcarError):
    """The sidecar ended the stream with a ``Shutdown`` event."""


class RpcError(ShardcarError):
    """Any other gRPC failure; ``code`` and ``details`` say what the sidecar answered."""


def _field_named(details: str) -> Optional[str]:
    for name in _CONFIG_FIELDS:
        if re.search(r"(?<![A-Za-z0-9_])" + name + r"(?![A-Za-z0-9_])", details):
            return name
    return None


def from_rpc_error(err: grpc.RpcError, *, target: str, during: str) -> ShardcarError:
    """Maps a gRPC error of ``during`` (``"subscribe"`` or ``"answer"``) to a client error.

    For an answer, a transport failure becomes :class:`AnswerTransportError` and only the
    sidecar's own replies become :class:`AnswerRejectedError` subclasses.
    """
    code = err.code() if hasattr(err, "code") else None
    details = (err.details() if hasattr(err, "details") else None) or ""
    if during == "answer" and code is not None and is_transport_failure(code.name, details):
        return AnswerTransportError(
            f"answer not delivered ({code.name}: {details or 'no details'}): a transport "
            "error, the sidecar neither accepted nor refused it; it may be sent again while "
            "its stream is open",
            code=code,
            details=details,
        )
    if code == grpc.StatusCode.UNAVAILABLE:
        return SidecarUnavailableError(
            f"shardcar sidecar unreachable at {target!r}: {details or 'unavailable'} "
            "(is `shardcar run` listening there? set SHARDCAR_TARGET or Worker(target=...))",
            code=code,
            details=details,
        )
    if code == grpc.StatusCode.INVALID_ARGUMENT and during == "subscribe":
        field = _field_named(details)
        where = f" (field `{field}`)" if field else ""
        return InvalidJobConfigError(
            f"invalid job config{where}: {details}", field=field, code=code, details=details
        )
    if code == grpc.StatusCode.NOT_FOUND:
        if during == "subscribe":
            return JobNotFoundError(
                f"job not found: {details} (pass a JobConfig to create it)",
                code=code,
                details=details,
            )
        return ExecutionNotFoundError(
            f"answer rejected, execution unknown: {details}", code=code, details=details
        )
    if code == grpc.StatusCode.FAILED_PRECONDITION and during == "answer":
        return ExecutionFencedError(
            f"answer rejected, execution fenced: {details}", code=code, details=details
        )
    if code == grpc.StatusCode.PERMISSION_DENIED and during == "answer":
        return PermissionDeniedError(
            f"answer rejected, execution of another instance: {details}",
            code=code,
            details=details,
        )
    if code == grpc.StatusCode.ALREADY_EXISTS:
        return InstanceConflictError(
            f"instance id already in use: {details}", code=code, details=details
        )
    name = code.name if code is not None else "UNKNOWN"
    return RpcError(f"{during} failed with {name}: {details}", code=code, details=details)
