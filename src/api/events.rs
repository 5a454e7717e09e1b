//! The wire form of what the coordinator tells a worker.

use std::time::UNIX_EPOCH;

use crate::api::convert::to_proto;
use crate::coordination::{ExecutionRecord, ShutdownKind, Source, Trigger, WorkerEvent};
use crate::ops::history::item_outcome;
use crate::proto::{self, subscribe_response::Event};

/// The wire enum of an execution source.
pub fn source(s: Source) -> proto::TriggerSource {
    match s {
        Source::Cron => proto::TriggerSource::Cron,
        Source::Misfire => proto::TriggerSource::Misfire,
        Source::Failover => proto::TriggerSource::Failover,
        Source::Manual => proto::TriggerSource::Manual,
        Source::Retry => proto::TriggerSource::Retry,
        Source::Resident => proto::TriggerSource::Resident,
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
        attempt: t.attempt,
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
        WorkerEvent::Trigger(t) => Event::Trigger(trigger(*t)),
        WorkerEvent::Revoke { items, reason } => Event::Revoke(proto::Revoke { items, reason }),
        WorkerEvent::Shutdown { reason, kind } => Event::Shutdown(proto::Shutdown {
            reason,
            kind: match kind {
                ShutdownKind::Drain => proto::ShutdownKind::Drain,
                ShutdownKind::Remote => proto::ShutdownKind::Remote,
            } as i32,
        }),
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
        attempt: r.attempt,
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

/// The error of an item whose row has no outcome: ElasticJob writes the row as the item starts
/// and completes it when the item ends; shardcar writes an item taken back (its worker gone,
/// its lease run out) the same way.
pub const NO_OUTCOME: &str =
    "no outcome recorded: still running, or stopped without one (taken back, or its process ended)";

/// The wire form of an execution read back from ElasticJob's tracing tables (any sidecar's, or
/// an ElasticJob process's). What the tables do not keep stays unset: the fire time, fencing
/// tokens and events; the execution id is the id of its first item's row.
///
/// `source`: `MISFIRE` as written; `FAILOVER` with a retry's attempt (`tracing_db::rows`
/// writes a retry so) is `RETRY` with that attempt, without one a failover (ElasticJob
/// Cloud's); ElasticJob-Lite's `NORMAL_TRIGGER`, which stands for a cron fire, a trigger-once
/// and a failover alike, is `TRIGGER_SOURCE_UNSPECIFIED`.
/// `outcome`: unset while an item has no outcome, else failed if an item failed, else completed.
pub fn traced_execution_info(
    e: &crate::ops::tracing_db::reader::TracedExecution,
) -> proto::ExecutionInfo {
    use crate::ops::tracing_db::reader::instant;
    let first = &e.rows[0];
    let started = e.started();
    let (source, attempt) = match (first.execution_source.as_str(), first.attempt) {
        ("MISFIRE", _) => (proto::TriggerSource::Misfire, 0),
        ("FAILOVER", Some(attempt)) => (proto::TriggerSource::Retry, attempt),
        ("FAILOVER", None) => (proto::TriggerSource::Failover, 0),
        _ => (proto::TriggerSource::Unspecified, 0),
    };
    let item_outcome =
        |r: &crate::ops::tracing_db::reader::ItemRow| match (r.complete_time, r.is_success) {
            (None, _) => (proto::ExecutionOutcome::Unspecified, NO_OUTCOME.to_string()),
            (Some(_), true) => (proto::ExecutionOutcome::Completed, String::new()),
            (Some(_), false) => (
                proto::ExecutionOutcome::Failed,
                r.failure_cause.clone().unwrap_or_default(),
            ),
        };
    let results: Vec<(proto::ExecutionOutcome, String)> = e.rows.iter().map(item_outcome).collect();
    let outcome = if results
        .iter()
        .any(|(o, _)| *o == proto::ExecutionOutcome::Unspecified)
    {
        proto::ExecutionOutcome::Unspecified
    } else if results
        .iter()
        .any(|(o, _)| *o == proto::ExecutionOutcome::Failed)
    {
        proto::ExecutionOutcome::Failed
    } else {
        proto::ExecutionOutcome::Completed
    };
    let error = results
        .iter()
        .find(|(o, _)| *o == proto::ExecutionOutcome::Failed)
        .or_else(|| results.iter().find(|(_, error)| !error.is_empty()))
        .map(|(_, error)| error.clone())
        .unwrap_or_default();
    let duration = match e
        .rows
        .iter()
        .map(|r| r.complete_time)
        .collect::<Option<Vec<_>>>()
    {
        Some(ends) => ends.into_iter().max().map(|end| {
            let d = (end - started).to_std().unwrap_or_default();
            prost_types::Duration {
                seconds: d.as_secs() as i64,
                nanos: d.subsec_nanos() as i32,
            }
        }),
        None => None,
    };
    // The instance is what follows job, items and type in the task id: `{ip}@-@{pid}`.
    let delimiter = crate::elasticjob::instance::DELIMITER;
    let instance_id = first
        .task_id
        .splitn(4, delimiter)
        .nth(3)
        .filter(|i| !i.is_empty())
        .unwrap_or(first.ip.as_str())
        .to_string();
    proto::ExecutionInfo {
        attempt,
        job_name: first.job_name.clone(),
        execution_id: first.id.clone(),
        instance_id,
        source: source as i32,
        items: e.rows.iter().map(|r| r.sharding_item).collect(),
        started_at: Some(system_timestamp(instant(started))),
        duration,
        outcome: outcome as i32,
        error,
        item_results: e
            .rows
            .iter()
            .zip(results)
            .map(|(r, (outcome, error))| proto::ItemResult {
                item: r.sharding_item,
                outcome: outcome as i32,
                error,
            })
            .collect(),
        task_id: first.task_id.clone(),
        fire_time: None,
        fencing_tokens: Default::default(),
        events: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::history::tests::one_failed_item;
    use crate::proto;

    #[test]
    fn an_execution_read_from_the_tracing_tables_on_the_wire() {
        use crate::ops::tracing_db::reader::{ItemRow, TracedExecution};
        let t = |ms: i64| {
            chrono::DateTime::from_timestamp_millis(1_700_000_000_000 + ms)
                .unwrap()
                .naive_local()
        };
        let row =
            |item: i32, start: i64, end: Option<i64>, success: bool, cause: Option<&str>| ItemRow {
                id: format!("row-{item}"),
                job_name: "ledger".into(),
                task_id: "ledger@-@0,1@-@READY@-@10.9.9.9@-@4242".into(),
                ip: "10.9.9.9".into(),
                sharding_item: item,
                execution_source: "NORMAL_TRIGGER".into(),
                failure_cause: cause.map(str::to_string),
                is_success: success,
                start_time: t(start),
                complete_time: end.map(t),
                attempt: None,
            };
        let failed = TracedExecution {
            rows: vec![
                row(0, 5, Some(200), true, None),
                row(
                    1,
                    6,
                    Some(250),
                    false,
                    Some("java.io.IOException: disk full"),
                ),
            ],
        };
        let p = super::traced_execution_info(&failed);
        assert_eq!(p.execution_id, "row-0");
        assert_eq!(p.instance_id, "10.9.9.9@-@4242");
        assert_eq!(p.source, proto::TriggerSource::Unspecified as i32);
        assert_eq!(p.outcome, proto::ExecutionOutcome::Failed as i32);
        assert_eq!(p.error, "java.io.IOException: disk full");
        assert_eq!(p.items, [0, 1]);
        assert_eq!(p.duration.unwrap().nanos, 245_000_000);
        assert_eq!(
            p.item_results[0].outcome,
            proto::ExecutionOutcome::Completed as i32
        );
        assert!(p.fire_time.is_none() && p.events.is_empty());
        // An item without an outcome leaves the execution without one.
        let mut running = failed.clone();
        running.rows[0].complete_time = None;
        running
            .rows
            .iter_mut()
            .for_each(|r| r.execution_source = "MISFIRE".into());
        let p = super::traced_execution_info(&running);
        assert_eq!(p.outcome, proto::ExecutionOutcome::Unspecified as i32);
        assert_eq!(p.source, proto::TriggerSource::Misfire as i32);
        assert_eq!(p.error, "java.io.IOException: disk full");
        assert_eq!(p.item_results[0].error, super::NO_OUTCOME);
        assert!(p.duration.is_none());
        // A retry, as a sidecar writes it; a failover (ElasticJob Cloud's) without an attempt.
        let mut retry = failed.clone();
        for r in &mut retry.rows {
            r.execution_source = "FAILOVER".into();
            r.attempt = Some(2);
        }
        let p = super::traced_execution_info(&retry);
        assert_eq!(
            (p.source, p.attempt),
            (proto::TriggerSource::Retry as i32, 2)
        );
        retry.rows.iter_mut().for_each(|r| r.attempt = None);
        let p = super::traced_execution_info(&retry);
        assert_eq!(
            (p.source, p.attempt),
            (proto::TriggerSource::Failover as i32, 0)
        );
        assert_eq!(
            super::traced_execution_info(&failed).attempt,
            0,
            "a first run"
        );
    }

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
