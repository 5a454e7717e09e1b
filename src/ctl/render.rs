//! How `shardcar ctl` shows Admin answers: aligned tables for people, JSON for scripts (field
//! names as in the proto, enums by name, times in RFC 3339, durations in seconds).

use crate::elasticjob::strategy::StrategyType;
use crate::proto;

/// Aligns `rows` under `headers`, two spaces between columns, no trailing spaces.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "-" }.to_string()
}

fn on(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// `OK`, `CRASHED`, `DISABLED`, `SHARDING_FLAG`.
pub fn state_name(state: i32) -> &'static str {
    match proto::JobState::try_from(state) {
        Ok(proto::JobState::Ok) => "OK",
        Ok(proto::JobState::Crashed) => "CRASHED",
        Ok(proto::JobState::Disabled) => "DISABLED",
        Ok(proto::JobState::ShardingFlag) => "SHARDING_FLAG",
        Ok(proto::JobState::Unspecified) | Err(_) => "UNKNOWN",
    }
}

fn source_name(source: i32) -> &'static str {
    proto::TriggerSource::try_from(source).map_or("UNKNOWN", |s| {
        s.as_str_name().trim_start_matches("TRIGGER_SOURCE_")
    })
}

fn outcome_name(outcome: i32) -> &'static str {
    match proto::ExecutionOutcome::try_from(outcome) {
        Ok(proto::ExecutionOutcome::Completed) => "completed",
        Ok(proto::ExecutionOutcome::Failed) => "failed",
        Ok(proto::ExecutionOutcome::Revoked) => "revoked",
        _ => "unknown",
    }
}

fn strategy_name(strategy: i32) -> &'static str {
    crate::api::convert::strategy_from_proto(strategy).map_or("UNKNOWN", StrategyType::as_str)
}

fn timestamp(t: &Option<prost_types::Timestamp>) -> String {
    t.as_ref()
        .and_then(|t| chrono::DateTime::from_timestamp(t.seconds, t.nanos.max(0) as u32))
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

fn seconds(d: &Option<prost_types::Duration>) -> f64 {
    d.as_ref()
        .map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9)
}

fn items_text(items: &[i32]) -> String {
    if items.is_empty() {
        return "-".into();
    }
    items
        .iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `ctl jobs`.
pub fn jobs(jobs: &[proto::JobSummary]) -> String {
    if jobs.is_empty() {
        return "no jobs in this namespace\n".into();
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                j.job_name.clone(),
                state_name(j.state).into(),
                or_dash(&j.cron),
                j.sharding_total_count.to_string(),
                j.instance_count.to_string(),
                j.server_count.to_string(),
                or_dash(&j.leader),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "STATE",
            "CRON",
            "ITEMS",
            "INSTANCES",
            "SERVERS",
            "LEADER",
        ],
        &rows,
    )
}

/// Who holds a resident item, from its nodes: its holder; the holder and the owner it is
/// handed to while the holder lets go; `not held yet` while it is owned but its hold has not
/// started (it starts on its owner at once, or after a restart backoff); `-` when nobody owns
/// it or it is disabled.
fn holder(i: &proto::ItemInfo) -> String {
    if i.running {
        let by = if i.running_instance.is_empty() {
            &i.owner
        } else {
            &i.running_instance
        };
        return if *by == i.owner {
            or_dash(by)
        } else if i.owner.is_empty() {
            format!("{by} (letting go)")
        } else {
            format!("{by} (handing off to {})", i.owner)
        };
    }
    if i.owner.is_empty() || i.disabled {
        "-".into()
    } else {
        "not held yet".into()
    }
}

