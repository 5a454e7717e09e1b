from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_TYPE_UNSPECIFIED: _ClassVar[JobType]
    JOB_TYPE_SCRIPT: _ClassVar[JobType]
    JOB_TYPE_HTTP: _ClassVar[JobType]

class ShardingStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SHARDING_STRATEGY_UNSPECIFIED: _ClassVar[ShardingStrategy]
    SHARDING_STRATEGY_AVG_ALLOCATION: _ClassVar[ShardingStrategy]
    SHARDING_STRATEGY_ODEVITY: _ClassVar[ShardingStrategy]
    SHARDING_STRATEGY_ROUND_ROBIN: _ClassVar[ShardingStrategy]

class TriggerSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRIGGER_SOURCE_UNSPECIFIED: _ClassVar[TriggerSource]
    TRIGGER_SOURCE_CRON: _ClassVar[TriggerSource]
    TRIGGER_SOURCE_MISFIRE: _ClassVar[TriggerSource]
    TRIGGER_SOURCE_FAILOVER: _ClassVar[TriggerSource]
    TRIGGER_SOURCE_MANUAL: _ClassVar[TriggerSource]
    TRIGGER_SOURCE_RETRY: _ClassVar[TriggerSource]
    TRIGGER_SOURCE_RESIDENT: _ClassVar[TriggerSource]

class ShutdownKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SHUTDOWN_KIND_UNSPECIFIED: _ClassVar[ShutdownKind]
    SHUTDOWN_KIND_DRAIN: _ClassVar[ShutdownKind]
    SHUTDOWN_KIND_REMOTE: _ClassVar[ShutdownKind]

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_OK: _ClassVar[JobState]
    JOB_STATE_CRASHED: _ClassVar[JobState]
    JOB_STATE_DISABLED: _ClassVar[JobState]
    JOB_STATE_SHARDING_FLAG: _ClassVar[JobState]

class ExecutionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_OUTCOME_UNSPECIFIED: _ClassVar[ExecutionOutcome]
    EXECUTION_OUTCOME_COMPLETED: _ClassVar[ExecutionOutcome]
    EXECUTION_OUTCOME_FAILED: _ClassVar[ExecutionOutcome]
    EXECUTION_OUTCOME_REVOKED: _ClassVar[ExecutionOutcome]
JOB_TYPE_UNSPECIFIED: JobType
JOB_TYPE_SCRIPT: JobType
JOB_TYPE_HTTP: JobType
SHARDING_STRATEGY_UNSPECIFIED: ShardingStrategy
SHARDING_STRATEGY_AVG_ALLOCATION: ShardingStrategy
SHARDING_STRATEGY_ODEVITY: ShardingStrategy
SHARDING_STRATEGY_ROUND_ROBIN: ShardingStrategy
TRIGGER_SOURCE_UNSPECIFIED: TriggerSource
TRIGGER_SOURCE_CRON: TriggerSource
TRIGGER_SOURCE_MISFIRE: TriggerSource
TRIGGER_SOURCE_FAILOVER: TriggerSource
TRIGGER_SOURCE_MANUAL: TriggerSource
TRIGGER_SOURCE_RETRY: TriggerSource
TRIGGER_SOURCE_RESIDENT: TriggerSource
SHUTDOWN_KIND_UNSPECIFIED: ShutdownKind
SHUTDOWN_KIND_DRAIN: ShutdownKind
SHUTDOWN_KIND_REMOTE: ShutdownKind
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_OK: JobState
JOB_STATE_CRASHED: JobState
JOB_STATE_DISABLED: JobState
JOB_STATE_SHARDING_FLAG: JobState
EXECUTION_OUTCOME_UNSPECIFIED: ExecutionOutcome
EXECUTION_OUTCOME_COMPLETED: ExecutionOutcome
EXECUTION_OUTCOME_FAILED: ExecutionOutcome
EXECUTION_OUTCOME_REVOKED: ExecutionOutcome

class SubscribeRequest(_message.Message):
    __slots__ = ("job_name", "config", "overwrite", "pid", "instance_id", "labels", "instance_suffix", "max_concurrent_executions")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_SUFFIX_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    config: JobConfig
    overwrite: bool
    pid: int
    instance_id: str
    labels: _containers.ScalarMap[str, str]
    instance_suffix: str
    max_concurrent_executions: int
    def __init__(self, job_name: _Optional[str] = ..., config: _Optional[_Union[JobConfig, _Mapping]] = ..., overwrite: bool = ..., pid: _Optional[int] = ..., instance_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., instance_suffix: _Optional[str] = ..., max_concurrent_executions: _Optional[int] = ...) -> None: ...

