//! The console's actions, each a POST that carries the CSRF token and a confirmation: the
//! script asks first (`data-confirm`) and marks the form confirmed; a form posted without that
//! mark gets a page that asks. They call what the Admin API calls ([`crate::ops::jobs`], and
//! [`crate::api::admin::put_job`] for a configuration), so every coordinator of the job, Java or
//! shardcar, sees them as it sees ElasticJob's console. Each one done is logged.

use std::future::Future;
use std::sync::Arc;

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};

use crate::api::admin::{put_job, validate_config};
use crate::api::convert::{job_type_to_proto, to_proto};
use crate::elasticjob::paths::ServerStatus;
use crate::ops::jobs::{self, AdminError};

use super::form::{field_error, ConfigForm, FieldErrors};
use super::html::{esc, job_url, layout, seg, Nav};
use super::pages::error_page;
use super::session::{self, Viewer};
use super::Web;

/// A posted form's fields, in order.
type Fields = Vec<(String, String)>;

fn field<'a>(fields: &'a Fields, name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// A page that asks before doing: the same form again, confirmed.
fn confirm_page(
    web: &Web,
    viewer: &Viewer,
    path: &str,
    question: &str,
    fields: &Fields,
    back: &str,
) -> Response {
    let mut hidden = String::new();
    for (k, v) in fields.iter().filter(|(k, _)| k != "confirmed") {
        hidden.push_str(&format!(
            r#"<input type="hidden" name="{}" value="{}">"#,
            esc(k),
            esc(v)
        ));
    }
    let body = format!(
        r#"<h1>Confirm</h1><p id="question">{question}</p>
<form method="post" action="{path}">{hidden}<input type="hidden" name="confirmed" value="yes"><button type="submit" class="primary" id="confirm">Yes, do it</button> <a href="{back}">Cancel</a></form>"#,
        question = esc(question),
        path = esc(path),
        back = esc(back),
    );
    Html(layout(
        &web.header(),
        viewer,
        Nav::None,
        "Confirm",
        None,
        &body,
    ))
    .into_response()
}

/// Checks who acts and that they confirmed, does `op`, and goes back to `back` saying what was
/// done (or shows why not).
async fn run<F, Fut>(
    web: Arc<Web>,
    headers: HeaderMap,
    fields: Fields,
    path: String,
    back: String,
    question: String,
    op: F,
) -> Response
where
    F: FnOnce(Arc<Web>) -> Fut,
    Fut: Future<Output = Result<&'static str, AdminError>>,
{
    let viewer = match session::act(&web, &headers, field(&fields, "csrf"), &back) {
        Ok(v) => v,
        Err(r) => return r,
    };
    if field(&fields, "confirmed") != Some("yes") {
        return confirm_page(&web, &viewer, &path, &question, &fields, &back);
    }
    match op(web.clone()).await {
        Ok(done) => {
            tracing::info!(action = %path, result = done, "console action done");
            Redirect::to(&format!("{back}?done={done}")).into_response()
        }
        Err(e) => {
            tracing::info!(action = %path, error = %e, "console action refused");
            error_page(&web, &viewer, &e, &back)
        }
    }
}

/// `POST /jobs/{job}/trigger`.
pub async fn trigger(
    State(web): State<Arc<Web>>,
    Path(job): Path<String>,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    let url = job_url(&job);
    let parameter = field(&fields, "job_parameter")
        .map(str::to_string)
        .filter(|p| !p.is_empty());
    let question = match &parameter {
        Some(p) => {
            format!("Run job {job} once now on every live instance, with job parameter {p:?}?")
        }
        None => format!("Run job {job} once now on every live instance?"),
    };
    run(
        web,
        headers,
        fields,
        format!("{url}/trigger"),
        url,
        question,
        |web| async move {
            jobs::trigger_job(&web.registry, &job, parameter.as_deref()).await?;
            Ok("triggered")
        },
    )
    .await
}

async fn job_servers(
    web: Arc<Web>,
    job: String,
    headers: HeaderMap,
    fields: Fields,
    status: ServerStatus,
) -> Response {
    let url = job_url(&job);
    let (verb, capitalised, done) = match status {
        ServerStatus::Disabled => ("disable", "Disable", "job-disabled"),
        _ => ("enable", "Enable", "job-enabled"),
    };
    let question = format!("{capitalised} job {job} on every server?");
    run(
        web,
        headers,
        fields,
        format!("{url}/{verb}"),
        url,
        question,
        move |web| async move {
            jobs::set_job_servers(&web.registry, &job, status).await?;
            Ok(done)
        },
    )
    .await
}

/// `POST /jobs/{job}/disable`.
pub async fn disable_job(
    State(web): State<Arc<Web>>,
    Path(job): Path<String>,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    job_servers(web, job, headers, fields, ServerStatus::Disabled).await
}