/// The per-item table of `ctl job show` and `ctl watch`: for a resident job, who holds each
/// item (`HELD BY`) instead of who runs it.
pub fn items(items: &[proto::ItemInfo], resident: bool) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|i| {
            let failover = if !i.failover_instance.is_empty() {
                i.failover_instance.clone()
            } else if i.failover_pending {
                "pending".into()
            } else {
                "-".into()
            };
            vec![
                i.item.to_string(),
                or_dash(&i.owner),
                match (i.running, i.running_instance.is_empty()) {
                    _ if resident => holder(i),
                    (false, _) => "-".into(),
                    (true, true) => "yes".into(),
                    (true, false) => i.running_instance.clone(),
                },
                yes(i.misfire),
                yes(i.disabled),
                failover,
                or_dash(&i.parameter),
            ]
        })
        .collect();
    let mut out = table(
        &[
            "ITEM",
            "OWNER",
            if resident { "HELD BY" } else { "RUNNING" },
            "MISFIRE",
            "DISABLED",
            "FAILOVER",
            "PARAMETER",
        ],
        &rows,
    );
    if resident && items.iter().any(|i| holder(i) == "not held yet") {
        out.push_str(
            "(not held yet: its hold starts on its owner at once, or once a restart backoff \
             after its last hold has passed)\n",
        );
    }
    out
}

/// `ctl job show NAME`.
pub fn job(j: &proto::JobDetail) -> String {
    let c = j.config.clone().unwrap_or_default();
    let mut out = format!("Job {}  [{}]\n", c.job_name, state_name(j.state));
    let schedule = if c.cron.is_empty() {
        "none (runs on trigger only)".to_string()
    } else if c.time_zone.is_empty() {
        c.cron.clone()
    } else {
        format!("{} ({})", c.cron, c.time_zone)
    };
    out.push_str(&format!("  cron:        {schedule}\n"));
    out.push_str(&format!(
        "  items:       {}   strategy: {}   failover: {}   misfire: {}   monitor execution: {}\n",
        c.sharding_total_count,
        strategy_name(c.sharding_strategy),
        on(c.failover),
        on(c.misfire.unwrap_or(true)),
        on(c.monitor_execution.unwrap_or(true)),
    ));
    if !c.job_parameter.is_empty() {
        out.push_str(&format!("  parameter:   {}\n", c.job_parameter));
    }
    if c.execution_timeout_seconds > 0 {
        out.push_str(&format!(
            "  timeout:     {}s per execution\n",
            c.execution_timeout_seconds
        ));
    }
    if c.resident {
        out.push_str("  resident:    each item is held by its owner's worker until it moves\n");
    }
    out.push_str(&format!(
        "  retry:       {}\n",
        retry_policy(c.retry.as_ref())
    ));
    let props: std::collections::BTreeMap<&String, &String> = c.props.iter().collect();
    let (handler, settings) =
        crate::ops::jobs::shown::error_handler(Some(c.job_error_handler_type.as_str()), props);
    out.push_str(&format!("  on failure:  {handler}"));
    // A resident job's holds are restarted, not retried: every failed hold is reported.
    if c.retry.is_some() && !c.resident && handler != "IGNORE" {
        out.push_str(" (once a failure's attempts have run out)");
    }
    out.push('\n');
    for (key, value) in settings {
        out.push_str(&format!("               {key} = {value}\n"));
    }
    if !c.description.is_empty() {
        out.push_str(&format!("  description: {}\n", c.description));
    }
    out.push_str(&format!("  leader:      {}\n", or_dash(&j.leader)));
    if j.sharding_necessary {
        out.push_str("  resharding pending\n");
    }
    out.push_str("\nServers\n");
    if j.servers.is_empty() {
        out.push_str("  (none)\n");
    } else {
        let rows: Vec<Vec<String>> = j
            .servers
            .iter()
            .map(|s| {
                let status = if s.disabled { "DISABLED" } else { "ENABLED" };
                vec![s.ip.clone(), status.into(), s.instance_count.to_string()]
            })
            .collect();
        out.push_str(&indent(&table(&["IP", "STATUS", "INSTANCES"], &rows)));
    }
    out.push_str("\nInstances\n");
    if j.instances.is_empty() {
        out.push_str("  (none online)\n");
    } else {
        let rows: Vec<Vec<String>> = j
            .instances
            .iter()
            .map(|i| {
                let instance = if i.via_sidecar {
                    i.instance_id.clone()
                } else {
                    format!("{} (ElasticJob)", i.instance_id)
                };
                vec![
                    instance,
                    i.server_ip.clone(),
                    yes(i.leader),
                    items_text(&i.items),
                ]
            })
            .collect();
        out.push_str(&indent(&table(
            &["INSTANCE", "SERVER", "LEADER", "ITEMS"],
            &rows,
        )));
    }
    out.push_str("\nItems\n");
    out.push_str(&indent(&items(&j.items, c.resident)));
    out
}

