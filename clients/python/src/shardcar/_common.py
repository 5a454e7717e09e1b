"""Settings shared by the sync and asyncio workers: target, channel options, requests, texts."""

from __future__ import annotations

import logging
import os
import re
import secrets
import traceback
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Tuple, Union

from ._proto import shardcar_pb2 as pb
from .config import JobConfig

if TYPE_CHECKING:  # _core imports this module
    from ._core import AnswerCall

log = logging.getLogger("shardcar")

DEFAULT_TARGET = "127.0.0.1:50061"
TARGET_ENV = "SHARDCAR_TARGET"


def resolve_target(target: Optional[str]) -> str:
    """``target``, else ``$SHARDCAR_TARGET``, else ``127.0.0.1:50061``.

    ``unix:///abs/path`` (and ``unix:relative``) name a Unix socket, as in gRPC's naming.
    """
    return target or os.environ.get(TARGET_ENV) or DEFAULT_TARGET


def channel_options(
    target: str, extra: Optional[Mapping[str, object]] = None
) -> List[Tuple[str, object]]:
    """Reconnect quickly after a sidecar restart; keepalive notices a vanished peer.

    For ``unix:`` targets gRPC's C core sends the socket path, percent-encoded, as the HTTP/2
    ``:authority`` (``tmp%2Fshardcar.sock``), which the sidecar's HTTP/2 server (hyper) refuses
    with RST_STREAM(PROTOCOL_ERROR); ``localhost`` is sent instead.
    """
    opts: Dict[str, object] = {
        "grpc.initial_reconnect_backoff_ms": 100,
        "grpc.min_reconnect_backoff_ms": 100,
        "grpc.max_reconnect_backoff_ms": 2000,
        "grpc.keepalive_time_ms": 20000,
        "grpc.keepalive_timeout_ms": 10000,
    }
    if target.startswith("unix:"):
        opts["grpc.default_authority"] = "localhost"
    if extra:
        opts.update(extra)
    return list(opts.items())


JobSpec = Union[JobConfig, str]


def job_name_of(job: JobSpec) -> str:
    return job.job_name if isinstance(job, JobConfig) else job


#: Files a container runtime leaves in the root of a container (Docker, Podman).
CONTAINER_MARKERS = ("/.dockerenv", "/run/.containerenv")


def running_in_container(
    *,
    pid: Optional[int] = None,
    environ: Optional[Mapping[str, str]] = None,
    exists: Callable[[str], bool] = os.path.exists,
) -> bool:
    """Whether this process looks like it runs in a container, where its pid need not be unique
    on the host (every container's first process is pid 1): it is pid 1, a runtime marker file
    exists (``/.dockerenv``, ``/run/.containerenv``), or ``KUBERNETES_SERVICE_HOST`` is set.
    The arguments are for tests; by default the process's own pid, environment and files."""
    pid = os.getpid() if pid is None else pid
    environ = os.environ if environ is None else environ
    if pid == 1 or environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    return any(exists(marker) for marker in CONTAINER_MARKERS)


def sends_instance_suffix(mode: str, instance_id: str) -> bool:
    """Whether a worker sends an ``instance_suffix``: never with an explicit ``instance_id``
    (which the sidecar uses as it is); else ``mode`` (``WorkerOptions.instance_suffix``:
    ``"always"``, ``"never"``, or ``"auto"``: whether the process runs in a container,
    :func:`running_in_container`)."""
    if instance_id or mode == "never":
        return False
    return mode == "always" or running_in_container()


def new_instance_token() -> str:
    """The random part of an instance suffix: 8 hex characters."""
    return secrets.token_hex(4)


def make_instance_suffix(token: str) -> str:
    """``{pid}-{token}``: the ``SubscribeRequest.instance_suffix`` (the instance id becomes
    ``{sidecar ip}@-@{pid}-{token}``)."""
    return f"{os.getpid()}-{token}"


#: The most executions a worker may ask to run at once (``SubscribeRequest.max_concurrent_executions``).
MAX_CONCURRENT_EXECUTIONS = 1024