/// `POST /jobs/{job}/enable`.
pub async fn enable_job(
    State(web): State<Arc<Web>>,
    Path(job): Path<String>,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    job_servers(web, job, headers, fields, ServerStatus::Enabled).await
}

/// `POST /jobs/{job}/remove`.
pub async fn remove(
    State(web): State<Arc<Web>>,
    Path(job): Path<String>,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    let url = job_url(&job);
    let question = format!(
        "Remove job {job}? Its instances are shut down and the job is deleted from the namespace."
    );
    run(
        web,
        headers,
        fields,
        format!("{url}/remove"),
        "/".into(),
        question,
        |web| async move {
            jobs::check_job_name("job_name", &job)?;
            jobs::remove_job(&web.registry, &job).await?;
            Ok("removed")
        },
    )
    .await
}

async fn item(
    web: Arc<Web>,
    job: String,
    item: i32,
    headers: HeaderMap,
    fields: Fields,
    disable: bool,
) -> Response {
    let url = job_url(&job);
    let verb = if disable { "disable" } else { "enable" };
    let question = format!("{verb} item {item} of job {job}?");
    run(
        web,
        headers,
        fields,
        format!("{url}/items/{item}/{verb}"),
        url,
        question,
        move |web| async move {
            jobs::set_items_disabled(&web.registry, &job, &[item], disable).await?;
            Ok(if disable {
                "item-disabled"
            } else {
                "item-enabled"
            })
        },
    )
    .await
}

/// `POST /jobs/{job}/items/{item}/disable`.
pub async fn disable_item(
    State(web): State<Arc<Web>>,
    Path((job, i)): Path<(String, i32)>,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    item(web, job, i, headers, fields, true).await
}

/// `POST /jobs/{job}/items/{item}/enable`.
pub async fn enable_item(
    State(web): State<Arc<Web>>,
    Path((job, i)): Path<(String, i32)>,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    item(web, job, i, headers, fields, false).await
}

async fn server(
    web: Arc<Web>,
    job: Option<String>,
    ip: String,
    headers: HeaderMap,
    fields: Fields,
    status: ServerStatus,
) -> Response {
    let disable = status == ServerStatus::Disabled;
    let verb = if disable { "disable" } else { "enable" };
    let (path, back, question) = match &job {
        Some(job) => (
            format!("{}/servers/{}/{verb}", job_url(job), seg(&ip)),
            job_url(job),
            format!("{verb} server {ip} in job {job}?"),
        ),
        None => (
            format!("/servers/{}/{verb}", seg(&ip)),
            "/servers".to_string(),
            format!("{verb} server {ip} in every job?"),
        ),
    };
    run(
        web,
        headers,
        fields,
        path,
        back,
        question,
        move |web| async move {
            if let Some(job) = &job {
                jobs::check_job_name("job_name", job)?;
            }
            jobs::set_server(&web.registry, job.as_deref(), &ip, status).await?;
            Ok(if disable {
                "server-disabled"
            } else {
                "server-enabled"
            })
        },
    )
    .await
}

/// `POST /jobs/{job}/servers/{ip}/disable`.
pub async fn disable_job_server(
    State(web): State<Arc<Web>>,
    Path((job, ip)): Path<(String, String)>,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    server(web, Some(job), ip, headers, fields, ServerStatus::Disabled).await
}

/// `POST /jobs/{job}/servers/{ip}/enable`.
pub async fn enable_job_server(
    State(web): State<Arc<Web>>,
    Path((job, ip)): Path<(String, String)>,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    server(web, Some(job), ip, headers, fields, ServerStatus::Enabled).await
}

/// `POST /servers/{ip}/disable`: in every job.
pub async fn disable_server(
    State(web): State<Arc<Web>>,
    Path(ip): Path<String>,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    server(web, None, ip, headers, fields, ServerStatus::Disabled).await
}

/// `POST /servers/{ip}/enable`: in every job.
pub async fn enable_server(
    State(web): State<Arc<Web>>,
    Path(ip): Path<String>,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    server(web, None, ip, headers, fields, ServerStatus::Enabled).await
}

async fn shutdown(
    web: Arc<Web>,
    job: Option<String>,
    id: String,
    headers: HeaderMap,
    fields: Fields,
) -> Response {
    let (path, back, question) = match &job {
        Some(job) => (
            format!("{}/instances/{}/shutdown", job_url(job), seg(&id)),
            job_url(job),
            format!("Shut instance {id} of job {job} down?"),
        ),
        None => (
            format!("/instances/{}/shutdown", seg(&id)),
            "/servers".to_string(),
            format!("Shut instance {id} down in every job?"),
        ),
    };
    run(
        web,
        headers,
        fields,
        path,
        back,
        question,
        move |web| async move {
            if let Some(job) = &job {
                jobs::check_job_name("job_name", job)?;
            }
            jobs::shutdown_instance(&web.registry, job.as_deref(), &id).await?;
            Ok("shutdown")
        },
    )
    .await
}

