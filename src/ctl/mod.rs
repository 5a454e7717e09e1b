//! `shardcar ctl`: the command line of the Admin API. Each verb is one Admin call against the
//! sidecar at `--target` (else `SHARDCAR_TARGET`, else the address `shardcar run` listens on by
//! default), with the admin token of `--token`, `--token-file` or `SHARDCAR_TOKEN` when given,
//! shown as a table or, with `--json`, as the response in canonical proto3 JSON.
//!
//! Exit codes: 0 done; 1 the sidecar refused the request (the message is its status); 64 bad
//! usage or job file; 69 the sidecar cannot be reached.

pub mod protojson;
pub mod render;

use std::collections::HashMap;
use std::time::Duration;

use clap::{Args, Subcommand};
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Request, Status};

use crate::config::DEFAULT_LISTEN;
use crate::elasticjob::paths::validate_job_name;
use crate::proto;
use crate::proto::admin_service_client::AdminServiceClient;

/// How long to wait for the sidecar to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take (`job rm` waits for instances to go).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

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
    Trigger {
        /// Job name
        name: String,
    },
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
    /// disabled, props, execution_timeout_seconds, type) or ElasticJob's camelCase config keys.
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

/// The address to use: `--target`, else `SHARDCAR_TARGET`, else the default listen address.
pub fn target(flag: Option<String>, env: &HashMap<String, String>) -> String {
    flag.filter(|t| !t.is_empty())
        .or_else(|| {
            env.get("SHARDCAR_TARGET")
                .filter(|t| !t.is_empty())
                .cloned()
        })
        .unwrap_or_else(|| DEFAULT_LISTEN.to_string())
}

/// The admin token to send: `--token`, else `--token-file`'s contents, else `SHARDCAR_TOKEN`.
///
/// # Errors
/// `Usage` when the file cannot be read or the token cannot be sent in a header.
pub fn token(
    flag: Option<String>,
    file: Option<&str>,
    env: &HashMap<String, String>,
) -> Result<Option<String>, CtlError> {
    let token = match (flag.filter(|t| !t.is_empty()), file) {
        (Some(t), _) => Some(t),
        (None, Some(path)) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| CtlError::Usage(format!("cannot read token file {path}: {e}")))?,
        ),
        (None, None) => env.get("SHARDCAR_TOKEN").filter(|t| !t.is_empty()).cloned(),
    };
    let Some(token) = token.map(|t| t.trim().to_string()) else {
        return Ok(None);
    };
    if token.is_empty()
        || token.chars().any(char::is_whitespace)
        || tonic::metadata::MetadataValue::try_from(format!("Bearer {token}")).is_err()
    {
        return Err(CtlError::Usage(
            "the token must be printable ASCII without spaces".into(),
        ));
    }
    Ok(Some(token))
}

/// Adds the admin token to every Admin call.
#[derive(Clone)]
pub struct WithToken(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for WithToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// An Admin client that sends the token.
pub type Admin =
    AdminServiceClient<tonic::service::interceptor::InterceptedService<Channel, WithToken>>;

/// Connects to the sidecar at `target` (`host:port`, `http://host:port` or `unix:///path`).
///
/// # Errors
/// `Usage` for a malformed address, `Unreachable` when nothing answers.
pub async fn connect(target: &str) -> Result<Channel, CtlError> {
    let unreachable = |e: &tonic::transport::Error| CtlError::Unreachable {
        target: target.to_string(),
        message: error_chain(e),
    };
    if let Some(path) = target.strip_prefix("unix://") {
        let path = path.to_string();
        let endpoint = Endpoint::from_static("http://localhost").connect_timeout(CONNECT_TIMEOUT);
        let connector = tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        });
        return endpoint
            .connect_with_connector(connector)
            .await
            .map_err(|e| unreachable(&e));
    }
    let uri = if target.contains("://") {
        target.to_string()
    } else {
        format!("http://{target}")
    };
    let endpoint = Endpoint::from_shared(uri)
        .map_err(|_| {
            CtlError::Usage(format!(
                "--target {target:?} must be host:port or unix:///path"
            ))
        })?
        .connect_timeout(CONNECT_TIMEOUT);
    endpoint.connect().await.map_err(|e| unreachable(&e))
}

/// The error and its sources, `: `-separated (tonic's transport error alone says little).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn request<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(REQUEST_TIMEOUT);
    request
}

fn check_name(name: &str) -> Result<(), CtlError> {
    validate_job_name(name).map_err(CtlError::Usage)
}

/// Writes `text`, or with `--json` the response itself as canonical proto3 JSON (pretty).
fn emit<M: prost::Message + prost::Name>(json: bool, text: String, response: &M) {
    if json {
        println!("{}", protojson::to_json(response, true));
    } else {
        print!("{text}");
    }
}

