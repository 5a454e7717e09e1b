"""Job configuration: :class:`JobConfig`, the Python face of ``shardcar.v1.JobConfig``, and
its :class:`RetryPolicy`.

Field names follow ElasticJob-Lite's ``JobConfiguration`` in snake case. The four optional
fields (``misfire``, ``monitor_execution``, ``max_time_diff_seconds``,
``reconcile_interval_minutes``) stay unset on the wire unless given, so the sidecar applies
ElasticJob's builder defaults and a config built here means what the same config means in Java.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import timedelta
from typing import ClassVar, Mapping, Optional, Tuple, Union

from ._proto import shardcar_pb2 as pb

__all__ = ["JobConfig", "ShardingStrategy", "RetryPolicy", "ERROR_HANDLER_TYPES"]

#: The values of ``JobConfig.job_error_handler_type`` (ElasticJob's ``jobErrorHandlerType``, plus
#: shardcar's own ``WEBHOOK``); their settings are job ``props`` under ElasticJob's names
#: (``dingtalk.webhook``, ``email.host``, ``webhook.url``, ...), which the sidecar checks.
ERROR_HANDLER_TYPES: Tuple[str, ...] = (
    "LOG", "IGNORE", "THROW", "EMAIL", "WECHAT", "DINGTALK", "WEBHOOK",
)

#: A backoff as :class:`RetryPolicy` takes it: a ``timedelta`` or a number of seconds.
Backoff = Union[timedelta, float]


class ShardingStrategy(enum.IntEnum):
    """How the job leader spreads items over instances (ElasticJob's built-in strategies).

    The values are the wire's ``SHARDING_STRATEGY_*`` numbers. A name works too wherever a
    strategy is taken: ``ShardingStrategy.parse("ROUND_ROBIN")``, or
    ``JobConfig(sharding_strategy="ROUND_ROBIN")``.
    """

    AVG_ALLOCATION = pb.SHARDING_STRATEGY_AVG_ALLOCATION
    ODEVITY = pb.SHARDING_STRATEGY_ODEVITY
    ROUND_ROBIN = pb.SHARDING_STRATEGY_ROUND_ROBIN

    @classmethod
    def parse(cls, value: "Union[ShardingStrategy, str, int]") -> "ShardingStrategy":
        """A strategy from a member, its name (``"AVG_ALLOCATION"``, ``"ODEVITY"``,
        ``"ROUND_ROBIN"``, any case) or its wire number; ``ValueError`` for anything else."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                pass
        elif isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls.from_proto(value)
            except ValueError:
                pass
        names = ", ".join(m.name for m in cls)
        raise ValueError(f"unknown sharding strategy {value!r} (one of {names})")

    @classmethod
    def from_proto(cls, value: int) -> "ShardingStrategy":
        """The strategy a wire value means; unset (``SHARDING_STRATEGY_UNSPECIFIED``) is
        ``AVG_ALLOCATION``, ElasticJob's default, as the sidecar reads it."""
        if value == pb.SHARDING_STRATEGY_UNSPECIFIED:
            return cls.AVG_ALLOCATION
        return cls(value)


@dataclass(frozen=True, init=False)
class RetryPolicy:
    """How the sidecar runs a failed item again (``shardcar.v1.RetryPolicy``).

    An item whose handler raised (or that ran past ``execution_timeout_seconds``) runs again as a
    new execution of source ``RETRY`` on the item's owner, ``ctx.attempt`` 1 for the first retry,
    after ``initial_backoff``; each further wait is the one before times ``multiplier``, at most
    ``max_backoff``; ``max_attempts`` runs in all, the first included. Backoffs are a
    ``timedelta`` or seconds, read back as a ``timedelta``; ``None`` leaves a field unset for the
    sidecar's default (1 s, 1 min but never below ``initial_backoff``, 2).

    ``ValueError`` naming the field (``retry.max_attempts``, ...) when the policy is made with a
    value the sidecar refuses: ``max_attempts`` 0 to 100 (0 and 1 both mean no retries, as the
    sidecar reads them), backoffs 10 ms to 1 day, ``max_backoff`` not below ``initial_backoff``,
    ``multiplier`` 1 to 10.

    A resident job (``JobConfig(resident=True)``) uses the backoffs, not the attempts: they are
    the waits before a hold its worker ended is started again. The sidecar keeps a policy only
    when ``max_attempts`` is at least 2; with 0 or 1 a resident job waits 1 s doubling to 1 min.
    """

    #: Runs of an item in all, the first included (3: the first run and two retries); 0 or 1:
    #: no retries.
    max_attempts: int
    initial_backoff: Optional[timedelta] = None
    max_backoff: Optional[timedelta] = None
    multiplier: Optional[float] = None

    #: The sidecar's limits, and the initial backoff it uses when none is given.
    MAX_ATTEMPTS: ClassVar[int] = 100
    MIN_BACKOFF: ClassVar[timedelta] = timedelta(milliseconds=10)
    MAX_BACKOFF: ClassVar[timedelta] = timedelta(days=1)
    DEFAULT_INITIAL_BACKOFF: ClassVar[timedelta] = timedelta(seconds=1)

    def __init__(
        self,
        max_attempts: int,
        initial_backoff: Optional[Backoff] = None,
        max_backoff: Optional[Backoff] = None,
        multiplier: Optional[float] = None,
    ) -> None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) \
                or not 0 <= max_attempts <= self.MAX_ATTEMPTS:
            raise ValueError(
                f"retry.max_attempts must be an int from 0 to {self.MAX_ATTEMPTS} (runs of an "
                f"item in all, the first included; 0 or 1: no retries), got {max_attempts!r}"
            )
        initial = _backoff("retry.initial_backoff", initial_backoff)
        longest = _backoff("retry.max_backoff", max_backoff)
        floor = initial if initial is not None else self.DEFAULT_INITIAL_BACKOFF
        if longest is not None and longest < floor:
            below = (f"retry.initial_backoff ({_seconds(initial)})" if initial is not None
                     else f"the default initial_backoff ({_seconds(self.DEFAULT_INITIAL_BACKOFF)})")
            raise ValueError(
                f"retry.max_backoff ({_seconds(longest)}) must not be below {below}"
            )
        if multiplier is not None:
            if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) \
                    or not 1 <= multiplier <= 10:  # NaN compares false
                raise ValueError(
                    f"retry.multiplier must be a number from 1 to 10 (each wait is the one "
                    f"before times it), got {multiplier!r}"
                )
            multiplier = float(multiplier)
        object.__setattr__(self, "max_attempts", max_attempts)
        object.__setattr__(self, "initial_backoff", initial)
        object.__setattr__(self, "max_backoff", longest)
        object.__setattr__(self, "multiplier", multiplier)

    def to_proto(self) -> pb.RetryPolicy:
        """The wire message; unset fields stay unset (``multiplier`` 0)."""
        msg = pb.RetryPolicy(max_attempts=self.max_attempts, multiplier=self.multiplier or 0.0)
        if self.initial_backoff is not None:
            msg.initial_backoff.FromTimedelta(self.initial_backoff)
        if self.max_backoff is not None:
            msg.max_backoff.FromTimedelta(self.max_backoff)
        return msg

    @classmethod
    def from_proto(cls, msg: pb.RetryPolicy) -> "RetryPolicy":
        """The policy a wire message says, taken as it is: what the sidecar sends is the job's
        effective policy (every field set), which it checked when it was written; one it did not
        check (data written to ZooKeeper by hand) must not stop a worker from reading its
        stream."""
        policy = cls.__new__(cls)
        object.__setattr__(policy, "max_attempts", msg.max_attempts)
        object.__setattr__(policy, "initial_backoff", msg.initial_backoff.ToTimedelta()
                           if msg.HasField("initial_backoff") else None)
        object.__setattr__(policy, "max_backoff", msg.max_backoff.ToTimedelta()
                           if msg.HasField("max_backoff") else None)
        object.__setattr__(policy, "multiplier", msg.multiplier or None)
        return policy


