//! The console's pages: the jobs of the namespace, the servers, the cron preview of the
//! configuration form, and what every page shares (notices, error pages, fire times). One job's
//! page is [`super::job`]'s.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use chrono::Utc;

use crate::coordination::ExecutionRecord;
use crate::ops::jobs::{self, AdminError};
use crate::schedule::CronSchedule;

use super::html::{
    action, badge, esc, from_now, job_url, layout, local_time, outcome_badge, seg, short_duration,
    status_badge, zoned_time, Nav,
};
use super::session::{self, Viewer};
use super::Web;

/// Fire times shown on a job's page and in the cron preview.
pub const FIRE_TIMES: usize = 10;

#[derive(serde::Deserialize, Default)]
pub struct PageQuery {
    /// `live`: only the part that changes (what the page polls for).
    pub fragment: Option<String>,
    /// A code of what was just done (see [`notice`]).
    pub done: Option<String>,
}

/// What an action that redirects back says it did.
pub fn notice(code: Option<&str>) -> Option<&'static str> {
    Some(match code? {
        "triggered" => "Triggered: every live instance runs the job once now.",
        "job-disabled" => "The job is disabled on every server.",
        "job-enabled" => "The job is enabled on every server.",
        "item-disabled" => "The item is disabled: no instance runs it until it is enabled.",
        "item-enabled" => "The item is enabled.",
        "server-disabled" => "The server is disabled.",
        "server-enabled" => "The server is enabled.",
        "shutdown" => "The instance was shut down: its worker is told to stop.",
        "saved" => "The configuration is saved.",
        "removed" => "The job was removed.",
        _ => return None,
    })
}

