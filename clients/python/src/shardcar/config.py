"""Job configuration: :class:`JobConfig`, the Python face of ``shardcar.v1.JobConfig``.

Field names follow ElasticJob-Lite's ``JobConfiguration`` in snake case. The four optional
fields (``misfire``, ``monitor_execution``, ``max_time_diff_seconds``,
``reconcile_interval_minutes``) stay unset on the wire unless given, so the sidecar applies
ElasticJob's builder defaults and a config built here means what the same config means in Java.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping, Optional, Union

from ._proto import shardcar_pb2 as pb

__all__ = ["JobConfig", "ShardingStrategy"]


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


@dataclass(frozen=True)
class JobConfig:
    """A job's configuration, sent with the first subscription (creates the job if absent).

    ``cron`` is Quartz syntax with a seconds field (``"0/5 * * * * ?"``); empty means a one-off
    job that runs only when triggered through the admin API. Validation is the sidecar's: an
    invalid value raises :class:`shardcar.InvalidJobConfigError` naming the field.
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

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "sharding_strategy", ShardingStrategy.parse(self.sharding_strategy)
        )

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
        )
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
        """Builds a config from the wire message (unset optional fields become ``None``)."""

        def opt(name: str) -> object:
            return getattr(msg, name) if msg.HasField(name) else None

        return cls(
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
        )
