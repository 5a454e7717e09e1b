//! The `shardcar.v1.WorkerService`: validates requests, then hands them to the
//! [`Coordinator`]. Every error names the field or state a client must fix.

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use crate::api::connection::ConnState;
use crate::api::convert::{check_job_name, from_proto};
use crate::api::events::to_wire;
use crate::coordination::{
    Connection, CoordError, Coordinator, InProcess, ItemOutcome, Subscription,
};
use crate::elasticjob::instance::instance_id;
use crate::proto::worker_service_server::WorkerService;
use crate::proto::{
    CompleteRequest, CompleteResponse, DeclineRequest, DeclineResponse, ReportFailureRequest,
    ReportFailureResponse, SubscribeRequest, SubscribeResponse,
};

/// The longest `ReportFailure.error` and `Decline.reason` accepted, in bytes.
pub const MAX_ERROR_BYTES: usize = 16 * 1024;

/// The worker service of one sidecar.
pub struct WorkerApi {
    coordinator: Coordinator,
}

impl WorkerApi {
    pub fn new(coordinator: Coordinator) -> WorkerApi {
        WorkerApi { coordinator }
    }
}

fn invalid(field: &str, message: impl Into<String>) -> Status {
    CoordError::InvalidArgument {
        field: field.to_string(),
        message: message.into(),
    }
    .into()
}

fn check_instance_id(id: &str) -> Result<(), Status> {
    if id.is_empty()
        || id.len() > 255
        || id.contains('/')
        || id.chars().any(char::is_control)
        || id.trim() != id
    {
        return Err(invalid(
            "instance_id",
            format!("{id:?} must be 1 to 255 characters, without '/', control characters or surrounding spaces"),
        ));
    }
    Ok(())
}

/// ElasticJob finds the ip of an instance before the first `@-@` and the task id splits on
/// `@-@`, so a suffix keeps to a plain alphabet.
/// The most executions one worker may ask to run at once.
const MAX_CONCURRENT_EXECUTIONS: u32 = 1024;

fn check_instance_suffix(suffix: &str) -> Result<(), Status> {
    let ok = (1..=64).contains(&suffix.len())
        && suffix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "instance_suffix",
            format!("{suffix:?} must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-' (e.g. \"{{pid}}-{{random}}\")"),
        ))
    }
}

/// `max_concurrent_executions`: 0 (unset) is 1, ElasticJob's one execution at a time.
fn check_max_concurrent(n: u32) -> Result<u32, Status> {
    match n {
        0 => Ok(1),
        1..=MAX_CONCURRENT_EXECUTIONS => Ok(n),
        _ => Err(invalid(
            "max_concurrent_executions",
            format!("is {n}; it must be 1 to {MAX_CONCURRENT_EXECUTIONS} (how many executions the worker runs at once; 0 means 1)"),
        )),
    }
}

fn check_text(field: &str, text: &str) -> Result<(), Status> {
    if text.len() > MAX_ERROR_BYTES {
        return Err(invalid(
            field,
            format!(
                "is {} bytes; at most {MAX_ERROR_BYTES} are accepted: send the first {MAX_ERROR_BYTES} bytes (clients truncate it)",
                text.len()
            ),
        ));
    }
    Ok(())
}

/// Runs an answer's or a decline's hand-off to its job to the end, whatever becomes of the call:
/// the server drops a handler whose caller gave up (its deadline passed, the call was
/// cancelled), and an answer dropped on its way to the job would leave its execution waiting
/// for a resend the contract does not require (rule 3). Spawned, it reaches the job, which
/// then holds it and records it itself.
async fn to_the_end<F>(call: F) -> Result<(), CoordError>
where
    F: std::future::Future<Output = Result<(), CoordError>> + Send + 'static,
{
    tokio::spawn(call).await.unwrap_or_else(|_| {
        Err(CoordError::Unavailable(
            "the sidecar is stopping; the call was not taken".into(),
        ))
    })
}

fn check_execution_id(id: &str) -> Result<(), Status> {
    if id.is_empty() {
        return Err(invalid(
            "execution_id",
            "must be the execution_id of the Trigger being answered",
        ));
    }
    Ok(())
}