/// The HTTP status of an Admin error.
pub fn error_status(e: &AdminError) -> StatusCode {
    match e {
        AdminError::JobNotFound(_) | AdminError::NotFound(_) => StatusCode::NOT_FOUND,
        AdminError::InvalidArgument { .. } => StatusCode::BAD_REQUEST,
        AdminError::FailedPrecondition(_) => StatusCode::CONFLICT,
        AdminError::Corrupt { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        AdminError::Registry(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// A page saying what went wrong, with the status that fits.
pub fn error_page(web: &Web, viewer: &Viewer, e: &AdminError, back: &str) -> Response {
    let body = format!(
        r#"<h1>Not done</h1><p class="error" id="error">{}</p><p><a href="{}">Back</a></p>"#,
        esc(&e.to_string()),
        esc(back)
    );
    (
        error_status(e),
        Html(layout(
            &web.header(),
            viewer,
            Nav::None,
            "Not done",
            None,
            &body,
        )),
    )
        .into_response()
}

/// The next fire time of a job, as the jobs list shows it.
#[allow(
    clippy::disallowed_methods,
    reason = "a console page shows the next fire times from when it is drawn"
)]
fn next_fire(cron: Option<&str>, time_zone: Option<&str>) -> String {
    let Some(cron) = cron.filter(|c| !c.trim().is_empty()) else {
        return r#"<span class="muted">on demand</span>"#.into();
    };
    match CronSchedule::parse(cron, time_zone.unwrap_or_default()) {
        Ok(schedule) => match schedule.next_after(Utc::now()) {
            Some(next) => format!(
                r#"{} <span class="muted">{}</span>"#,
                esc(&zoned_time(schedule.in_zone(next))),
                esc(&from_now(next))
            ),
            None => r#"<span class="muted">never again</span>"#.into(),
        },
        Err(e) => format!(r#"<span class="error">{}</span>"#, esc(&e.to_string())),
    }
}

fn last_run_cell(record: Option<&ExecutionRecord>) -> String {
    match record {
        Some(r) => format!(
            "{} {} <span class=\"muted\">{}</span>",
            outcome_badge(r.outcome()),
            esc(&local_time(r.started_at)),
            esc(&short_duration(r.duration))
        ),
        None => r#"<span class="muted">none here</span>"#.into(),
    }
}

/// `GET /`: the jobs of the namespace.
pub async fn jobs(
    State(web): State<Arc<Web>>,
    Query(q): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let viewer = match session::read(&web, &headers, "/") {
        Ok(v) => v,
        Err(r) => return r,
    };
    let list = match jobs::list_jobs(&web.registry).await {
        Ok(list) => list,
        Err(e) => return error_page(&web, &viewer, &e, "/"),
    };
    let mut table = String::from(
        r#"<table id="jobs"><thead><tr><th>Job</th><th>State</th><th>Cron</th><th>Time zone</th><th>Next fire</th><th>Items</th><th>Instances</th><th>Servers</th><th>Leader</th><th>Last run here</th></tr></thead><tbody>"#,
    );
    for job in &list {
        let last = web.history.recent(Some(&job.job_name), 1);
        let _ = write!(
            table,
            r#"<tr data-job="{name}"><td><a href="{url}">{name}</a><div class="muted">{description}</div></td><td class="state">{state}</td><td><code>{cron}</code></td><td>{tz}</td><td class="next-fire">{next}</td><td class="num">{items}</td><td class="num instances">{instances}</td><td class="num">{servers}</td><td class="leader">{leader}</td><td class="last-run">{last}</td></tr>"#,
            name = esc(&job.job_name),
            url = esc(&job_url(&job.job_name)),
            description = esc(&job.config.description),
            state = status_badge(job.status),
            cron = esc(job.config.cron.as_deref().unwrap_or("")),
            tz = esc(job.config.time_zone.as_deref().unwrap_or("")),
            next = next_fire(job.config.cron.as_deref(), job.config.time_zone.as_deref()),
            items = job.config.sharding_total_count,
            instances = job.instance_count,
            servers = job.server_count,
            leader = esc(&job.leader),
            last = last_run_cell(last.first()),
        );
    }
    if list.is_empty() {
        table.push_str(r#"<tr><td colspan="10" class="muted">No job in this namespace yet: a worker that subscribes creates its job, or <code>shardcar ctl job put FILE</code>.</td></tr>"#);
    }
    table.push_str("</tbody></table>");
    if q.fragment.as_deref() == Some("live") {
        return Html(table).into_response();
    }
    let body =
        format!(r#"<h1>Jobs</h1><div id="live" data-live-poll="/?fragment=live">{table}</div>"#);
    Html(layout(
        &web.header(),
        &viewer,
        Nav::Jobs,
        "Jobs",
        notice(q.done.as_deref()),
        &body,
    ))
    .into_response()
}

/// The next [`FIRE_TIMES`] fire times of a cron in its zone, or why there are none.
#[allow(
    clippy::disallowed_methods,
    reason = "a console page shows the next fire times from when it is drawn"
)]
pub fn fire_times(cron: &str, time_zone: &str, id: &str) -> String {
    if cron.trim().is_empty() {
        return format!(
            r#"<p id="{id}" class="muted">No cron: the job runs only when triggered.</p>"#
        );
    }
    match CronSchedule::parse(cron.trim(), time_zone.trim()) {
        Ok(schedule) => {
            let times = schedule.next_times(Utc::now(), FIRE_TIMES);
            if times.is_empty() {
                return format!(r#"<p id="{id}" class="muted">It never fires again.</p>"#);
            }
            let mut out = format!(r#"<ol id="{id}" class="fire-times">"#);
            for t in times {
                let _ = write!(out, "<li>{}</li>", esc(&zoned_time(schedule.in_zone(t))));
            }
            out.push_str("</ol>");
            out
        }
        Err(e) => format!(r#"<p id="{id}" class="error">{}</p>"#, esc(&e.to_string())),
    }
}

#[derive(serde::Deserialize)]
pub struct PreviewQuery {
    #[serde(default)]
    cron: String,
    #[serde(default)]
    time_zone: String,
}

/// `GET /cron/preview?cron=…&time_zone=…`: the next fire times of a cron being typed.
pub async fn cron_preview(
    State(web): State<Arc<Web>>,
    Query(q): Query<PreviewQuery>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = session::read(&web, &headers, "/") {
        return r;
    }
    Html(fire_times(&q.cron, &q.time_zone, "cron-preview-times")).into_response()
}

/// One server of the namespace, across its jobs.
#[derive(Default)]
struct ServerRow {
    /// Job → (disabled, instance count).
    jobs: BTreeMap<String, (bool, u32)>,
    /// (instance id, job).
    instances: Vec<(String, String)>,
    via_sidecar: bool,
}

/// `GET /servers`: every server IP of the namespace, its jobs and its instances.
pub async fn servers(
    State(web): State<Arc<Web>>,
    Query(q): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let viewer = match session::read(&web, &headers, "/servers") {
        Ok(v) => v,
        Err(r) => return r,
    };
    let mut rows: BTreeMap<String, ServerRow> = BTreeMap::new();
    let names = match jobs::job_names(&web.registry).await {
        Ok(names) => names,
        Err(e) => return error_page(&web, &viewer, &e, "/"),
    };
    for name in names {
        let job = match jobs::get_job(&web.registry, &name).await {
            Ok(job) => job,
            Err(AdminError::JobNotFound(_)) => continue,
            Err(e) => return error_page(&web, &viewer, &e, "/"),
        };
        for s in &job.servers {
            let row = rows.entry(s.ip.clone()).or_default();
            row.jobs
                .insert(name.clone(), (s.disabled, s.instance_count));
        }
        for i in &job.instances {
            let row = rows.entry(i.server_ip.clone()).or_default();
            row.instances.push((i.instance_id.clone(), name.clone()));
            row.via_sidecar |= i.via_sidecar;
        }
    }
    let mut table = String::from(
        r#"<table id="server-list"><thead><tr><th>Server</th><th>Runs</th><th>Jobs</th><th>Instances</th><th></th></tr></thead><tbody>"#,
    );
    for (ip, row) in &rows {
        let mut jobs_cell = String::new();
        for (job, (disabled, n)) in &row.jobs {
            let _ = write!(
                jobs_cell,
                r#"<div data-server-job="{job}"><a href="{url}">{job}</a> {status} <span class="muted">{n} instance(s)</span></div>"#,
                job = esc(job),
                url = esc(&job_url(job)),
                status = if *disabled {
                    badge("DISABLED", "off")
                } else {
                    badge("ENABLED", "ok")
                },
            );
        }
        let mut instances_cell = String::new();
        for (id, job) in &row.instances {
            let _ = write!(
                instances_cell,
                r#"<div>{id} <span class="muted">in {job}</span> {shutdown}</div>"#,
                id = esc(id),
                job = esc(job),
                shutdown = action(
                    &viewer,
                    &format!("/jobs/{}/instances/{}/shutdown", seg(job), seg(id)),
                    "Shut down",
                    &format!("Shut instance {id} of job {job} down?"),
                    "small danger",
                ),
            );
        }
        let any_enabled = row.jobs.values().any(|(d, _)| !d);
        let any_disabled = row.jobs.values().any(|(d, _)| *d);
        let mut toggles = String::new();
        if any_enabled {
            toggles.push_str(&action(
                &viewer,
                &format!("/servers/{}/disable", seg(ip)),
                "Disable server",
                &format!("Disable server {ip} in every job? Its instances get no items until it is enabled."),
                "small",
            ));
        }
        if any_disabled {
            toggles.push_str(&action(
                &viewer,
                &format!("/servers/{}/enable", seg(ip)),
                "Enable server",
                &format!("Enable server {ip} in every job?"),
                "small",
            ));
        }
        let _ = write!(
            table,
            r#"<tr data-server="{ip}"><td>{ip}</td><td>{runs}</td><td>{jobs_cell}</td><td>{instances_cell}</td><td>{toggles}</td></tr>"#,
            ip = esc(ip),
            runs = if row.via_sidecar {
                "shardcar sidecar"
            } else if row.instances.is_empty() {
                ""
            } else {
                "ElasticJob JVM"
            },
        );
    }
    if rows.is_empty() {
        table.push_str(
            r#"<tr><td colspan="5" class="muted">No server has registered yet.</td></tr>"#,
        );
    }
    table.push_str("</tbody></table>");
    if q.fragment.as_deref() == Some("live") {
        return Html(table).into_response();
    }
    let body = format!(
        r#"<h1>Servers</h1><div id="live" data-live-poll="/servers?fragment=live">{table}</div>"#
    );
    Html(layout(
        &web.header(),
        &viewer,
        Nav::Servers,
        "Servers",
        notice(q.done.as_deref()),
        &body,
    ))
    .into_response()
}
