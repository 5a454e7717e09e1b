//! A minimal shardcar worker, used by `scripts/demo.sh`: it subscribes to one job on the local
//! sidecar, prints its assignments and triggers, and completes every trigger after a short pause
//! of "work". Ctrl-C (or the sidecar's `Shutdown`) ends it.
//!
//! ```text
//! cargo run --example demo_worker -- [ENDPOINT] [NAME]
//! ```
//! `ENDPOINT` defaults to `$SHARDCAR_ENDPOINT`, else `http://127.0.0.1:50061`; `NAME` labels the
//! output (default `worker`). The job is `demoJob`: 4 items, every 3 seconds, failover on.
#![allow(
    clippy::disallowed_methods,
    reason = "tests, benchmarks and examples run against real time and real processes"
)]
use shardcar::proto::subscribe_response::Event;
use shardcar::proto::worker_service_client::WorkerServiceClient;
use shardcar::proto::{CompleteRequest, JobConfig, SubscribeRequest, Trigger};
use std::collections::HashMap;
use std::time::Duration;

const JOB: &str = "demoJob";

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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let endpoint = args
        .next()
        .or_else(|| std::env::var("SHARDCAR_ENDPOINT").ok())
        .unwrap_or_else(|| "http://127.0.0.1:50061".to_string());
    let name = args.next().unwrap_or_else(|| "worker".to_string());

    let mut client = WorkerServiceClient::connect(endpoint.clone()).await?;
    let request = SubscribeRequest {
        job_name: JOB.to_string(),
        config: Some(demo_job()),
        pid: std::process::id(),
        ..Default::default()
    };
    let mut stream = client.subscribe(request).await?.into_inner();
    println!("[{name}] subscribed to {JOB} at {endpoint}");

    let mut instance_id = String::new();
    loop {
        let message = tokio::select! {
            _ = tokio::signal::ctrl_c() => {
                println!("[{name}] interrupted, leaving");
                return Ok(());
            }
            message = stream.message() => message?,
        };
        let Some(event) = message.and_then(|m| m.event) else {
            println!("[{name}] the sidecar ended the stream");
            return Ok(());
        };
        match event {
            Event::Registered(r) => {
                instance_id = r.instance_id;
                println!("[{name}] registered as {instance_id}");
            }
            Event::Assignment(a) => {
                let items: Vec<i32> = a.items.iter().map(|i| i.item).collect();
                let role = if a.leader { ", leader" } else { "" };
                println!(
                    "[{name}] assigned items {items:?} (epoch {}{role})",
                    a.epoch
                );
            }
            Event::Trigger(t) => {
                tokio::spawn(run(client.clone(), name.clone(), instance_id.clone(), t));
            }
            Event::Revoke(r) => println!("[{name}] revoked items {:?}: {}", r.items, r.reason),
            Event::Shutdown(s) => {
                println!("[{name}] shutdown requested: {}", s.reason);
                return Ok(());
            }
            Event::Lease(_) => {}
        }
    }
}

/// "Works" on the trigger's items, then completes it.
async fn run(
    mut client: WorkerServiceClient<tonic::transport::Channel>,
    name: String,
    instance_id: String,
    trigger: Trigger,
) {
    let items: Vec<String> = trigger
        .items
        .iter()
        .map(|i| format!("{}={}", i.item, i.parameter))
        .collect();
    println!(
        "[{name}] trigger {} ({:?}) items [{}]",
        &trigger.execution_id[..trigger.execution_id.len().min(8)],
        trigger.source(),
        items.join(", ")
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let request = CompleteRequest {
        instance_id,
        execution_id: trigger.execution_id.clone(),
        items: trigger.items.iter().map(|i| i.item).collect(),
    };
    if let Err(status) = client.complete(request).await {
        println!("[{name}] complete refused: {}", status.message());
    }
}