/// Runs one ctl command; output goes to stdout.
///
/// # Errors
/// See [`CtlError`]; the message is meant for the terminal as it is.
pub async fn run(args: CtlArgs, env: &HashMap<String, String>) -> Result<(), CtlError> {
    // Read and check local input before connecting, so mistakes are reported as such.
    let job_file = match &args.verb {
        Verb::Job(JobVerb::Put { file }) => Some(read_job_file(file)?),
        _ => None,
    };
    let bearer = token(args.token, args.token_file.as_deref(), env)?
        .and_then(|t| format!("Bearer {t}").try_into().ok());
    let target = target(args.target, env);
    let channel = connect(&target).await.map_err(|e| match e {
        CtlError::Unreachable { message, .. } => CtlError::Unreachable {
            target: target.clone(),
            message,
        },
        other => other,
    })?;
    let mut admin: Admin = AdminServiceClient::with_interceptor(channel, WithToken(bearer));
    let json = args.json;
    let refused = |status: Status| -> CtlError {
        if status.code() == Code::Unavailable && status.message().contains("transport") {
            CtlError::Unreachable {
                target: target.clone(),
                message: status.message().to_string(),
            }
        } else {
            CtlError::Refused(status)
        }
    };
    match args.verb {
        Verb::Jobs => {
            let response = admin
                .list_jobs(request(proto::ListJobsRequest {}))
                .await
                .map_err(refused)?
                .into_inner();
            emit(json, render::jobs(&response.jobs), &response);
        }
        Verb::Job(JobVerb::Show { name }) => {
            check_name(&name)?;
            let response = admin
                .get_job(request(proto::GetJobRequest { job_name: name }))
                .await
                .map_err(refused)?
                .into_inner();
            let job = response.job.as_ref().ok_or_else(|| {
                CtlError::Refused(Status::internal(
                    "the sidecar answered GetJob without a job",
                ))
            })?;
            emit(json, render::job(job), &response);
        }
        Verb::Job(JobVerb::Put { .. }) => {
            let config = job_file.expect("read above");
            let name = config.job_name.clone();
            let response = admin
                .put_job(request(proto::PutJobRequest {
                    config: Some(config),
                }))
                .await
                .map_err(refused)?
                .into_inner();
            let verb = if response.created {
                "created"
            } else {
                "updated"
            };
            emit(json, format!("job {name} {verb}\n"), &response);
        }
        Verb::Job(JobVerb::Rm { name }) => {
            check_name(&name)?;
            let response = admin
                .remove_job(request(proto::RemoveJobRequest {
                    job_name: name.clone(),
                }))
                .await
                .map_err(refused)?
                .into_inner();
            let n = response.instance_ids.len();
            emit(
                json,
                format!("job {name} removed ({n} instance(s) shut down)\n"),
                &response,
            );
        }
        Verb::Trigger { name } => {
            check_name(&name)?;
            let response = admin
                .trigger_job(request(proto::TriggerJobRequest {
                    job_name: name.clone(),
                }))
                .await
                .map_err(refused)?
                .into_inner();
            let on = response.instance_ids.join(", ");
            emit(json, format!("job {name} triggered on {on}\n"), &response);
        }
        Verb::Disable(toggle) => toggle_run(&mut admin, toggle, true, json)
            .await
            .map_err(|e| match e {
                CtlError::Refused(s) => refused(s),
                other => other,
            })?,
        Verb::Enable(toggle) => toggle_run(&mut admin, toggle, false, json)
            .await
            .map_err(|e| match e {
                CtlError::Refused(s) => refused(s),
                other => other,
            })?,
        Verb::Shutdown { instance, job } => {
            if let Some(job) = &job {
                check_name(job)?;
            }
            let response = admin
                .shutdown_instance(request(proto::ShutdownInstanceRequest {
                    job_name: job.unwrap_or_default(),
                    instance_id: instance.clone(),
                }))
                .await
                .map_err(refused)?
                .into_inner();
            let jobs = response.job_names.join(", ");
            emit(
                json,
                format!("instance {instance} shut down in {jobs}\n"),
                &response,
            );
        }
        Verb::Executions { name, limit } => {
            if let Some(name) = &name {
                check_name(name)?;
            }
            let response = admin
                .list_executions(request(proto::ListExecutionsRequest {
                    job_name: name.unwrap_or_default(),
                    limit,
                }))
                .await
                .map_err(refused)?;
            // Where the sidecar read them: the tracing database, or its own history.
            let history = response
                .metadata()
                .get(crate::api::admin::HISTORY_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let response = response.into_inner();
            emit(
                json,
                render::executions(&response.executions, &history),
                &response,
            );
        }
        Verb::Watch { name } => {
            check_name(&name)?;
            let mut stream = admin
                .watch_job(proto::WatchJobRequest { job_name: name })
                .await
                .map_err(refused)?
                .into_inner();
            while let Some(change) = stream.message().await.map_err(refused)? {
                if json {
                    // One message per line (JSON Lines), as it comes.
                    println!("{}", protojson::to_json(&change, false));
                } else {
                    println!("{}", render::change(&change));
                }
            }
        }
    }
    Ok(())
}

fn read_job_file(file: &str) -> Result<proto::JobConfig, CtlError> {
    let text = if file == "-" {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| CtlError::Usage(format!("cannot read the job from stdin: {e}")))?
    } else {
        std::fs::read_to_string(file)
            .map_err(|e| CtlError::Usage(format!("cannot read job file {file}: {e}")))?
    };
    let shown = if file == "-" { "stdin" } else { file };
    crate::api::jobfile::parse(shown, &text).map_err(|e| CtlError::Usage(e.to_string()))
}

