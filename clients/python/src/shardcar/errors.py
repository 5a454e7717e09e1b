"""The exceptions of the client, all rooted at :class:`ShardcarError`.

gRPC status codes from the sidecar are mapped to one class each, so callers can catch what they
can act on: a sidecar that is not there, an invalid job config (with the field named), a job that
does not exist, an answer the sidecar refused (unknown or fenced execution).

What the sidecar refused is read from the status's rich details (``google.rpc.Status`` in the
``grpc-status-details-bin`` trailer, read with ``grpc_status.rpc_status.from_call``), never from
its message, which is for people: the ``ErrorInfo`` gives :attr:`ShardcarError.reason`, and the
``BadRequest`` field violation of an INVALID_ARGUMENT names the field
(:attr:`ShardcarError.field`, :attr:`ShardcarError.request_field`).
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from ._common import is_transport_failure

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
    "ERROR_DOMAIN",
    "REASONS",
    "from_rpc_error",
    "error_from_status",
]

#: The ``ErrorInfo.domain`` of every error the sidecar returns.
ERROR_DOMAIN = "shardcar.v1"

#: The ``ErrorInfo.reason`` values of the v1 contract (the proto's header, "Errors.").
REASONS = frozenset(
    {
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "JOB_NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "FAILED_PRECONDITION",
        "CORRUPT_JOB_DATA",
        "REGISTRY_UNAVAILABLE",
        "UNAVAILABLE",
    }
)

#: The prefix of ``SubscribeRequest.config``'s fields in a ``BadRequest`` field violation.
_CONFIG_PREFIX = "config."


class ShardcarError(Exception):
    """Root of every error raised by the shardcar client.

    ``code`` is the gRPC status code when the error came from the sidecar, else ``None``;
    ``details`` is the sidecar's message (for people: it may change between versions).
    From the status's rich details: ``reason`` is the ``ErrorInfo`` reason (one of
    :data:`REASONS`, e.g. ``"INVALID_ARGUMENT"``, ``"REGISTRY_UNAVAILABLE"``), ``None`` when the
    error carried none (a transport failure, an older sidecar); ``request_field`` is the request
    field a ``BadRequest`` field violation names, as on the wire (``"config.cron"``,
    ``"instance_suffix"``), and ``field`` the same in the client's naming: a ``JobConfig`` field
    without the ``config.`` prefix (``"cron"``), any other field as on the wire.
    """

    def __init__(
        self,
        message: str,
        *,
        code: Optional[grpc.StatusCode] = None,
        details: str = "",
        reason: Optional[str] = None,
        request_field: Optional[str] = None,
        field: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.details = details
        self.reason = reason
        self.request_field = request_field
        self.field = field if field is not None else client_field(request_field)


class SidecarUnavailableError(ShardcarError):
    """The sidecar could not be reached at the target (not running, wrong address or socket)."""


class InvalidJobConfigError(ShardcarError):
    """The sidecar refused the subscription's job configuration or request (INVALID_ARGUMENT).

    ``field`` names the refused field, from the ``BadRequest`` of the status's details: a
    ``JobConfig`` field as the client names it (``"cron"``, ``"sharding_total_count"``; the
    wire's ``request_field`` is ``"config.cron"``), or another ``SubscribeRequest`` field
    (``"job_name"``, ``"instance_id"``, ``"instance_suffix"``, ``"pid"``). ``None`` when the
    sidecar named none. ``reason`` is ``"INVALID_ARGUMENT"``.
    """

    def __init__(self, message: str, *, field: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(message, field=field, **kwargs)


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


def client_field(request_field: Optional[str]) -> Optional[str]:
    """A wire field path in the client's naming: ``config.cron`` -> ``cron`` (the
    :class:`~shardcar.JobConfig` field); any other path as it is."""
    if request_field and request_field.startswith(_CONFIG_PREFIX):
        return request_field[len(_CONFIG_PREFIX):]
    return request_field


def _is_config_field(request_field: str) -> bool:
    """A field of the job's config: ``config.*``, or the subscribed ``job_name``."""
    return request_field.startswith(_CONFIG_PREFIX) or request_field in ("config", "job_name")


class RichDetails:
    """What the ``google.rpc.Status`` of a failed call says: the ``reason`` of its ``ErrorInfo``
    of domain :data:`ERROR_DOMAIN` (one of another domain, e.g. added by a proxy, is not the
    sidecar's and is passed over) and the ``BadRequest`` field violations (``(field,
    description)`` pairs)."""

    __slots__ = ("reason", "violations")

    def __init__(
        self, reason: Optional[str] = None, violations: Tuple[Tuple[str, str], ...] = ()
    ) -> None:
        self.reason = reason
        self.violations = violations

    @property
    def field(self) -> Optional[str]:
        """The first field violation's field (the sidecar names one, the first it found bad)."""
        return self.violations[0][0] if self.violations else None

    @classmethod
    def of(cls, status: Optional[status_pb2.Status]) -> "RichDetails":
        found = cls()
        if status is None:
            return found
        violations: List[Tuple[str, str]] = []
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                if found.reason is None and info.domain == ERROR_DOMAIN:
                    found.reason = info.reason or None
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                violations += [(v.field, v.description) for v in bad.field_violations if v.field]
        found.violations = tuple(violations)
        return found


