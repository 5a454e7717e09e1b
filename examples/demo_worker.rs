//! A minimal shardcar worker written against the proto alone, used by `scripts/demo.sh
//! DEMO_WORKER=rust`: it subscribes to one job on the local sidecar, prints its assignments
//! and triggers, and completes every item after a short pause of "work", keeping the contract's
//! rules (proto/shardcar/v1/shardcar.proto): it runs items only under a valid lease, declines a
//! trigger that comes without one or during a shutdown, stops and declines revoked items and
//! every item when the lease runs out, and drops the answers of a stream that has ended.
//!
//! When the stream ends it reads the `Shutdown` that came before: after a `REMOTE` shutdown (an
//! operator shut the instance down) it stops; after a `DRAIN` (the sidecar is restarting), a
//! `Shutdown` of an older sidecar with no kind, or a stream that broke, it subscribes again with
//! backoff until the sidecar is back. A subscription refused for any reason but UNAVAILABLE
//! ends it, as does Ctrl-C.
//!
//! ```text
//! cargo run --example demo_worker -- [ENDPOINT] [NAME]
//! ```
//! `ENDPOINT` defaults to `$SHARDCAR_ENDPOINT`, else `http://127.0.0.1:50061`; `NAME`, when
//! given, starts every line (`[NAME] …`). The job is `demoJob`: 4 items, every 3 seconds,
//! failover on.
#![allow(
    clippy::disallowed_methods,
    reason = "tests, benchmarks and examples run against real time and real processes"
)]
use rand::Rng;
use shardcar::proto::subscribe_response::Event;
use shardcar::proto::worker_service_client::WorkerServiceClient;
use shardcar::proto::{
    CompleteRequest, DeclineRequest, JobConfig, Lease, ShutdownKind, SubscribeRequest, Trigger,
};
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::Code;

const JOB: &str = "demoJob";
/// How long each item "works".
const WORK: Duration = Duration::from_millis(300);
/// The reconnect backoff: doubling from the first to the last, back to the first after each
/// registration.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_LAST: Duration = Duration::from_secs(5);

fn demo_job() -> JobConfig {
    JobConfig {
        job_name: JOB.to_string(),
        cron: "0/3 * * * * ?".to_string(),
        sharding_total_count: 4,
        sharding_item_parameters: HashMap::from([
            (0, "north".to_string()),
            (1, "south".to_string()),
            (2, "east".to_string()),
            (3, "west".to_string()),
        ]),
        failover: true,
        description: "shardcar demo: one region per item".to_string(),
        ..Default::default()
    }
}

/// How a stream ended, and so what comes next.
enum End {
    /// A `REMOTE` shutdown (the instance was shut down), or a subscription the sidecar
    /// refuses for good: do not subscribe again.
    Stop(String),
    /// A drain, or a stream that broke or could not be opened: subscribe again after a backoff.
    /// `registered` says whether the stream got as far as `Registered` (the backoff restarts).
    Again { why: String, registered: bool },
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let endpoint = args
        .next()
        .or_else(|| std::env::var("SHARDCAR_ENDPOINT").ok())
        .unwrap_or_else(|| "http://127.0.0.1:50061".to_string());
    let prefix = args.next().map(|n| format!("[{n}] ")).unwrap_or_default();
    let say = move |line: String| println!("{prefix}{line}");