/// `POST /jobs/{job}/instances/{id}/shutdown`.
pub async fn shutdown_job_instance(
    State(web): State<Arc<Web>>,
    Path((job, id)): Path<(String, String)>,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    shutdown(web, Some(job), id, headers, fields).await
}

/// `POST /instances/{id}/shutdown`: in every job.
pub async fn shutdown_instance(
    State(web): State<Arc<Web>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    shutdown(web, None, id, headers, fields).await
}

/// The edit page: the form (with errors), under the layout.
fn edit_page(
    web: &Web,
    viewer: &Viewer,
    job: &str,
    form: &ConfigForm,
    errors: &FieldErrors,
    status: StatusCode,
) -> Response {
    let body = format!(
        r#"<h1>Edit job <a href="{url}">{name}</a></h1>{form}"#,
        url = esc(&job_url(job)),
        name = esc(job),
        form = form.render(job, viewer, errors),
    );
    (
        status,
        Html(layout(
            &web.header(),
            viewer,
            Nav::Jobs,
            &format!("Edit {job}"),
            None,
            &body,
        )),
    )
        .into_response()
}

/// `GET /jobs/{job}/edit`: the configuration form, filled with the job's configuration.
pub async fn edit_form(
    State(web): State<Arc<Web>>,
    Path(job): Path<String>,
    headers: HeaderMap,
) -> Response {
    let url = format!("{}/edit", job_url(&job));
    let viewer = match session::read(&web, &headers, &url) {
        Ok(v) if v.can_act => v,
        Ok(_) => return Redirect::to(&format!("/login?next={}", seg(&url))).into_response(),
        Err(r) => return r,
    };
    if let Err(e) = jobs::check_job_name("job_name", &job) {
        return error_page(&web, &viewer, &e, "/");
    }
    let info = match jobs::get_job(&web.registry, &job).await {
        Ok(info) => info,
        Err(e) => return error_page(&web, &viewer, &e, "/"),
    };
    let form = ConfigForm::from_config(&to_proto(&info.config, &info.extras));
    edit_page(
        &web,
        &viewer,
        &job,
        &form,
        &FieldErrors::new(),
        StatusCode::OK,
    )
}

/// `POST /jobs/{job}/edit`: checks the form as `PutJob` would; shows each error at its field
/// (422, nothing written), else asks, then writes.
pub async fn edit(
    State(web): State<Arc<Web>>,
    Path(job): Path<String>,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    let url = job_url(&job);
    let path = format!("{url}/edit");
    let viewer = match session::act(&web, &headers, field(&fields, "csrf"), &path) {
        Ok(v) => v,
        Err(r) => return r,
    };
    if let Err(e) = jobs::check_job_name("job_name", &job) {
        return error_page(&web, &viewer, &e, "/");
    }
    // The type is the job root's: the form keeps it.
    let current = match jobs::get_job(&web.registry, &job).await {
        Ok(info) => info,
        Err(e) => return error_page(&web, &viewer, &e, "/"),
    };
    let form = ConfigForm::from_fields(&fields);
    let invalid = |errors: FieldErrors| {
        edit_page(
            &web,
            &viewer,
            &job,
            &form,
            &errors,
            StatusCode::UNPROCESSABLE_ENTITY,
        )
    };
    let config = match form.to_proto(&job, job_type_to_proto(current.job_type) as i32) {
        Ok(config) => config,
        Err(errors) => return invalid(errors),
    };
    let as_field = |e: AdminError| match e {
        AdminError::InvalidArgument { field, message } => {
            Ok([field_error(&field, &message)].into_iter().collect())
        }
        other => Err(other),
    };
    if field(&fields, "confirmed") != Some("yes") {
        return match validate_config(&config).map_err(as_field) {
            Ok(_) => confirm_page(
                &web,
                &viewer,
                &path,
                &format!("Save the new configuration of job {job}?"),
                &fields,
                &url,
            ),
            Err(Ok(errors)) => invalid(errors),
            Err(Err(e)) => error_page(&web, &viewer, &e, &url),
        };
    }
    match put_job(&web.registry, &config).await.map_err(as_field) {
        Ok(_) => {
            tracing::info!(job = %job, "console: job configuration written");
            Redirect::to(&format!("{url}?done=saved")).into_response()
        }
        Err(Ok(errors)) => invalid(errors),
        Err(Err(e)) => error_page(&web, &viewer, &e, &url),
    }
}