async fn toggle_run(
    admin: &mut Admin,
    toggle: Toggle,
    disable: bool,
    json: bool,
) -> Result<(), CtlError> {
    let word = if disable { "disabled" } else { "enabled" };
    if let Some(name) = &toggle.name {
        check_name(name)?;
    }
    let status = CtlError::Refused;
    if let Some(ip) = toggle.server {
        let job_name = toggle.name.unwrap_or_default();
        let text = |jobs: &[String]| format!("server {ip} {word} in {}\n", jobs.join(", "));
        if disable {
            let response = admin
                .disable_server(request(proto::DisableServerRequest {
                    job_name,
                    server_ip: ip.clone(),
                }))
                .await
                .map_err(status)?
                .into_inner();
            emit(json, text(&response.job_names), &response);
        } else {
            let response = admin
                .enable_server(request(proto::EnableServerRequest {
                    job_name,
                    server_ip: ip.clone(),
                }))
                .await
                .map_err(status)?
                .into_inner();
            emit(json, text(&response.job_names), &response);
        }
        return Ok(());
    }
    let Some(name) = toggle.name else {
        return Err(CtlError::Usage(
            "name a job (and optionally --item N), or give --server IP".into(),
        ));
    };
    if !toggle.items.is_empty() {
        let items = toggle.items.clone();
        let shown: Vec<String> = toggle.items.iter().map(i32::to_string).collect();
        let text = format!("job {name}: item(s) {} {word}\n", shown.join(","));
        if disable {
            let response = admin
                .disable_item(request(proto::DisableItemRequest {
                    job_name: name.clone(),
                    items,
                }))
                .await
                .map_err(status)?
                .into_inner();
            emit(json, text, &response);
        } else {
            let response = admin
                .enable_item(request(proto::EnableItemRequest {
                    job_name: name.clone(),
                    items,
                }))
                .await
                .map_err(status)?
                .into_inner();
            emit(json, text, &response);
        }
        return Ok(());
    }
    let text = |servers: &[String]| {
        if servers.is_empty() {
            format!("job {name}: no server registered yet, nothing to change\n")
        } else {
            format!("job {name} {word} on {}\n", servers.join(", "))
        }
    };
    if disable {
        let response = admin
            .disable_job(request(proto::DisableJobRequest {
                job_name: name.clone(),
            }))
            .await
            .map_err(status)?
            .into_inner();
        emit(json, text(&response.server_ips), &response);
    } else {
        let response = admin
            .enable_job(request(proto::EnableJobRequest {
                job_name: name.clone(),
            }))
            .await
            .map_err(status)?
            .into_inner();
        emit(json, text(&response.server_ips), &response);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_precedence() {
        let env: HashMap<String, String> = [(
            "SHARDCAR_TARGET".to_string(),
            "unix:///run/s.sock".to_string(),
        )]
        .into();
        assert_eq!(target(Some("10.0.0.1:1".into()), &env), "10.0.0.1:1");
        assert_eq!(target(None, &env), "unix:///run/s.sock");
        assert_eq!(target(None, &HashMap::new()), DEFAULT_LISTEN);
    }

    #[test]
    fn token_precedence() {
        let env: HashMap<String, String> =
            [("SHARDCAR_TOKEN".to_string(), "from-env".to_string())].into();
        assert_eq!(
            token(Some("flag".into()), None, &env).unwrap().as_deref(),
            Some("flag")
        );
        assert_eq!(
            token(None, None, &env).unwrap().as_deref(),
            Some("from-env")
        );
        assert_eq!(token(None, None, &HashMap::new()).unwrap(), None);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "from-file\n").unwrap();
        let path = path.display().to_string();
        assert_eq!(
            token(None, Some(&path), &env).unwrap().as_deref(),
            Some("from-file")
        );
        assert_eq!(
            token(None, Some("/nonexistent/t"), &env)
                .unwrap_err()
                .exit_code(),
            64
        );
        assert!(token(Some("a b".into()), None, &env).is_err());
    }

    #[tokio::test]
    async fn unreachable_sidecars_are_reported() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let err = connect(&addr.to_string()).await.unwrap_err();
        assert_eq!(err.exit_code(), 69);
        assert!(
            err.to_string()
                .starts_with(&format!("cannot reach the sidecar at {addr}")),
            "{err}"
        );
        let err = connect("unix:///nonexistent/shardcar.sock")
            .await
            .unwrap_err();
        assert_eq!(err.exit_code(), 69, "{err}");
    }
}
