//! One job's page: its state and actions, the item grid (with each item's pending retry and,
//! for a resident job, who holds it), instances, servers, recent executions (with their
//! attempt), failure handling, configuration and next fire times. [`job_fragment`] draws the
//! part that changes, which the page's live stream ([`super::live`]) pushes again after every
//! change.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{Html, IntoResponse, Response};

use crate::ops::history::item_outcome;
use crate::ops::jobs::{self, JobInfo};
use crate::registry::SessionState;

use super::html::{
    action, badge, esc, job_url, layout, local_time, outcome_badge, seg, short_duration,
    status_badge, Nav,
};
use super::pages::{error_page, fire_times, notice, PageQuery};
use super::retries;
use super::session::{self, Viewer};
use super::Web;

/// Executions shown on a job's page.
const RECENT_EXECUTIONS: usize = 20;
/// Records of a job read to find each item's last outcome.
const OUTCOME_SCAN: usize = 200;

fn yes(v: bool) -> &'static str {
    if v {
        "yes"
    } else {
        ""
    }
}

/// `GET /jobs/{job}`.
pub async fn page(
    State(web): State<Arc<Web>>,
    Path(name): Path<String>,
    Query(q): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let url = job_url(&name);
    let viewer = match session::read(&web, &headers, &url) {
        Ok(v) => v,
        Err(r) => return r,
    };
    if let Err(e) = jobs::check_job_name("job_name", &name) {
        return error_page(&web, &viewer, &e, "/");
    }
    let job = match jobs::get_job(&web.registry, &name).await {
        Ok(job) => job,
        Err(e) => return error_page(&web, &viewer, &e, "/"),
    };
    let recent = recent(&web, &name).await;
    let fragment = job_fragment(&web, &viewer, &job, &recent);
    if q.fragment.as_deref() == Some("live") {
        return Html(fragment).into_response();
    }
    let body = format!(
        r#"<h1>Job <span id="job-name">{name}</span> <span id="live-indicator" class="badge off" title="live updates">live</span></h1>
<div id="live" data-live-sse="{url}/live">{fragment}</div>"#,
        name = esc(&name),
        url = esc(&url),
    );
    Html(layout(
        &web.header(),
        &viewer,
        Nav::Jobs,
        &name,
        notice(q.done.as_deref()),
        &body,
    ))
    .into_response()
}

/// This sidecar's ZooKeeper session id, if connected.
fn own_session(web: &Web) -> Option<i64> {
    match *web.registry.session().borrow() {
        SessionState::Connected { session_id, .. } => Some(session_id),
        _ => None,
    }
}

