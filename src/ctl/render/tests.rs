//! Tests of what `shardcar ctl` prints, from fixed Admin answers.

use super::*;

#[test]
fn executions_say_where_they_come_from() {
    use crate::api::admin::{HISTORY_LOCAL, HISTORY_LOCAL_FALLBACK, HISTORY_TRACING_DB};
    let e = proto::ExecutionInfo {
        job_name: "ledger".into(),
        source: proto::TriggerSource::Unspecified as i32,
        ..Default::default()
    };
    let db = executions(std::slice::from_ref(&e), HISTORY_TRACING_DB);
    assert!(
        db.lines().nth(1).unwrap().contains("NORMAL_TRIGGER"),
        "{db}"
    );
    assert!(db.ends_with("ElasticJob process writing there)\n"), "{db}");
    assert!(executions(&[], HISTORY_TRACING_DB)
        .starts_with("no executions in the tracing database yet\n(from the tracing"));
    let fallback = executions(std::slice::from_ref(&e), HISTORY_LOCAL_FALLBACK);
    assert!(fallback.ends_with("could not be read, see the sidecar's log)\n"));
    assert_eq!(
        executions(std::slice::from_ref(&e), HISTORY_LOCAL)
            .lines()
            .count(),
        2
    );
    assert_eq!(
        executions(&[], HISTORY_LOCAL),
        "no executions recorded by this sidecar yet\n"
    );
}

#[test]
fn executions_show_their_attempt() {
    let retry = proto::ExecutionInfo {
        job_name: "payments".into(),
        execution_id: "e-2".into(),
        source: proto::TriggerSource::Retry as i32,
        attempt: 2,
        items: vec![1],
        outcome: proto::ExecutionOutcome::Completed as i32,
        ..Default::default()
    };
    let first = proto::ExecutionInfo {
        execution_id: "e-1".into(),
        source: proto::TriggerSource::Cron as i32,
        attempt: 0,
        outcome: proto::ExecutionOutcome::Failed as i32,
        error: "disk full".into(),
        ..retry.clone()
    };
    let text = executions(&[retry, first], crate::api::admin::HISTORY_LOCAL);
    let lines: Vec<&str> = text.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "STARTED",
            "JOB",
            "EXECUTION",
            "INSTANCE",
            "SOURCE",
            "ATTEMPT",
            "ITEMS",
            "OUTCOME",
            "DURATION",
            "ERROR"
        ]
    );
    let cells = |line: &str| {
        line.split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // No start time or instance: the row's cells start at the job.
    assert_eq!(
        cells(lines[1]),
        [
            "payments",
            "e-2",
            "RETRY",
            "2",
            "1",
            "completed",
            "0.000s",
            "-"
        ]
    );
    assert_eq!(
        cells(lines[2]),
        ["payments", "e-1", "CRON", "0", "1", "failed", "0.000s", "disk", "full"]
    );
}

