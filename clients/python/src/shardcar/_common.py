"""Settings shared by the sync and asyncio workers: target, channel options, requests, backoff."""

from __future__ import annotations

import logging
import os
import random
import traceback
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple, Union

from ._proto import shardcar_pb2 as pb
from .config import JobConfig

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


def subscribe_request(
    job: JobSpec, *, overwrite: bool, instance_id: str, labels: Mapping[str, str]
) -> pb.SubscribeRequest:
    """A ``SubscribeRequest``; a bare job name subscribes to an existing job without config."""
    req = pb.SubscribeRequest(
        job_name=job_name_of(job),
        overwrite=overwrite,
        pid=os.getpid(),
        instance_id=instance_id,
    )
    if isinstance(job, JobConfig):
        req.config.CopyFrom(job.to_proto())
    for key, value in labels.items():
        req.labels[key] = value
    return req


@dataclass
class Backoff:
    """Exponential backoff with full jitter between ``initial`` and ``maximum`` seconds."""

    initial: float = 0.1
    maximum: float = 5.0
    _current: float = 0.0

    def reset(self) -> None:
        self._current = 0.0

    def next(self) -> float:
        self._current = self.initial if self._current == 0 else min(self._current * 2, self.maximum)
        return random.uniform(self._current / 2, self._current)


def failure_text(exc: BaseException) -> str:
    """The ``error`` of a ``ReportFailure``: the exception's type and text, then its traceback."""
    head = f"{type(exc).__name__}: {exc}"
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return f"{head}\n{tb}"[:16000]