/// A wire retry policy in words ([`crate::ops::jobs::shown::retry_policy`]).
fn retry_policy(p: Option<&proto::RetryPolicy>) -> String {
    let Some(p) = p else {
        return crate::ops::jobs::shown::retry_policy(None);
    };
    match crate::api::convert::retry_from_proto(p) {
        Ok(policy) => crate::ops::jobs::shown::retry_policy(policy.as_ref()),
        // Not one this sidecar would write.
        Err(e) => format!("{} runs in all ({e})", p.max_attempts),
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// `ctl executions`; `history` is the response's `shardcar-history` header (empty when the
/// sidecar sent none).
pub fn executions(list: &[proto::ExecutionInfo], history: &str) -> String {
    use crate::api::admin::{HISTORY_LOCAL_FALLBACK, HISTORY_TRACING_DB};
    let note = match history {
        HISTORY_TRACING_DB => {
            "(from the tracing database: the executions of every sidecar and ElasticJob \
             process writing there)\n"
        }
        HISTORY_LOCAL_FALLBACK => {
            "(this sidecar's own executions only: the tracing database could not be read, \
             see the sidecar's log)\n"
        }
        _ => "",
    };
    if list.is_empty() {
        let none = match history {
            HISTORY_TRACING_DB => "no executions in the tracing database yet\n",
            _ => "no executions recorded by this sidecar yet\n",
        };
        return format!("{none}{note}");
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|e| {
            vec![
                timestamp(&e.started_at),
                e.job_name.clone(),
                e.execution_id.clone(),
                e.instance_id.clone(),
                // Only executions read from the tracing tables have none: ElasticJob's
                // NORMAL_TRIGGER (a fire, a trigger-once or a failover).
                if e.source == proto::TriggerSource::Unspecified as i32 {
                    "NORMAL_TRIGGER".into()
                } else {
                    source_name(e.source).into()
                },
                e.attempt.to_string(),
                items_text(&e.items),
                outcome_name(e.outcome).into(),
                format!("{:.3}s", seconds(&e.duration)),
                or_dash(&e.error),
            ]
        })
        .collect();
    table(
        &[
            "STARTED",
            "JOB",
            "EXECUTION",
            "INSTANCE",
            "SOURCE",
            "ATTEMPT",
            "ITEMS",
            "OUTCOME",
            "DURATION",
            "ERROR",
        ],
        &rows,
    ) + note
}

/// One message of `ctl watch`.
pub fn change(c: &proto::WatchJobResponse) -> String {
    let at = timestamp(&c.at);
    let mut out = String::new();
    if c.changes.is_empty() {
        out.push_str(&format!("{at}  watching\n"));
    }
    for line in &c.changes {
        out.push_str(&format!("{at}  {line}\n"));
    }
    match &c.job {
        Some(job) => {
            out.push_str(&format!(
                "  state {}   leader {}   instances {}\n",
                state_name(job.state),
                or_dash(&job.leader),
                job.instances.len()
            ));
            let resident = job.config.as_ref().is_some_and(|c| c.resident);
            out.push_str(&indent(&items(&job.items, resident)));
        }
        None if c.removed => out.push_str("  the job was removed\n"),
        None => {}
    }
    out
}

#[cfg(test)]
mod tests;