#[test]
fn a_job_shows_its_retry_policy_and_error_handler_without_secrets() {
    let detail = |config: proto::JobConfig| proto::JobDetail {
        config: Some(config),
        ..Default::default()
    };
    let mut c = proto::JobConfig {
        job_name: "payments".into(),
        sharding_total_count: 1,
        job_error_handler_type: "WEBHOOK".into(),
        props: [
            ("webhook.url", "https://alerts.example.com/hook?key=abc"),
            ("webhook.token", "s3cret-token"),
            ("batch", "10"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        retry: Some(proto::RetryPolicy {
            max_attempts: 3,
            initial_backoff: Some(prost_types::Duration {
                seconds: 0,
                nanos: 200_000_000,
            }),
            max_backoff: None,
            multiplier: 0.0,
        }),
        ..Default::default()
    };
    let text = job(&detail(c.clone()));
    assert!(
        text.contains(
            "  retry:       3 runs in all (2 retries): the first after 200ms, each next wait ×2, up to 1m\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "  on failure:  WEBHOOK (once a failure's attempts have run out)\n               webhook.token = (set, not shown)\n               webhook.url = https://alerts.example.com/hook?…\n"
        ),
        "{text}"
    );
    assert!(
        !text.contains("s3cret") && !text.contains("key=abc"),
        "{text}"
    );
    c.retry = None;
    c.job_error_handler_type.clear();
    let text = job(&detail(c));
    assert!(
        text.contains("  retry:       none: a failed item waits for the next fire\n  on failure:  LOG (the default)\n"),
        "{text}"
    );
}

#[test]
fn a_resident_job_shows_who_holds_each_item_and_each_hand_off() {
    let (a, b) = ("10.0.0.1@-@1", "10.0.0.2@-@2");
    let item = |i: i32, owner: &str, running: Option<&str>| proto::ItemInfo {
        item: i,
        owner: owner.into(),
        running: running.is_some(),
        running_instance: running.unwrap_or_default().into(),
        handoff: running.is_some_and(|r| r != owner),
        ..Default::default()
    };
    let mut disabled = item(4, a, None);
    disabled.disabled = true;
    let items_of_job = vec![
        item(0, a, Some(a)),
        item(1, b, Some(a)),
        item(2, b, None),
        item(3, "", Some(b)),
        disabled,
        item(5, "", None),
    ];
    let text = items(&items_of_job, true);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(rows[0][2], "HELD BY", "{text}");
    let held: Vec<&str> = rows[1..7].iter().map(|r| r[2]).collect();
    assert_eq!(
        held,
        [
            a,
            &format!("{a} (handing off to {b})"),
            "not held yet",
            &format!("{b} (letting go)"),
            "-",
            "-"
        ],
        "{text}"
    );
    assert!(
        text.ends_with("(not held yet: its hold starts on its owner at once, or once a restart backoff after its last hold has passed)\n"),
        "{text}"
    );
    // Not resident: who runs each item, as before.
    let text = items(&items_of_job, false);
    assert!(text.starts_with("ITEM  OWNER"), "{text}");
    assert!(text.lines().next().unwrap().contains("RUNNING"));
    assert!(!text.contains("not held yet"));
}

#[test]
fn tables_align() {
    let t = table(
        &["A", "LONGER"],
        &[vec!["xyz".into(), "1".into()], vec!["q".into(), "".into()]],
    );
    assert_eq!(t, "A    LONGER\nxyz  1\nq\n");
}

#[test]
fn job_view_shows_items_and_servers() {
    let state = proto::JobDetail {
        config: Some(proto::JobConfig {
            job_name: "orders".into(),
            cron: "0/5 * * * * ?".into(),
            sharding_total_count: 2,
            ..Default::default()
        }),
        state: proto::JobState::Ok as i32,
        leader: "10.0.0.1@-@1".into(),
        servers: vec![proto::ServerInfo {
            ip: "10.0.0.1".into(),
            disabled: true,
            instance_count: 1,
        }],
        instances: vec![proto::InstanceInfo {
            instance_id: "10.0.0.1@-@1".into(),
            server_ip: "10.0.0.1".into(),
            leader: true,
            items: vec![0, 1],
            via_sidecar: true,
        }],
        items: vec![
            proto::ItemInfo {
                item: 0,
                owner: "10.0.0.1@-@1".into(),
                running: true,
                running_instance: "10.0.0.1@-@1".into(),
                ..Default::default()
            },
            proto::ItemInfo {
                item: 1,
                owner: "10.0.0.1@-@1".into(),
                disabled: true,
                failover_pending: true,
                ..Default::default()
            },
        ],
        sharding_necessary: false,
    };
    let text = job(&state);
    assert!(text.starts_with("Job orders  [OK]\n"), "{text}");
    assert!(text.contains("  10.0.0.1  DISABLED  1\n"), "{text}");
    assert!(
        text.contains("  10.0.0.1@-@1  10.0.0.1  yes     0,1\n"),
        "{text}"
    );
    assert!(
        text.contains("  0     10.0.0.1@-@1  10.0.0.1@-@1  -        -         -         -\n"),
        "{text}"
    );
    assert!(
        text.contains("  1     10.0.0.1@-@1  -             -        yes       pending   -\n"),
        "{text}"
    );
    let j: serde_json::Value = serde_json::from_str(&super::super::protojson::to_json(
        &proto::GetJobResponse { job: Some(state) },
        true,
    ))
    .unwrap();
    assert_eq!(j["job"]["state"], "JOB_STATE_OK");
    assert_eq!(j["job"]["items"][1]["failoverPending"], true);
    assert_eq!(j["job"]["config"]["jobName"], "orders");
}