def check_max_concurrent_executions(value: int) -> int:
    """``value`` if it is a valid ``max_concurrent_executions`` (an ``int`` from 1 to 1024), else
    ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"max_concurrent_executions must be an int from 1 to {MAX_CONCURRENT_EXECUTIONS}, "
            f"got {value!r}"
        )
    if not 1 <= value <= MAX_CONCURRENT_EXECUTIONS:
        raise ValueError(
            f"max_concurrent_executions must be 1 to {MAX_CONCURRENT_EXECUTIONS} (how many "
            f"executions of a job the worker runs at once), got {value}"
        )
    return value


def resolve_max_concurrent_executions(explicit: Optional[int], item_concurrency: int) -> int:
    """How many executions of a job a worker runs at once, as it tells the sidecar.

    By default the job's executor size, ``item_concurrency`` (at most 1024): every item of every
    execution runs in that one pool of ``item_concurrency`` slots, and an execution needs at least
    one slot, so that many executions can all be running at once; more could only wait in the
    pool's queue while the sidecar counts them as running. ``explicit`` (1 to 1024, at most
    ``item_concurrency``) asks for fewer: 1 is ElasticJob's behaviour, a new execution only when the
    worker runs none. ``ValueError`` otherwise.
    """
    if explicit is None:
        return min(item_concurrency, MAX_CONCURRENT_EXECUTIONS)
    check_max_concurrent_executions(explicit)
    if explicit > item_concurrency:
        raise ValueError(
            f"max_concurrent_executions={explicit} exceeds item_concurrency={item_concurrency}: "
            "every execution needs at least one slot of the job's pool of item_concurrency "
            "handlers, so at most item_concurrency executions can run at once"
        )
    return explicit


def subscribe_request(
    job: JobSpec,
    *,
    overwrite: bool,
    instance_id: str,
    labels: Mapping[str, str],
    instance_suffix: str = "",
    max_concurrent_executions: Optional[int] = None,
) -> pb.SubscribeRequest:
    """A ``SubscribeRequest``; a bare job name subscribes to an existing job without config.

    ``max_concurrent_executions`` (1 to 1024) is sent as it is; ``None`` leaves the field unset,
    which the sidecar reads as 1 (ElasticJob's one execution at a time)."""
    req = pb.SubscribeRequest(
        job_name=job_name_of(job),
        overwrite=overwrite,
        pid=os.getpid(),
        instance_id=instance_id,
        instance_suffix=instance_suffix,
    )
    if max_concurrent_executions is not None:
        req.max_concurrent_executions = check_max_concurrent_executions(max_concurrent_executions)
    if isinstance(job, JobConfig):
        req.config.CopyFrom(job.to_proto())
    for key, value in labels.items():
        req.labels[key] = value
    return req


# Status codes with which a call fails without the sidecar having answered it (or with which
# the sidecar itself says "not recorded, send it again").
_TRANSPORT_CODES = frozenset({"UNAVAILABLE", "CANCELLED", "DEADLINE_EXCEEDED"})
# INTERNAL / UNKNOWN that come from the HTTP/2 layer, not from the sidecar's handler: a call
# written on a connection the sidecar had closed (GOAWAY), a reset stream.
_TRANSPORT_DETAILS = re.compile(
    r"h2 protocol error|goaway|rst_stream|stream removed|connection reset|broken pipe|"
    r"socket closed|connection closed|http2",
    re.IGNORECASE,
)


def is_transport_failure(code: str, details: str = "") -> bool:
    """Whether a call that ended with gRPC status ``code`` (its name, e.g. ``"UNAVAILABLE"``)
    failed in transport: the sidecar neither accepted nor refused it, so an idempotent answer
    may be sent again. Anything else that is not ``OK`` is the sidecar's answer."""
    if code in _TRANSPORT_CODES:
        return True
    if code in ("INTERNAL", "UNKNOWN"):
        return bool(_TRANSPORT_DETAILS.search(details))
    return False


#: The longest ``ReportFailure.error`` and ``Decline.reason`` the sidecar accepts, in bytes of
#: UTF-8 (it answers INVALID_ARGUMENT beyond).
MAX_TEXT_BYTES = 16384


def truncate_utf8(text: str, limit: int = MAX_TEXT_BYTES) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8, never in the middle of a character.

    Characters that cannot be encoded (lone surrogates) become ``?``, so the result is always
    valid UTF-8, as protobuf requires of a ``string`` field.
    """
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "replace")
        text = data.decode("utf-8")
    if len(data) <= limit:
        return text
    # A cut inside a multi-byte sequence leaves an incomplete tail, which "ignore" drops.
    return data[:limit].decode("utf-8", "ignore")


def failure_text(exc: BaseException) -> str:
    """The ``error`` of a ``ReportFailure``: the exception's type and text, then its traceback,
    at most :data:`MAX_TEXT_BYTES` bytes of UTF-8."""
    head = f"{type(exc).__name__}: {exc}"
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return truncate_utf8(f"{head}\n{tb}")


AnswerRequest = Union[pb.CompleteRequest, pb.ReportFailureRequest, pb.DeclineRequest]


def answer_request(call: "AnswerCall") -> Tuple[str, AnswerRequest]:
    """The ``WorkerService`` method (``"Complete"``, ``"ReportFailure"``, ``"Decline"``) and the
    request of an answer the protocol core asked to send."""
    rpc = call.rpc.value
    if rpc == "complete":
        return "Complete", pb.CompleteRequest(
            instance_id=call.instance_id, execution_id=call.execution_id, items=list(call.items)
        )
    if rpc == "report_failure":
        return "ReportFailure", pb.ReportFailureRequest(
            instance_id=call.instance_id,
            execution_id=call.execution_id,
            item=call.items[0],
            error=call.text,
        )
    return "Decline", pb.DeclineRequest(
        instance_id=call.instance_id,
        execution_id=call.execution_id,
        items=list(call.items),
        reason=call.text,
    )