def rich_details(err: object) -> RichDetails:
    """The rich details of a failed gRPC call (``grpc.RpcError``, sync or ``grpc.aio``).

    Empty when the call carries none: a transport failure, a status from something other than
    the sidecar, an error object without trailing metadata, or details that do not belong to
    the status they came with (``from_call`` checks the code and the message).
    """
    if not callable(getattr(err, "trailing_metadata", None)) or not callable(
        getattr(err, "code", None)
    ):
        return RichDetails()
    try:
        status = rpc_status.from_call(err)
    except Exception:  # inconsistent (ValueError) or undecodable (DecodeError) details
        return RichDetails()
    return RichDetails.of(status)


def from_rpc_error(err: grpc.RpcError, *, target: str, during: str) -> ShardcarError:
    """Maps a gRPC error of ``during`` (``"subscribe"`` or ``"answer"``) to a client error.

    The class follows the status code; ``reason`` and ``field`` come from the status's rich
    details (``ErrorInfo``, ``BadRequest``), never from its message. For an answer, a transport
    failure becomes :class:`AnswerTransportError` and only the sidecar's own replies become
    :class:`AnswerRejectedError` subclasses.
    """
    code = err.code() if hasattr(err, "code") else None
    details = (err.details() if hasattr(err, "details") else None) or ""
    rich = rich_details(err)
    return error_from_status(
        code, details, reason=rich.reason, request_field=rich.field, target=target, during=during
    )


def error_from_status(
    code: Optional[grpc.StatusCode],
    details: str,
    *,
    reason: Optional[str],
    request_field: Optional[str],
    target: str,
    during: str,
) -> ShardcarError:
    """:func:`from_rpc_error` from the parts of a status: its ``code``, message, ``ErrorInfo``
    reason and the field of its first ``BadRequest`` violation."""
    kw: Any = dict(code=code, details=details, reason=reason, request_field=request_field)
    why = f" [{reason}]" if reason else ""
    if during == "answer" and code is not None and is_transport_failure(code.name, details):
        return AnswerTransportError(
            f"answer not delivered ({code.name}{why}: {details or 'no details'}): a transport "
            "error, the sidecar neither accepted nor refused it; it may be sent again while "
            "its stream is open",
            **kw,
        )
    if code == grpc.StatusCode.UNAVAILABLE:
        if reason == "REGISTRY_UNAVAILABLE":
            text = (
                f"the shardcar sidecar at {target!r} cannot reach its registry (ZooKeeper): "
                f"{details or 'unavailable'}"
            )
        elif reason is not None:  # the sidecar answered: it is there but not serving
            text = f"the shardcar sidecar at {target!r} is unavailable{why}: {details}"
        else:
            text = (
                f"shardcar sidecar unreachable at {target!r}: {details or 'unavailable'} "
                "(is `shardcar run` listening there? set SHARDCAR_TARGET or Worker(target=...))"
            )
        return SidecarUnavailableError(text, **kw)
    if code == grpc.StatusCode.INVALID_ARGUMENT and during == "subscribe":
        field = client_field(request_field)
        where = f" (field `{field}`)" if field else ""
        what = (
            "job config"
            if request_field is None or _is_config_field(request_field)
            else "request"
        )
        return InvalidJobConfigError(f"invalid {what}{where}: {details}", field=field, **kw)
    if code == grpc.StatusCode.NOT_FOUND:
        if during == "subscribe":
            return JobNotFoundError(
                f"job not found: {details} (pass a JobConfig to create it)", **kw
            )
        return ExecutionNotFoundError(f"answer rejected, execution unknown: {details}", **kw)
    if code == grpc.StatusCode.FAILED_PRECONDITION and during == "answer":
        return ExecutionFencedError(f"answer rejected, execution fenced: {details}", **kw)
    if code == grpc.StatusCode.PERMISSION_DENIED and during == "answer":
        return PermissionDeniedError(
            f"answer rejected, execution of another instance: {details}", **kw
        )
    if code == grpc.StatusCode.ALREADY_EXISTS:
        return InstanceConflictError(f"instance id already in use: {details}", **kw)
    name = code.name if code is not None else "UNKNOWN"
    where = f" (field `{request_field}`)" if request_field else ""
    return RpcError(f"{during} failed with {name}{why}{where}: {details}", **kw)