#[tonic::async_trait]
impl WorkerService for WorkerApi {
    type SubscribeStream = Pin<Box<dyn Stream<Item = Result<SubscribeResponse, Status>> + Send>>;

    async fn subscribe(
        &self,
        request: Request<SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let connection: Arc<dyn Connection> = match request.extensions().get::<Arc<ConnState>>() {
            Some(state) => state.clone(),
            None => Arc::new(InProcess),
        };
        let req = request.into_inner();
        check_job_name("job_name", &req.job_name)?;
        let id = if !req.instance_id.is_empty() {
            check_instance_id(&req.instance_id)?;
            req.instance_id.clone()
        } else if !req.instance_suffix.is_empty() {
            check_instance_suffix(&req.instance_suffix)?;
            instance_id(self.coordinator.ip(), &req.instance_suffix)
        } else if req.pid == 0 {
            return Err(invalid(
                "pid",
                "must be the worker's process id (or give an instance_id)",
            ));
        } else {
            instance_id(self.coordinator.ip(), req.pid)
        };
        if req.config.as_ref().is_some_and(|c| c.job_type != 0) {
            return Err(invalid(
                "config.job_type",
                "SCRIPT and HTTP jobs are run by the sidecars themselves; create them with PutJob (shardcar ctl job put), not by subscribing",
            ));
        }
        let config = req
            .config
            .as_ref()
            .map(|c| from_proto(&req.job_name, c, req.overwrite))
            .transpose()?;
        let max_concurrent = check_max_concurrent(req.max_concurrent_executions)?;
        let subscription = Subscription {
            job_name: req.job_name,
            instance_id: id,
            config,
            overwrite: req.overwrite,
            max_concurrent,
            connection,
        };
        let (_, events) = self.coordinator.subscribe(subscription).await?;
        let stream = ReceiverStream::new(events).map(|event| Ok(to_wire(*event)));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn complete(
        &self,
        request: Request<CompleteRequest>,
    ) -> Result<Response<CompleteResponse>, Status> {
        let req = request.into_inner();
        check_instance_id(&req.instance_id)?;
        check_execution_id(&req.execution_id)?;
        if req.items.is_empty() {
            return Err(invalid(
                "items",
                "must name at least one item of the execution",
            ));
        }
        let outcomes = req
            .items
            .iter()
            .map(|i| (*i, ItemOutcome::Completed))
            .collect();
        let coordinator = self.coordinator.clone();
        to_the_end(async move {
            coordinator
                .answer(&req.instance_id, &req.execution_id, outcomes)
                .await
        })
        .await?;
        Ok(Response::new(CompleteResponse {}))
    }

    async fn report_failure(
        &self,
        request: Request<ReportFailureRequest>,
    ) -> Result<Response<ReportFailureResponse>, Status> {
        let req = request.into_inner();
        check_instance_id(&req.instance_id)?;
        check_execution_id(&req.execution_id)?;
        check_text("error", &req.error)?;
        let error = if req.error.is_empty() {
            "no error text given".to_string()
        } else {
            req.error
        };
        let coordinator = self.coordinator.clone();
        to_the_end(async move {
            let outcomes = vec![(req.item, ItemOutcome::Failed(error))];
            coordinator
                .answer(&req.instance_id, &req.execution_id, outcomes)
                .await
        })
        .await?;
        Ok(Response::new(ReportFailureResponse {}))
    }

    async fn decline(
        &self,
        request: Request<DeclineRequest>,
    ) -> Result<Response<DeclineResponse>, Status> {
        let req = request.into_inner();
        check_instance_id(&req.instance_id)?;
        check_execution_id(&req.execution_id)?;
        check_text("reason", &req.reason)?;
        let coordinator = self.coordinator.clone();
        to_the_end(async move {
            coordinator
                .decline(&req.instance_id, &req.execution_id, req.items, &req.reason)
                .await
        })
        .await?;
        Ok(Response::new(DeclineResponse {}))
    }
}