def _backoff(name: str, value: Optional[Backoff]) -> Optional[timedelta]:
    """``value`` as a ``timedelta`` within the sidecar's limits; ``ValueError`` naming ``name``."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        delta: Optional[timedelta] = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        # Checked as a number first: timedelta() overflows on huge ones and refuses NaN.
        low, high = RetryPolicy.MIN_BACKOFF.total_seconds(), RetryPolicy.MAX_BACKOFF.total_seconds()
        delta = timedelta(seconds=value) if low <= value <= high else None
    else:
        raise ValueError(f"{name} must be a timedelta or a number of seconds, got {value!r}")
    if delta is None or not RetryPolicy.MIN_BACKOFF <= delta <= RetryPolicy.MAX_BACKOFF:
        got = _seconds(value) if isinstance(value, timedelta) else f"{value!r} s"
        raise ValueError(f"{name} must be between 10 ms and 1 day, got {got}")
    return delta


def _seconds(delta: Optional[timedelta]) -> str:
    return "unset" if delta is None else f"{delta.total_seconds():g} s"


@dataclass(frozen=True)
class JobConfig:
    """A job's configuration, sent with the first subscription (creates the job if absent).

    ``cron`` is Quartz syntax with a seconds field (``"0/5 * * * * ?"``); empty means a one-off
    job that runs only when triggered through the admin API. Validation is the sidecar's: an
    invalid value raises :class:`shardcar.InvalidJobConfigError` naming the field. ``retry`` and
    ``job_error_handler_type`` are also checked when the config is made (``ValueError`` naming
    the field), so a policy the sidecar would refuse fails where it is written.

    ``retry``: how a failed item runs again (:class:`RetryPolicy`); ``None``: it does not, it
    waits for the next fire, as in ElasticJob. ``job_error_handler_type``: ElasticJob's
    ``jobErrorHandlerType``, how the sidecar reports a failure that stands (its retries, if any,
    ran out): one of :data:`ERROR_HANDLER_TYPES` (any case; stored in upper case), its settings
    in ``props``; empty: unset (ElasticJob's default, LOG).

    ``resident``: each item is *held* by one worker, its owner's, instead of run at fire
    instants (register the handler with ``@worker.resident``, which sets it). A resident job has
    no ``cron``, no ``failover`` and no ``execution_timeout_seconds``, and keeps
    ``monitor_execution`` on: the config refuses those at once (``ValueError`` naming the field),
    as the sidecar would. ``retry`` gives the backoffs before a hold its worker ended is started
    again (1 s doubling to 1 min without one).
    """

    job_name: str
    cron: str = ""
    sharding_total_count: int = 1
    sharding_item_parameters: Mapping[int, str] = field(default_factory=dict)
    job_parameter: str = ""
    time_zone: str = ""
    failover: bool = False
    misfire: Optional[bool] = None
    monitor_execution: Optional[bool] = None
    # A ``ShardingStrategy`` or its name (``"ROUND_ROBIN"``); stored as the member.
    sharding_strategy: ShardingStrategy = ShardingStrategy.AVG_ALLOCATION
    max_time_diff_seconds: Optional[int] = None
    reconcile_interval_minutes: Optional[int] = None
    description: str = ""
    disabled: bool = False
    props: Mapping[str, str] = field(default_factory=dict)
    execution_timeout_seconds: int = 0
    retry: Optional[RetryPolicy] = None
    job_error_handler_type: str = ""
    resident: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "sharding_strategy", ShardingStrategy.parse(self.sharding_strategy)
        )
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise ValueError(
                f"retry must be a RetryPolicy or None, got {type(self.retry).__name__}"
            )
        handler = self.job_error_handler_type
        if not isinstance(handler, str) or handler.strip().upper() not in ("",) + ERROR_HANDLER_TYPES:
            raise ValueError(
                f"job_error_handler_type must be one of {', '.join(ERROR_HANDLER_TYPES)} (or "
                f"empty: unset, LOG), got {handler!r}"
            )
        object.__setattr__(self, "job_error_handler_type", handler.strip().upper())
        if not isinstance(self.resident, bool):
            raise ValueError(f"resident must be True or False, got {self.resident!r}")
        if self.resident:
            refusal = resident_refusal(self)
            if refusal is not None:
                raise ValueError(refusal)

    def to_proto(self) -> pb.JobConfig:
        """The wire message; optional fields are set only when not ``None``."""
        msg = pb.JobConfig(
            job_name=self.job_name,
            cron=self.cron,
            time_zone=self.time_zone,
            sharding_total_count=self.sharding_total_count,
            job_parameter=self.job_parameter,
            failover=self.failover,
            sharding_strategy=int(self.sharding_strategy),  # type: ignore[arg-type]
            description=self.description,
            disabled=self.disabled,
            execution_timeout_seconds=self.execution_timeout_seconds,
            job_error_handler_type=self.job_error_handler_type,
            resident=self.resident,
        )
        if self.retry is not None:
            msg.retry.CopyFrom(self.retry.to_proto())
        for item, parameter in self.sharding_item_parameters.items():
            msg.sharding_item_parameters[int(item)] = str(parameter)
        for key, value in self.props.items():
            msg.props[str(key)] = str(value)
        if self.misfire is not None:
            msg.misfire = self.misfire
        if self.monitor_execution is not None:
            msg.monitor_execution = self.monitor_execution
        if self.max_time_diff_seconds is not None:
            msg.max_time_diff_seconds = self.max_time_diff_seconds
        if self.reconcile_interval_minutes is not None:
            msg.reconcile_interval_minutes = self.reconcile_interval_minutes
        return msg

    @classmethod
    def from_proto(cls, msg: pb.JobConfig) -> "JobConfig":
        """Builds a config from the wire message (unset optional fields become ``None``).

        The error handler type is taken as it is: a job written by an ElasticJob process may
        name a handler of its own (an SPI type) that this client does not know; so is
        ``resident``, whatever the rest says (the sidecar checked it when it was written)."""

        def opt(name: str) -> object:
            return getattr(msg, name) if msg.HasField(name) else None

        config = cls(
            job_name=msg.job_name,
            cron=msg.cron,
            sharding_total_count=msg.sharding_total_count,
            sharding_item_parameters=dict(msg.sharding_item_parameters),
            job_parameter=msg.job_parameter,
            time_zone=msg.time_zone,
            failover=msg.failover,
            misfire=opt("misfire"),  # type: ignore[arg-type]
            monitor_execution=opt("monitor_execution"),  # type: ignore[arg-type]
            sharding_strategy=ShardingStrategy.from_proto(msg.sharding_strategy),
            max_time_diff_seconds=opt("max_time_diff_seconds"),  # type: ignore[arg-type]
            reconcile_interval_minutes=opt("reconcile_interval_minutes"),  # type: ignore[arg-type]
            description=msg.description,
            disabled=msg.disabled,
            props=dict(msg.props),
            execution_timeout_seconds=msg.execution_timeout_seconds,
            retry=RetryPolicy.from_proto(msg.retry) if msg.HasField("retry") else None,
        )
        object.__setattr__(config, "job_error_handler_type", msg.job_error_handler_type)
        object.__setattr__(config, "resident", msg.resident)
        return config


def resident_refusal(config: JobConfig) -> Optional[str]:
    """Why the sidecar refuses ``config`` as a resident job (``check_resident`` of its config
    checks), naming the field; ``None`` when it takes it."""
    unless = " (or make the job not resident)"
    if config.cron.strip():
        return (f"cron: a resident job has no cron: its items are held, not fired; leave the "
                f"cron empty, got {config.cron!r}{unless}")
    if config.failover:
        return ("failover: a resident job moves its items with the sharding, not by failover; "
                "turn failover off" + unless)
    if config.monitor_execution is False:
        return ("monitor_execution: a resident job needs monitorExecution: each hold is guarded "
                "by the item's running node; turn it on or leave it unset" + unless)
    if config.execution_timeout_seconds != 0:
        return (f"execution_timeout_seconds: a resident job holds its items until they are "
                f"revoked; leave the execution timeout at 0, got "
                f"{config.execution_timeout_seconds}{unless}")
    return None