class JobConfig(_message.Message):
    __slots__ = ("job_name", "cron", "time_zone", "sharding_total_count", "sharding_item_parameters", "job_parameter", "failover", "misfire", "monitor_execution", "sharding_strategy", "max_time_diff_seconds", "reconcile_interval_minutes", "description", "disabled", "props", "execution_timeout_seconds", "job_type", "retry", "job_error_handler_type", "resident")
    class ShardingItemParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    class PropsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    SHARDING_TOTAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    SHARDING_ITEM_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    JOB_PARAMETER_FIELD_NUMBER: _ClassVar[int]
    FAILOVER_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_FIELD_NUMBER: _ClassVar[int]
    MONITOR_EXECUTION_FIELD_NUMBER: _ClassVar[int]
    SHARDING_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    MAX_TIME_DIFF_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RECONCILE_INTERVAL_MINUTES_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    PROPS_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    JOB_ERROR_HANDLER_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    cron: str
    time_zone: str
    sharding_total_count: int
    sharding_item_parameters: _containers.ScalarMap[int, str]
    job_parameter: str
    failover: bool
    misfire: bool
    monitor_execution: bool
    sharding_strategy: ShardingStrategy
    max_time_diff_seconds: int
    reconcile_interval_minutes: int
    description: str
    disabled: bool
    props: _containers.ScalarMap[str, str]
    execution_timeout_seconds: int
    job_type: JobType
    retry: RetryPolicy
    job_error_handler_type: str
    resident: bool
    def __init__(self, job_name: _Optional[str] = ..., cron: _Optional[str] = ..., time_zone: _Optional[str] = ..., sharding_total_count: _Optional[int] = ..., sharding_item_parameters: _Optional[_Mapping[int, str]] = ..., job_parameter: _Optional[str] = ..., failover: bool = ..., misfire: bool = ..., monitor_execution: bool = ..., sharding_strategy: _Optional[_Union[ShardingStrategy, str]] = ..., max_time_diff_seconds: _Optional[int] = ..., reconcile_interval_minutes: _Optional[int] = ..., description: _Optional[str] = ..., disabled: bool = ..., props: _Optional[_Mapping[str, str]] = ..., execution_timeout_seconds: _Optional[int] = ..., job_type: _Optional[_Union[JobType, str]] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ..., job_error_handler_type: _Optional[str] = ..., resident: bool = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff", "max_backoff", "multiplier")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff: _duration_pb2.Duration
    max_backoff: _duration_pb2.Duration
    multiplier: float
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., max_backoff: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., multiplier: _Optional[float] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ("registered", "assignment", "trigger", "revoke", "shutdown", "lease")
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    REVOKE_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    registered: Registered
    assignment: Assignment
    trigger: Trigger
    revoke: Revoke
    shutdown: Shutdown
    lease: Lease
    def __init__(self, registered: _Optional[_Union[Registered, _Mapping]] = ..., assignment: _Optional[_Union[Assignment, _Mapping]] = ..., trigger: _Optional[_Union[Trigger, _Mapping]] = ..., revoke: _Optional[_Union[Revoke, _Mapping]] = ..., shutdown: _Optional[_Union[Shutdown, _Mapping]] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("valid_for", "sequence", "expires_at")
    VALID_FOR_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    valid_for: _duration_pb2.Duration
    sequence: int
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, valid_for: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., sequence: _Optional[int] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("instance_id", "config")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    config: JobConfig
    def __init__(self, instance_id: _Optional[str] = ..., config: _Optional[_Union[JobConfig, _Mapping]] = ...) -> None: ...

class ShardItem(_message.Message):
    __slots__ = ("item", "parameter")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_FIELD_NUMBER: _ClassVar[int]
    item: int
    parameter: str
    def __init__(self, item: _Optional[int] = ..., parameter: _Optional[str] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("items", "leader", "epoch")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ShardItem]
    leader: bool
    epoch: int
    def __init__(self, items: _Optional[_Iterable[_Union[ShardItem, _Mapping]]] = ..., leader: bool = ..., epoch: _Optional[int] = ...) -> None: ...

class Trigger(_message.Message):
    __slots__ = ("execution_id", "task_id", "items", "job_parameter", "sharding_total_count", "source", "fire_time", "fencing_tokens", "traceparent", "tracestate", "attempt")
    class FencingTokensEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    JOB_PARAMETER_FIELD_NUMBER: _ClassVar[int]
    SHARDING_TOTAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    task_id: str
    items: _containers.RepeatedCompositeFieldContainer[ShardItem]
    job_parameter: str
    sharding_total_count: int
    source: TriggerSource
    fire_time: _timestamp_pb2.Timestamp
    fencing_tokens: _containers.ScalarMap[int, int]
    traceparent: str
    tracestate: str
    attempt: int
    def __init__(self, execution_id: _Optional[str] = ..., task_id: _Optional[str] = ..., items: _Optional[_Iterable[_Union[ShardItem, _Mapping]]] = ..., job_parameter: _Optional[str] = ..., sharding_total_count: _Optional[int] = ..., source: _Optional[_Union[TriggerSource, str]] = ..., fire_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., fencing_tokens: _Optional[_Mapping[int, int]] = ..., traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class Revoke(_message.Message):
    __slots__ = ("items", "reason")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedScalarFieldContainer[int]
    reason: str
    def __init__(self, items: _Optional[_Iterable[int]] = ..., reason: _Optional[str] = ...) -> None: ...

class Shutdown(_message.Message):
    __slots__ = ("reason", "kind")
    REASON_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    reason: str
    kind: ShutdownKind
    def __init__(self, reason: _Optional[str] = ..., kind: _Optional[_Union[ShutdownKind, str]] = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ("instance_id", "execution_id", "items")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    execution_id: str
    items: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, instance_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., items: _Optional[_Iterable[int]] = ...) -> None: ...

class CompleteResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReportFailureRequest(_message.Message):
    __slots__ = ("instance_id", "execution_id", "item", "error")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    execution_id: str
    item: int
    error: str
    def __init__(self, instance_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., item: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class ReportFailureResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeclineRequest(_message.Message):
    __slots__ = ("instance_id", "execution_id", "items", "reason")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    execution_id: str
    items: _containers.RepeatedScalarFieldContainer[int]
    reason: str
    def __init__(self, instance_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., items: _Optional[_Iterable[int]] = ..., reason: _Optional[str] = ...) -> None: ...

class DeclineResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobSummary]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobSummary, _Mapping]]] = ...) -> None: ...