/// The part of a job's page that changes: state, actions, items, instances, servers, recent
/// executions, configuration and next fire times. The same state renders the same text, so a
/// page replaces it only when something changed.
pub fn job_fragment(web: &Web, viewer: &Viewer, job: &JobInfo, recent: &Recent) -> String {
    let name = &job.config.job_name;
    let url = job_url(name);
    let mut out = String::new();
    // State and actions.
    let kind = match job.job_type {
        Some(t) => format!("{} job, run by the sidecars", t.root_data()),
        None => "run by subscribed workers".into(),
    };
    let _ = write!(
        out,
        r#"<p class="summary"><span id="job-state">{state}</span> {kind} · leader <span id="leader">{leader}</span>{flag}</p>"#,
        state = status_badge(job.status),
        kind = esc(&kind),
        leader = if job.leader.is_empty() {
            r#"<span class="muted">none</span>"#.to_string()
        } else {
            esc(&job.leader)
        },
        flag = if job.sharding_necessary {
            " · resharding pending"
        } else {
            ""
        },
    );
    if !job.config.description.is_empty() {
        let _ = write!(
            out,
            r#"<p class="description">{}</p>"#,
            esc(&job.config.description)
        );
    }
    if viewer.can_act {
        out.push_str(r#"<div class="actions">"#);
        // Trigger now, with an optional parameter for that run instead of the job's own.
        let _ = write!(
            out,
            r#"<form method="post" action="{url}/trigger" class="inline" data-confirm="{question}"><input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="confirmed" value=""><input type="text" name="job_parameter" id="trigger-parameter" placeholder="job parameter (optional)" aria-label="Job parameter of this run"> <button type="submit" class="primary">Trigger now</button></form>"#,
            url = esc(&url),
            question = esc(&format!("Run job {name} once now on every live instance?")),
            csrf = esc(&viewer.csrf),
        );
        if job.servers.iter().any(|s| !s.disabled) {
            out.push_str(&action(
                viewer,
                &format!("{url}/disable"),
                "Disable job",
                &format!(
                    "Disable job {name} on every server? No instance runs it until it is enabled."
                ),
                "",
            ));
        }
        if job.servers.iter().any(|s| s.disabled) {
            out.push_str(&action(
                viewer,
                &format!("{url}/enable"),
                "Enable job",
                &format!("Enable job {name} on every server?"),
                "",
            ));
        }
        let _ = write!(
            out,
            r#"<a class="button" id="edit" href="{}/edit">Edit configuration</a>"#,
            esc(&url)
        );
        out.push_str(&action(
            viewer,
            &format!("{url}/remove"),
            "Remove job",
            &format!("Remove job {name}? Its instances are shut down and the job is deleted from the namespace, for every sidecar and JVM."),
            "danger",
        ));
        out.push_str("</div>");
    }
    items_table(&mut out, web, viewer, job);
    instances_table(&mut out, web, viewer, job);
    servers_table(&mut out, viewer, job);
    executions_table(&mut out, recent);
    retries::failure_section(&mut out, job);
    config_section(&mut out, job);
    out
}

fn items_table(out: &mut String, web: &Web, viewer: &Viewer, job: &JobInfo) {
    let name = &job.config.job_name;
    let url = job_url(name);
    // Each item's last outcome here: the newest record that has it.
    let mut last: BTreeMap<i32, (&'static str, Option<String>, Duration)> = BTreeMap::new();
    for record in web.history.recent(Some(name), OUTCOME_SCAN) {
        for (item, outcome) in &record.items {
            last.entry(*item).or_insert_with(|| {
                let (word, error) = item_outcome(outcome);
                (word, error.map(str::to_string), record.duration)
            });
        }
        if last.len() >= job.items.len() {
            break;
        }
    }
    // A resident job's items are held, not run: who holds each, and any hand-off.
    let running_header = if job.extras.resident {
        "Held by"
    } else {
        "Running"
    };
    let _ = write!(
        out,
        r#"<h2>Items</h2><table id="items"><thead><tr><th>Item</th><th>Parameter</th><th>Owner</th><th>{running_header}</th><th>Misfire</th><th>Disabled</th><th>Failover</th><th>Pending retry</th><th>Last outcome here</th><th>Duration</th><th></th></tr></thead><tbody>"#
    );
    for item in &job.items {
        let failover = match (item.failover_instance.as_str(), item.failover_pending) {
            ("", false) => String::new(),
            ("", true) => "pending".into(),
            (by, _) => format!("taken by {}", esc(by)),
        };
        let (outcome, duration) = match last.get(&item.item) {
            Some((word, error, duration)) => (
                format!(
                    "{}{}",
                    outcome_badge(word),
                    error
                        .as_deref()
                        .map(|e| format!(r#" <span class="muted">{}</span>"#, esc(e)))
                        .unwrap_or_default()
                ),
                short_duration(*duration),
            ),
            None => (String::new(), String::new()),
        };
        let toggle = if item.disabled {
            action(
                viewer,
                &format!("{url}/items/{}/enable", item.item),
                "Enable",
                &format!("Enable item {} of job {name}?", item.item),
                "small",
            )
        } else {
            action(
                viewer,
                &format!("{url}/items/{}/disable", item.item),
                "Disable",
                &format!(
                    "Disable item {} of job {name}? No instance runs it until it is enabled.",
                    item.item
                ),
                "small",
            )
        };
        let row_class = if item.disabled {
            r#" class="disabled""#
        } else if item.running {
            r#" class="running""#
        } else {
            ""
        };
        let _ = write!(
            out,
            r#"<tr data-item="{i}"{row_class}><td class="num">{i}</td><td>{param}</td><td class="owner">{owner}</td><td class="running">{running}</td><td class="misfire">{misfire}</td><td class="disabled">{disabled}</td><td class="failover">{failover}</td><td class="retry">{retry}</td><td class="outcome">{outcome}</td><td class="duration">{duration}</td><td>{toggle}</td></tr>"#,
            i = item.item,
            param = esc(&item.parameter),
            owner = esc(&item.owner),
            retry = retries::retry_cell(item),
            running = if job.extras.resident {
                retries::hold_cell(item)
            } else if item.handoff {
                format!(
                    "{} {}",
                    badge("handing off", "warn"),
                    esc(&item.running_instance)
                )
            } else if item.running {
                format!("{} {}", badge("running", "ok"), esc(&item.running_instance))
            } else {
                String::new()
            },
            misfire = yes(item.misfire),
            disabled = yes(item.disabled),
        );
    }
    out.push_str("</tbody></table>");
}

fn instances_table(out: &mut String, web: &Web, viewer: &Viewer, job: &JobInfo) {
    let name = &job.config.job_name;
    let url = job_url(name);
    let own = own_session(web);
    out.push_str(r#"<h2>Instances</h2><table id="instances"><thead><tr><th>Instance</th><th>Server</th><th>Items</th><th>Leader</th><th>Lease</th><th></th></tr></thead><tbody>"#);
    for i in &job.instances {
        let holder = if i.via_sidecar && i.server_ip == web.ip && own == Some(i.session_id) {
            "worker of this sidecar: leased while its session lives".to_string()
        } else if i.via_sidecar {
            format!("worker of the sidecar on {}", i.server_ip)
        } else if job.extras.resident {
            "ElasticJob JVM: given no items of a resident job".to_string()
        } else {
            "ElasticJob JVM".to_string()
        };
        let session = if i.session_id != 0 {
            format!(" · session 0x{:x}", i.session_id)
        } else {
            String::new()
        };
        let items: Vec<String> = i.items.iter().map(i32::to_string).collect();
        let _ = write!(
            out,
            r#"<tr data-instance="{id}"><td>{id}</td><td>{ip}</td><td class="items">{items}</td><td>{leader}</td><td class="lease">{holder}{session}</td><td>{shutdown}</td></tr>"#,
            id = esc(&i.instance_id),
            ip = esc(&i.server_ip),
            items = esc(&items.join(", ")),
            leader = if i.leader { badge("leader", "ok") } else { String::new() },
            holder = esc(&holder),
            session = esc(&session),
            shutdown = action(
                viewer,
                &format!("{url}/instances/{}/shutdown", seg(&i.instance_id)),
                "Shut down",
                &format!("Shut instance {} of job {name} down? Its worker is told to stop and its items go to the others.", i.instance_id),
                "small danger",
            ),
        );
    }
    if job.instances.is_empty() {
        out.push_str(r#"<tr><td colspan="6" class="muted">No live instance: the job is CRASHED until a worker subscribes.</td></tr>"#);
    }
    out.push_str("</tbody></table>");
}

fn servers_table(out: &mut String, viewer: &Viewer, job: &JobInfo) {
    let name = &job.config.job_name;
    let url = job_url(name);
    out.push_str(r#"<h2>Servers</h2><table id="servers"><thead><tr><th>Server</th><th>Status</th><th>Instances</th><th></th></tr></thead><tbody>"#);
    for s in &job.servers {
        let toggle = if s.disabled {
            action(
                viewer,
                &format!("{url}/servers/{}/enable", seg(&s.ip)),
                "Enable",
                &format!("Enable server {} in job {name}?", s.ip),
                "small",
            )
        } else {
            action(
                viewer,
                &format!("{url}/servers/{}/disable", seg(&s.ip)),
                "Disable",
                &format!(
                    "Disable server {} in job {name}? Its instances get no items of the job.",
                    s.ip
                ),
                "small",
            )
        };
        let _ = write!(
            out,
            r#"<tr data-server="{ip}"><td>{ip}</td><td class="status">{status}</td><td>{n}</td><td>{toggle}</td></tr>"#,
            ip = esc(&s.ip),
            status = if s.disabled {
                badge("DISABLED", "off")
            } else {
                badge("ENABLED", "ok")
            },
            n = s.instance_count,
        );
    }
    out.push_str("</tbody></table>");
}

/// The recent executions the job page shows: [`crate::api::admin::recent_executions`], as
/// `ListExecutions` answers (from the tracing tables when `tracing_db` is set).
pub async fn recent(web: &Web, job: &str) -> Recent {
    let (executions, from) = crate::api::admin::recent_executions(
        &web.history,
        web.tracing_db.as_deref(),
        Some(job),
        RECENT_EXECUTIONS,
    )
    .await;
    Recent { executions, from }
}

/// Recent executions, and where they came from (`tracing-db`, `local`, `local-fallback`).
pub struct Recent {
    executions: Vec<crate::proto::ExecutionInfo>,
    from: &'static str,
}

fn executions_table(out: &mut String, recent: &Recent) {
    let whose = match recent.from {
        crate::api::admin::HISTORY_TRACING_DB => {
            "(every sidecar's and ElasticJob's, from the tracing database)"
        }
        crate::api::admin::HISTORY_LOCAL_FALLBACK => {
            "(run by this sidecar's workers: the tracing database cannot be read)"
        }
        _ => "(run by this sidecar's workers)",
    };
    let _ = write!(
        out,
        r#"<h2>Recent executions <span class="muted">{whose}</span></h2><table id="executions"><thead><tr><th>Started</th><th>Source</th><th>Attempt</th><th>Instance</th><th>Items</th><th>Outcome</th><th>Duration</th><th>Error</th></tr></thead><tbody>"#
    );
    let instant = |t: &Option<prost_types::Timestamp>| {
        t.as_ref().map_or(std::time::UNIX_EPOCH, |t| {
            std::time::UNIX_EPOCH + Duration::new(t.seconds.max(0) as u64, t.nanos.max(0) as u32)
        })
    };
    for e in &recent.executions {
        let items: Vec<String> = e.items.iter().map(i32::to_string).collect();
        let source = crate::proto::TriggerSource::try_from(e.source)
            .map(|s| {
                s.as_str_name()
                    .trim_start_matches("TRIGGER_SOURCE_")
                    .to_string()
            })
            .unwrap_or_default();
        let source = if source == "UNSPECIFIED" {
            "NORMAL_TRIGGER".to_string()
        } else {
            source
        };
        let outcome = crate::proto::ExecutionOutcome::try_from(e.outcome)
            .map(|o| {
                o.as_str_name()
                    .trim_start_matches("EXECUTION_OUTCOME_")
                    .to_ascii_lowercase()
            })
            .unwrap_or_default();
        let outcome = if outcome == "unspecified" {
            "unknown".to_string()
        } else {
            outcome
        };
        let duration = e.duration.as_ref().map_or(Duration::ZERO, |d| {
            Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32)
        });
        let _ = write!(
            out,
            r#"<tr data-execution="{id}"><td title="{id}">{started}</td><td class="source">{source}</td><td class="attempt">{attempt}</td><td>{instance}</td><td class="items">{items}</td><td class="outcome">{outcome}</td><td>{duration}</td><td>{error}</td></tr>"#,
            id = esc(&e.execution_id),
            started = esc(&local_time(instant(&e.started_at))),
            source = esc(&source),
            attempt = e.attempt,
            instance = esc(&e.instance_id),
            items = esc(&items.join(", ")),
            outcome = outcome_badge(&outcome),
            duration = esc(&short_duration(duration)),
            error = esc(&e.error),
        );
    }
    if recent.executions.is_empty() {
        out.push_str(r#"<tr><td colspan="8" class="muted">None yet.</td></tr>"#);
    }
    out.push_str("</tbody></table>");
}

fn config_section(out: &mut String, job: &JobInfo) {
    let c = &job.config;
    let strategy = c
        .job_sharding_strategy_type
        .as_deref()
        .unwrap_or("AVG_ALLOCATION");
    let on = |b: bool| if b { "on" } else { "off" };
    let rows: Vec<(&str, String)> = vec![
        (
            "Cron",
            c.cron.clone().unwrap_or_else(|| "(none: on demand)".into()),
        ),
        (
            "Time zone",
            c.time_zone
                .clone()
                .unwrap_or_else(|| "(the sidecar's local zone)".into()),
        ),
        ("Sharding total count", c.sharding_total_count.to_string()),
        ("Item parameters", c.sharding_item_parameters.clone()),
        ("Job parameter", c.job_parameter.clone()),
        ("Failover", on(c.failover).into()),
        ("Misfire", on(c.misfire).into()),
        ("Monitor execution", on(c.monitor_execution).into()),
        ("Sharding strategy", strategy.into()),
        ("Max time diff (s)", c.max_time_diff_seconds.to_string()),
        (
            "Reconcile interval (min)",
            c.reconcile_interval_minutes.to_string(),
        ),
        (
            "Execution timeout (s)",
            match job.extras.execution_timeout_seconds {
                0 => "none".into(),
                n => n.to_string(),
            },
        ),
        ("Disabled at start", on(c.disabled).into()),
    ];
    out.push_str(r#"<div class="columns"><section><h2>Configuration</h2><table id="config" class="kv"><tbody>"#);
    for (k, v) in rows {
        let _ = write!(out, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
    }
    for (k, v) in &c.props {
        let _ = write!(
            out,
            "<tr><th>prop <code>{}</code></th><td>{}</td></tr>",
            esc(k),
            esc(&crate::ops::jobs::shown::prop_value(k, v))
        );
    }
    out.push_str("</tbody></table></section><section><h2>Next fire times</h2>");
    out.push_str(&fire_times(
        c.cron.as_deref().unwrap_or_default(),
        c.time_zone.as_deref().unwrap_or_default(),
        "next-fires",
    ));
    out.push_str("</section></div>");
}
