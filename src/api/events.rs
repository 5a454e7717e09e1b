//! The wire form of what the coordinator tells a worker.

use std::time::UNIX_EPOCH;

use crate::api::convert::to_proto;
use crate::coordination::{ExecutionRecord, Source, Trigger, WorkerEvent};
use crate::ops::history::item_outcome;
use crate::proto::{self, subscribe_response::Event};

/// The wire enum of an execution source.
pub fn source(s: Source) -> proto::TriggerSource {
    match s {
        Source::Cron => proto::TriggerSource::Cron,
        Source::Misfire => proto::TriggerSource::Misfire,
        Source::Failover => proto::TriggerSource::Failover,
        Source::Manual => proto::TriggerSource::Manual,
    }
}

fn timestamp(t: chrono::DateTime<chrono::Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: t.timestamp_subsec_nanos() as i32,
    }
}

fn items(items: &[(i32, String)]) -> Vec<proto::ShardItem> {
    items
        .iter()
        .map(|(item, parameter)| proto::ShardItem {
            item: *item,
            parameter: parameter.clone(),
        })
        .collect()
}

fn trigger(t: Trigger) -> proto::Trigger {
    proto::Trigger {
        execution_id: t.execution_id,
        task_id: t.task_id,
        items: items(&t.items),
        job_parameter: t.job_parameter,
        sharding_total_count: t.sharding_total_count,
        source: source(t.source) as i32,
        fire_time: Some(timestamp(t.fire_time)),
        fencing_tokens: t.fencing_tokens.into_iter().collect(),
        traceparent: t.traceparent,
        tracestate: t.tracestate,
    }
}

/// A worker event as sent on the `Subscribe` stream.
pub fn to_wire(event: WorkerEvent) -> proto::SubscribeResponse {
    let event = match event {
        WorkerEvent::Registered {
            instance_id,
            config,
        } => Event::Registered(proto::Registered {
            instance_id,
            config: Some(to_proto(&config.0, &config.1)),
        }),
        WorkerEvent::Assignment {
            items: assigned,
            leader,
            epoch,
        } => Event::Assignment(proto::Assignment {
            items: items(&assigned),
            leader,
            epoch,
        }),
        WorkerEvent::Lease {
            valid_for,
            expires_at,
            sequence,
        } => Event::Lease(proto::Lease {
            valid_for: prost_types::Duration::try_from(valid_for).ok(),
            sequence,
            expires_at: Some(timestamp(expires_at.into())),
        }),
        WorkerEvent::Trigger(t) => Event::Trigger(trigger(t)),
        WorkerEvent::Revoke { items, reason } => Event::Revoke(proto::Revoke { items, reason }),
        WorkerEvent::Shutdown { reason } => Event::Shutdown(proto::Shutdown { reason }),
    };
    proto::SubscribeResponse { event: Some(event) }
}

fn outcome_proto(name: &str) -> proto::ExecutionOutcome {
    match name {
        "completed" => proto::ExecutionOutcome::Completed,
        "failed" => proto::ExecutionOutcome::Failed,
        "revoked" => proto::ExecutionOutcome::Revoked,
        _ => proto::ExecutionOutcome::Unspecified,
    }
}

/// A wall-clock instant on the wire.
fn system_timestamp(at: std::time::SystemTime) -> prost_types::Timestamp {
    let since_epoch = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    prost_types::Timestamp {
        seconds: since_epoch.as_secs() as i64,
        nanos: since_epoch.subsec_nanos() as i32,
    }
}

/// The wire form of a record.
pub fn execution_info(r: &ExecutionRecord) -> proto::ExecutionInfo {
    proto::ExecutionInfo {
        task_id: r.task_id.clone(),
        fire_time: Some(system_timestamp(r.fire_time)),
        fencing_tokens: r.fencing_tokens.iter().map(|(i, t)| (*i, *t)).collect(),
        events: r
            .events
            .iter()
            .map(|e| proto::ExecutionEvent {
                name: e.name.to_string(),
                at: Some(system_timestamp(e.at)),
                attributes: e
                    .attributes
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect(),
            })
            .collect(),
        job_name: r.job.clone(),
        execution_id: r.execution_id.clone(),
        instance_id: r.instance_id.clone(),
        source: source(r.source) as i32,
        items: r.items.keys().copied().collect(),
        started_at: Some(system_timestamp(r.started_at)),
        duration: Some(prost_types::Duration {
            seconds: r.duration.as_secs() as i64,
            nanos: r.duration.subsec_nanos() as i32,
        }),
        outcome: outcome_proto(r.outcome()) as i32,
        error: r.error().unwrap_or_default().to_string(),
        item_results: r
            .items
            .iter()
            .map(|(item, outcome)| {
                let (name, error) = item_outcome(outcome);
                proto::ItemResult {
                    item: *item,
                    outcome: outcome_proto(name) as i32,
                    error: error.unwrap_or_default().to_string(),
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::history::tests::one_failed_item;
    use crate::proto;

    #[test]
    fn a_finished_execution_on_the_wire() {
        let r = one_failed_item();
        let p = super::execution_info(&r);
        assert_eq!(p.items, [0, 2]);
        assert_eq!(p.outcome, proto::ExecutionOutcome::Failed as i32);
        assert_eq!(p.error, "disk full");
        assert_eq!(
            p.item_results[1].outcome,
            proto::ExecutionOutcome::Failed as i32
        );
        assert_eq!(p.duration.unwrap().seconds, 1);
        assert_eq!(p.task_id, "orders@-@0@-@READY@-@10.0.0.1@-@7");
        assert_eq!(p.fire_time.unwrap().seconds, 1_700_000_000);
        assert_eq!(p.started_at.unwrap().nanos, 250_000_000);
    }

    #[test]
    fn the_events_of_an_execution_on_the_wire() {
        let mut r = one_failed_item();
        r.fencing_tokens = [(0, 41), (2, 43)].into();
        r.events = vec![crate::coordination::trace::SpanEvent {
            at: std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_003),
            name: "trigger sent",
            attributes: vec![("items", "0,2".into())],
        }];
        let p = super::execution_info(&r);
        assert_eq!(p.fencing_tokens[&2], 43);
        assert_eq!(p.events.len(), 1);
        assert_eq!(p.events[0].name, "trigger sent");
        assert_eq!(p.events[0].at.unwrap().nanos, 3_000_000);
        assert_eq!(p.events[0].attributes["items"], "0,2");
    }
}