class JobSummary(_message.Message):
    __slots__ = ("job_name", "cron", "sharding_total_count", "description", "state", "instance_count", "server_count", "leader")
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    SHARDING_TOTAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    SERVER_COUNT_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    cron: str
    sharding_total_count: int
    description: str
    state: JobState
    instance_count: int
    server_count: int
    leader: str
    def __init__(self, job_name: _Optional[str] = ..., cron: _Optional[str] = ..., sharding_total_count: _Optional[int] = ..., description: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., instance_count: _Optional[int] = ..., server_count: _Optional[int] = ..., leader: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_name",)
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    def __init__(self, job_name: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: JobDetail
    def __init__(self, job: _Optional[_Union[JobDetail, _Mapping]] = ...) -> None: ...

class JobDetail(_message.Message):
    __slots__ = ("config", "state", "leader", "servers", "instances", "items", "sharding_necessary")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    SHARDING_NECESSARY_FIELD_NUMBER: _ClassVar[int]
    config: JobConfig
    state: JobState
    leader: str
    servers: _containers.RepeatedCompositeFieldContainer[ServerInfo]
    instances: _containers.RepeatedCompositeFieldContainer[InstanceInfo]
    items: _containers.RepeatedCompositeFieldContainer[ItemInfo]
    sharding_necessary: bool
    def __init__(self, config: _Optional[_Union[JobConfig, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ..., leader: _Optional[str] = ..., servers: _Optional[_Iterable[_Union[ServerInfo, _Mapping]]] = ..., instances: _Optional[_Iterable[_Union[InstanceInfo, _Mapping]]] = ..., items: _Optional[_Iterable[_Union[ItemInfo, _Mapping]]] = ..., sharding_necessary: bool = ...) -> None: ...

class ServerInfo(_message.Message):
    __slots__ = ("ip", "disabled", "instance_count")
    IP_FIELD_NUMBER: _ClassVar[int]
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    ip: str
    disabled: bool
    instance_count: int
    def __init__(self, ip: _Optional[str] = ..., disabled: bool = ..., instance_count: _Optional[int] = ...) -> None: ...

class InstanceInfo(_message.Message):
    __slots__ = ("instance_id", "server_ip", "leader", "items", "via_sidecar")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SERVER_IP_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    VIA_SIDECAR_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    server_ip: str
    leader: bool
    items: _containers.RepeatedScalarFieldContainer[int]
    via_sidecar: bool
    def __init__(self, instance_id: _Optional[str] = ..., server_ip: _Optional[str] = ..., leader: bool = ..., items: _Optional[_Iterable[int]] = ..., via_sidecar: bool = ...) -> None: ...

class ItemInfo(_message.Message):
    __slots__ = ("item", "parameter", "owner", "running", "running_instance", "misfire", "disabled", "failover_instance", "failover_pending", "handoff")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_FIELD_NUMBER: _ClassVar[int]
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    FAILOVER_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    FAILOVER_PENDING_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_FIELD_NUMBER: _ClassVar[int]
    item: int
    parameter: str
    owner: str
    running: bool
    running_instance: str
    misfire: bool
    disabled: bool
    failover_instance: str
    failover_pending: bool
    handoff: bool
    def __init__(self, item: _Optional[int] = ..., parameter: _Optional[str] = ..., owner: _Optional[str] = ..., running: bool = ..., running_instance: _Optional[str] = ..., misfire: bool = ..., disabled: bool = ..., failover_instance: _Optional[str] = ..., failover_pending: bool = ..., handoff: bool = ...) -> None: ...

class PutJobRequest(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: JobConfig
    def __init__(self, config: _Optional[_Union[JobConfig, _Mapping]] = ...) -> None: ...

class PutJobResponse(_message.Message):
    __slots__ = ("created",)
    CREATED_FIELD_NUMBER: _ClassVar[int]
    created: bool
    def __init__(self, created: bool = ...) -> None: ...

class RemoveJobRequest(_message.Message):
    __slots__ = ("job_name",)
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    def __init__(self, job_name: _Optional[str] = ...) -> None: ...

class RemoveJobResponse(_message.Message):
    __slots__ = ("instance_ids",)
    INSTANCE_IDS_FIELD_NUMBER: _ClassVar[int]
    instance_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, instance_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class TriggerJobRequest(_message.Message):
    __slots__ = ("job_name", "job_parameter")
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_PARAMETER_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    job_parameter: str
    def __init__(self, job_name: _Optional[str] = ..., job_parameter: _Optional[str] = ...) -> None: ...

class TriggerJobResponse(_message.Message):
    __slots__ = ("instance_ids",)
    INSTANCE_IDS_FIELD_NUMBER: _ClassVar[int]
    instance_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, instance_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DisableJobRequest(_message.Message):
    __slots__ = ("job_name",)
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    def __init__(self, job_name: _Optional[str] = ...) -> None: ...

class DisableJobResponse(_message.Message):
    __slots__ = ("server_ips",)
    SERVER_IPS_FIELD_NUMBER: _ClassVar[int]
    server_ips: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, server_ips: _Optional[_Iterable[str]] = ...) -> None: ...

class EnableJobRequest(_message.Message):
    __slots__ = ("job_name",)
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    def __init__(self, job_name: _Optional[str] = ...) -> None: ...

class EnableJobResponse(_message.Message):
    __slots__ = ("server_ips",)
    SERVER_IPS_FIELD_NUMBER: _ClassVar[int]
    server_ips: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, server_ips: _Optional[_Iterable[str]] = ...) -> None: ...

class DisableItemRequest(_message.Message):
    __slots__ = ("job_name", "items")
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    items: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, job_name: _Optional[str] = ..., items: _Optional[_Iterable[int]] = ...) -> None: ...

class DisableItemResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EnableItemRequest(_message.Message):
    __slots__ = ("job_name", "items")
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    items: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, job_name: _Optional[str] = ..., items: _Optional[_Iterable[int]] = ...) -> None: ...

class EnableItemResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DisableServerRequest(_message.Message):
    __slots__ = ("job_name", "server_ip")
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    SERVER_IP_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    server_ip: str
    def __init__(self, job_name: _Optional[str] = ..., server_ip: _Optional[str] = ...) -> None: ...

class DisableServerResponse(_message.Message):
    __slots__ = ("job_names",)
    JOB_NAMES_FIELD_NUMBER: _ClassVar[int]
    job_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_names: _Optional[_Iterable[str]] = ...) -> None: ...

