//! The job page's live updates: server-sent events at `/jobs/{job}/live`. An `update` event
//! carries the page's live part ([`super::job::job_fragment`]) drawn again after each batch of
//! changes in the job's subtree ([`crate::ops::watch`]: resharding, a run starting or ending, a
//! disabled item, a new configuration), each execution recorded here, and each change of the
//! ZooKeeper session (a `zk` event with the header's badge). `removed` says the job is gone.
//! One task per open page, tracked, ends with the page, the job, or the sidecar.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

use crate::ops::jobs::{self, JobInfo};
use crate::ops::watch::{self, JobUpdate};

use super::html::{esc, job_url, zk_state};
use super::job::{job_fragment, recent};
use super::pages::error_page;
use super::session::{self, Viewer};
use super::Web;

/// Events buffered for a slow page before its task waits for it.
const BUFFER: usize = 8;
/// How soon a page whose stream broke tries again.
const RETRY: Duration = Duration::from_secs(1);

/// `GET /jobs/{job}/live`.
pub async fn job(
    State(web): State<Arc<Web>>,
    Path(name): Path<String>,
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
    let updates = match watch::follow(&web.registry, &name, &web.tracker).await {
        Ok(updates) => updates,
        Err(e) => return error_page(&web, &viewer, &e, "/"),
    };
    let (tx, rx) = mpsc::channel(BUFFER);
    web.tracker
        .spawn(pump(web.clone(), name, viewer, updates, tx));
    let stream = ReceiverStream::new(rx).map(Ok::<Event, Infallible>);
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn zk_event(web: &Web) -> Event {
    let (text, class) = zk_state(&web.registry.session().borrow(), web.zk.is_none());
    Event::default()
        .event("zk")
        .data(format!(r#"<span class="{class}">{}</span>"#, esc(&text)))
}

/// Sends the page its live part whenever the job, the history or the session changes.
async fn pump(
    web: Arc<Web>,
    name: String,
    viewer: Viewer,
    mut updates: mpsc::Receiver<Result<JobUpdate, jobs::AdminError>>,
    tx: mpsc::Sender<Event>,
) {
    let mut recorded = web.history.subscribe();
    let mut session = web.registry.session();
    let mut last: Option<JobInfo> = None;
    let retry = Event::default().retry(RETRY);
    if tx.send(retry).await.is_err() {
        return;
    }
    loop {
        let event = tokio::select! {
            _ = web.cancel.cancelled() => return,
            _ = tx.closed() => return,
            update = updates.recv() => match update {
                Some(Ok(JobUpdate { job: Some(job), .. })) => {
                    let recent = recent(&web, &name).await;
                    let event = Event::default().event("update").data(job_fragment(&web, &viewer, &job, &recent));
                    last = Some(job);
                    event
                }
                Some(Ok(JobUpdate { job: None, .. })) => {
                    let _ = tx.send(Event::default().event("removed").data("removed")).await;
                    return;
                }
                Some(Err(e)) => {
                    // The page reconnects (and reads the job again) after RETRY.
                    let _ = tx.send(Event::default().event("failed").data(esc(&e.to_string()))).await;
                    return;
                }
                None => return,
            },
            changed = recorded.changed() => {
                if changed.is_err() {
                    return;
                }
                if last.is_none() {
                    continue;
                }
                // Read the job again: the run just recorded has ended in ZooKeeper too, and the
                // page should not show it both done and running.
                match jobs::get_job(&web.registry, &name).await {
                    Ok(job) => {
                        let recent = recent(&web, &name).await;
                        let event = Event::default().event("update").data(job_fragment(&web, &viewer, &job, &recent));
                        last = Some(job);
                        event
                    }
                    // The watch reports a removal or a failure itself.
                    Err(_) => continue,
                }
            }
            changed = session.changed() => {
                if changed.is_err() {
                    return;
                }
                zk_event(&web)
            }
        };
        if tx.send(event).await.is_err() {
            return;
        }
    }
}