    let subscriptions = async {
        let mut backoff = BACKOFF_FIRST;
        loop {
            match subscribe_once(&endpoint, &say).await {
                End::Stop(why) => return why,
                End::Again { why, registered } => {
                    if registered {
                        backoff = BACKOFF_FIRST;
                    }
                    // Jitter: the workers of a restarted sidecar do not all come back at once.
                    let delay = backoff.mul_f64(rand::rng().random_range(0.5..1.0));
                    say(format!("{why}; subscribing again in {delay:.2?}"));
                    tokio::time::sleep(delay).await;
                    backoff = (backoff * 2).min(BACKOFF_LAST);
                }
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => say("interrupted, leaving".to_string()),
        why = subscriptions => say(format!("{why}, leaving")),
    }
}

/// One subscription, from connecting to the end of its stream.
async fn subscribe_once(endpoint: &str, say: &(impl Fn(String) + Clone + Send + 'static)) -> End {
    let again = |why: String, registered: bool| End::Again { why, registered };
    let mut client = match WorkerServiceClient::connect(endpoint.to_string()).await {
        Ok(client) => client,
        Err(e) => return again(format!("cannot connect to {endpoint}: {e}"), false),
    };
    let request = SubscribeRequest {
        job_name: JOB.to_string(),
        config: Some(demo_job()),
        pid: std::process::id(),
        ..Default::default()
    };
    let mut stream = match client.subscribe(request).await {
        Ok(response) => response.into_inner(),
        // UNAVAILABLE: the sidecar is not ready (yet); anything else it would refuse again.
        Err(status) if status.code() == Code::Unavailable => {
            return again(format!("subscribe refused: {}", status.message()), false)
        }
        Err(status) => return End::Stop(format!("subscribe refused: {}", status.message())),
    };

    let mut instance_id = String::new();
    // Until when the latest lease is valid; none before the first and once it has run out.
    let mut lease_until: Option<Instant> = None;
    let mut shutdown: Option<ShutdownKind> = None;
    // Cancelled when the stream ends: every execution it delivered is void, answers dropped.
    let stream_over = CancellationToken::new();
    let _void_on_exit = stream_over.clone().drop_guard();
    // The items running now, by (execution, item): cancelling one stops it and declines it.
    let mut running: HashMap<(String, i32), (CancellationToken, JoinHandle<()>)> = HashMap::new();

    let end = loop {
        running.retain(|_, (_, task)| !task.is_finished());
        let lease_end = lease_until.map_or_else(far_future, tokio::time::Instant::from_std);
        let message = tokio::select! {
            message = stream.message() => message,
            _ = tokio::time::sleep_until(lease_end), if lease_until.is_some() => {
                // Rule 1: stop every item at once; each declines once stopped.
                lease_until = None;
                if !running.is_empty() {
                    say(format!("the lease ran out: stopping {} items", running.len()));
                }
                running.values().for_each(|(stop, _)| stop.cancel());
                continue;
            }
        };
        let event = match message {
            Ok(Some(response)) => match response.event {
                Some(event) => event,
                None => continue,
            },
            Ok(None) => break "the sidecar ended the stream".to_string(),
            Err(status) => break format!("the stream broke: {}", status.message()),
        };
        match event {
            Event::Registered(r) => {
                instance_id = r.instance_id;
                say(format!("registered as {instance_id}"));
            }
            Event::Assignment(a) => {
                let items: Vec<i32> = a.items.iter().map(|i| i.item).collect();
                let role = if a.leader { ", leader" } else { "" };
                say(format!(
                    "assigned items {items:?} (epoch {}{role})",
                    a.epoch
                ));
            }
            Event::Lease(lease) => {
                // A renewal that is void already ends the lease now (the timer above fires).
                lease_until = Some(lease_end_of(&lease).unwrap_or_else(Instant::now));
            }
            Event::Trigger(trigger) => {
                let id = short(&trigger.execution_id);
                let leased = lease_until.is_some_and(|until| Instant::now() < until);
                if !leased || shutdown.is_some() {
                    // Rules 2 and 5: not run, given back at once.
                    let why = if leased {
                        "shutting down"
                    } else {
                        "no valid lease"
                    };
                    say(format!("trigger {id} declined: {why}"));
                    let request = DeclineRequest {
                        instance_id: instance_id.clone(),
                        execution_id: trigger.execution_id.clone(),
                        reason: why.to_string(),
                        ..Default::default()
                    };
                    let mut client = client.clone();
                    tokio::spawn(async move { client.decline(request).await });
                    continue;
                }
                say(describe(&trigger));
                for item in &trigger.items {
                    let stop = stream_over.child_token();
                    let task = tokio::spawn(run_item(
                        client.clone(),
                        say.clone(),
                        instance_id.clone(),
                        trigger.execution_id.clone(),
                        item.item,
                        stop.clone(),
                        stream_over.clone(),
                    ));
                    running.insert((trigger.execution_id.clone(), item.item), (stop, task));
                }
            }
            Event::Revoke(r) => {
                // Rule 4: stop those items now; each declines once stopped.
                say(format!("revoked items {:?}: {}", r.items, r.reason));
                running
                    .iter()
                    .filter(|((_, item), _)| r.items.contains(item))
                    .for_each(|(_, (stop, _))| stop.cancel());
            }
            Event::Shutdown(s) => {
                // Rule 5: no new work; what runs finishes and is answered; the sidecar ends the
                // stream once it is done.
                let kind = s.kind();
                let what = match kind {
                    ShutdownKind::Remote => "remote: leaving once the stream ends",
                    _ => "drain: subscribing again once the stream ends",
                };
                say(format!("shutdown ({what}): {}", s.reason));
                shutdown = Some(kind);
            }
        }
    };
    match shutdown {
        Some(ShutdownKind::Remote) => End::Stop("shut down by an operator".to_string()),
        Some(_) => again("the sidecar drained".to_string(), !instance_id.is_empty()),
        None => again(end, !instance_id.is_empty()),
    }
}

/// "Works" on one item, then completes it; stopped (revoked, lease out), declines it; after the
/// stream has ended, answers nothing.
async fn run_item(
    mut client: WorkerServiceClient<Channel>,
    say: impl Fn(String),
    instance_id: String,
    execution_id: String,
    item: i32,
    stop: CancellationToken,
    stream_over: CancellationToken,
) {
    let stopped = tokio::select! {
        _ = tokio::time::sleep(WORK) => false,
        _ = stop.cancelled() => true,
    };
    if stream_over.is_cancelled() {
        return;
    }
    let answer = if stopped {
        let request = DeclineRequest {
            instance_id,
            execution_id: execution_id.clone(),
            items: vec![item],
            reason: "stopped".to_string(),
        };
        client.decline(request).await.map(drop)
    } else {
        let request = CompleteRequest {
            instance_id,
            execution_id: execution_id.clone(),
            items: vec![item],
        };
        client.complete(request).await.map(drop)
    };
    if let Err(status) = answer {
        say(format!(
            "item {item} of {}: answer refused: {}",
            short(&execution_id),
            status.message()
        ));
    }
}

/// The end of a lease: the earlier of `valid_for` from now and `expires_at` on the host's
/// clock; `None` when it is void already (read after its `expires_at`) or malformed.
fn lease_end_of(lease: &Lease) -> Option<Instant> {
    let now = Instant::now();
    let valid_for = Duration::try_from(lease.valid_for?).ok()?;
    let expires_at = SystemTime::try_from(lease.expires_at?).ok()?;
    let left = expires_at.duration_since(SystemTime::now()).ok()?;
    Some(now + valid_for.min(left))
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400)
}

fn short(execution_id: &str) -> &str {
    &execution_id[..execution_id.len().min(8)]
}

fn describe(trigger: &Trigger) -> String {
    let items: Vec<String> = trigger
        .items
        .iter()
        .map(|i| format!("{}={}", i.item, i.parameter))
        .collect();
    format!(
        "trigger {} ({:?}) items [{}]",
        short(&trigger.execution_id),
        trigger.source(),
        items.join(", ")
    )
}