class EnableServerRequest(_message.Message):
    __slots__ = ("job_name", "server_ip")
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    SERVER_IP_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    server_ip: str
    def __init__(self, job_name: _Optional[str] = ..., server_ip: _Optional[str] = ...) -> None: ...

class EnableServerResponse(_message.Message):
    __slots__ = ("job_names",)
    JOB_NAMES_FIELD_NUMBER: _ClassVar[int]
    job_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_names: _Optional[_Iterable[str]] = ...) -> None: ...

class ShutdownInstanceRequest(_message.Message):
    __slots__ = ("job_name", "instance_id")
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    instance_id: str
    def __init__(self, job_name: _Optional[str] = ..., instance_id: _Optional[str] = ...) -> None: ...

class ShutdownInstanceResponse(_message.Message):
    __slots__ = ("job_names",)
    JOB_NAMES_FIELD_NUMBER: _ClassVar[int]
    job_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_names: _Optional[_Iterable[str]] = ...) -> None: ...

class ListExecutionsRequest(_message.Message):
    __slots__ = ("job_name", "limit")
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    limit: int
    def __init__(self, job_name: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListExecutionsResponse(_message.Message):
    __slots__ = ("executions",)
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    executions: _containers.RepeatedCompositeFieldContainer[ExecutionInfo]
    def __init__(self, executions: _Optional[_Iterable[_Union[ExecutionInfo, _Mapping]]] = ...) -> None: ...

class ItemResult(_message.Message):
    __slots__ = ("item", "outcome", "error")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    item: int
    outcome: ExecutionOutcome
    error: str
    def __init__(self, item: _Optional[int] = ..., outcome: _Optional[_Union[ExecutionOutcome, str]] = ..., error: _Optional[str] = ...) -> None: ...

class ExecutionInfo(_message.Message):
    __slots__ = ("job_name", "execution_id", "instance_id", "source", "items", "started_at", "duration", "outcome", "error", "item_results", "task_id", "fire_time", "fencing_tokens", "events", "attempt")
    class FencingTokensEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ITEM_RESULTS_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    execution_id: str
    instance_id: str
    source: TriggerSource
    items: _containers.RepeatedScalarFieldContainer[int]
    started_at: _timestamp_pb2.Timestamp
    duration: _duration_pb2.Duration
    outcome: ExecutionOutcome
    error: str
    item_results: _containers.RepeatedCompositeFieldContainer[ItemResult]
    task_id: str
    fire_time: _timestamp_pb2.Timestamp
    fencing_tokens: _containers.ScalarMap[int, int]
    events: _containers.RepeatedCompositeFieldContainer[ExecutionEvent]
    attempt: int
    def __init__(self, job_name: _Optional[str] = ..., execution_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., source: _Optional[_Union[TriggerSource, str]] = ..., items: _Optional[_Iterable[int]] = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., outcome: _Optional[_Union[ExecutionOutcome, str]] = ..., error: _Optional[str] = ..., item_results: _Optional[_Iterable[_Union[ItemResult, _Mapping]]] = ..., task_id: _Optional[str] = ..., fire_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., fencing_tokens: _Optional[_Mapping[int, int]] = ..., events: _Optional[_Iterable[_Union[ExecutionEvent, _Mapping]]] = ..., attempt: _Optional[int] = ...) -> None: ...

class ExecutionEvent(_message.Message):
    __slots__ = ("name", "at", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    at: _timestamp_pb2.Timestamp
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("job_name",)
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    def __init__(self, job_name: _Optional[str] = ...) -> None: ...

class WatchJobResponse(_message.Message):
    __slots__ = ("at", "changes", "job", "removed")
    AT_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    changes: _containers.RepeatedScalarFieldContainer[str]
    job: JobDetail
    removed: bool
    def __init__(self, at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., changes: _Optional[_Iterable[str]] = ..., job: _Optional[_Union[JobDetail, _Mapping]] = ..., removed: bool = ...) -> None: ...
