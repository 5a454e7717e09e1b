//! Each verb of `shardcar ctl` as one Admin call, its answer shown as a table or as JSON.

use std::collections::HashMap;

use tonic::{Code, Status};

use super::client::{connect, request, target, token, Admin, WithToken};
use super::{protojson, render, CtlArgs, CtlError, JobVerb, Toggle, Verb};
use crate::elasticjob::paths::validate_job_name;
use crate::proto;
use crate::proto::admin_service_client::AdminServiceClient;

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
        Verb::Trigger(args) | Verb::Job(JobVerb::Trigger(args)) => {
            check_name(&args.name)?;
            let response = admin
                .trigger_job(request(proto::TriggerJobRequest {
                    job_name: args.name.clone(),
                    job_parameter: args.parameter.clone(),
                }))
                .await
                .map_err(refused)?
                .into_inner();
            let on = response.instance_ids.join(", ");
            emit(
                json,
                format!("job {} triggered on {on}\n", args.name),
                &response,
            );
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
    let config =
        crate::api::jobfile::parse(shown, &text).map_err(|e| CtlError::Usage(e.to_string()))?;
    // Checked here as the sidecar checks it, so a mistake is a usage error that names it.
    crate::api::convert::from_proto(&config.job_name, &config, false)
        .map_err(|e| CtlError::Usage(format!("job file {shown}: {e}")))?;
    Ok(config)
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
