//! `shardcar ctl`: the command line of the Admin API. Each verb is one Admin call against the
//! sidecar at `--target` (else `SHARDCAR_TARGET`, else the address `shardcar run` listens on by
//! default), with the admin token of `--token`, `--token-file` or `SHARDCAR_TOKEN` when given,
//! shown as a table or, with `--json`, as the response in canonical proto3 JSON.
//!
//! The verbs and their options are here; `client` is the connection (target, token, deadline)
//! and `commands` each verb's call and what it prints.
//!
//! Exit codes: 0 done; 1 the sidecar refused the request (the message is its status); 64 bad
//! usage or job file; 69 the sidecar cannot be reached.

mod client;
mod commands;
pub mod protojson;
pub mod render;

use clap::{Args, Subcommand};
use tonic::{Code, Status};

pub use client::{connect, target, token, Admin, WithToken};
pub use commands::run;

/// Options shared by every verb.
#[derive(Args, Debug)]
pub struct CtlArgs {
    /// Sidecar address: host:port or unix:///path [env: SHARDCAR_TARGET] [default: 127.0.0.1:50061]
    #[arg(long, global = true, value_name = "ADDR")]
    pub target: Option<String>,
    /// The sidecar's admin token, when it has one [env: SHARDCAR_TOKEN]
    #[arg(
        long,
        global = true,
        value_name = "TOKEN",
        conflicts_with = "token_file"
    )]
    pub token: Option<String>,
    /// A file holding the admin token (keeps it out of `ps`)
    #[arg(long, global = true, value_name = "FILE")]
    pub token_file: Option<String>,
    /// Print the response as canonical proto3 JSON (as grpcurl does) instead of tables
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub verb: Verb,
}

#[derive(Subcommand, Debug)]
pub enum Verb {
    /// List the jobs of the namespace
    Jobs,
    /// Show, create, change or remove one job
    #[command(subcommand)]
    Job(JobVerb),
    /// Run a job once now on every live instance
    Trigger(TriggerArgs),
    /// Disable a job (every server), some of its items, or a server
    Disable(Toggle),
    /// Enable a job (every server), some of its items, or a server
    Enable(Toggle),
    /// Shut a worker instance down remotely (its worker gets Shutdown)
    Shutdown {
        /// Instance id, e.g. 10.0.0.1@-@4242
        instance: String,
        /// Only in this job [default: every job the instance is in]
        #[arg(long, value_name = "NAME")]
        job: Option<String>,
    },
    /// Recent executions, newest first: run by this sidecar's workers, or with tracing_db every
    /// sidecar's and ElasticJob's, from the tracing database
    Executions {
        /// Only this job
        name: Option<String>,
        /// At most this many
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Follow a job's state as it changes (Ctrl-C to stop)
    Watch {
        /// Job name
        name: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum JobVerb {
    /// Configuration, leader, servers, instances and the state of each item
    Show {
        /// Job name
        name: String,
    },
    /// Create a job, or replace its configuration, from a YAML or JSON file ('-': stdin).
    ///
    /// Keys are JobConfig's (job_name, cron, time_zone, sharding_total_count,
    /// sharding_item_parameters, job_parameter, failover, misfire, monitor_execution,
    /// sharding_strategy, max_time_diff_seconds, reconcile_interval_minutes, description,
    /// disabled, props, execution_timeout_seconds, type, job_error_handler_type, retry,
    /// resident) or
    /// ElasticJob's camelCase config keys. `retry:` takes max_attempts (runs in all),
    /// initial_backoff and max_backoff (200ms, 1s) and multiplier.
    /// `type: SCRIPT` or `type: HTTP` makes a job the sidecars run themselves, from its props
    /// (script.command.line; http.uri, http.method, ...).
    Put {
        /// Job file
        file: String,
    },
    /// Remove a job: shut its instances down, then delete it from the namespace
    Rm {
        /// Job name
        name: String,
    },
    /// Run a job once now on every live instance (the same as `ctl trigger`)
    Trigger(TriggerArgs),
}

#[derive(Args, Debug)]
pub struct TriggerArgs {
    /// Job name
    pub name: String,
    /// The job parameter of this run's executions, instead of the job's own
    #[arg(long, value_name = "TEXT")]
    pub parameter: Option<String>,
}

#[derive(Args, Debug)]
pub struct Toggle {
    /// Job name (optional with --server: then every job)
    pub name: Option<String>,
    /// Only these items (repeat the flag or separate with commas)
    #[arg(
        long = "item",
        value_name = "N",
        value_delimiter = ',',
        conflicts_with = "server"
    )]
    pub items: Vec<i32>,
    /// Only this server (its IP)
    #[arg(long, value_name = "IP")]
    pub server: Option<String>,
}

/// Why a ctl command failed, with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot reach the sidecar at {target}: {message}\n  is `shardcar run` running there? choose another with --target ADDR or SHARDCAR_TARGET")]
    Unreachable { target: String, message: String },
    #[error("{}", describe_status(.0))]
    Refused(Status),
}

impl CtlError {
    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            CtlError::Usage(_) => 64,
            CtlError::Unreachable { .. } => 69,
            CtlError::Refused(_) => 1,
        }
    }
}

fn describe_status(status: &Status) -> String {
    let kind = match status.code() {
        Code::NotFound => "not found",
        Code::InvalidArgument => "invalid request",
        Code::FailedPrecondition => "not possible now",
        Code::Unavailable => "unavailable",
        Code::Unimplemented => "not supported by this sidecar (is it an older version?)",
        Code::Unauthenticated => "unauthenticated",
        _ => "failed",
    };
    format!("{kind}: {}", status.message())
}
