//! How coordination errors reach a gRPC client: each as the status code a client can act on,
//! with the coordinator's message (which names what is wrong and how to fix it), and the
//! standard rich details (`google.rpc.Status` in `grpc-status-details-bin`):
//! - always an `ErrorInfo`: a stable `reason` (below), domain [`ERROR_DOMAIN`];
//! - for `INVALID_ARGUMENT`, a `BadRequest` whose field violation names the request field
//!   (`config.cron`, `instance_id`, ...), so that clients never parse the message.
//!
//! The reasons, part of the v1 contract (listed in the proto's header too):
//! `INVALID_ARGUMENT`, `NOT_FOUND`, `JOB_NOT_FOUND`, `ALREADY_EXISTS`, `PERMISSION_DENIED`,
//! `FAILED_PRECONDITION`, `CORRUPT_JOB_DATA`, `REGISTRY_UNAVAILABLE`, `UNAVAILABLE`.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::coordination::CoordError;
use crate::ops::jobs::AdminError;

/// The `ErrorInfo.domain` of every error this sidecar returns.
pub const ERROR_DOMAIN: &str = "shardcar.v1";

/// A status with its `ErrorInfo` and, when `field` is given, a `BadRequest` violation.
fn rich(code: Code, reason: &str, message: String, field: Option<(&str, &str)>) -> Status {
    let mut details = ErrorDetails::new();
    details.set_error_info(reason, ERROR_DOMAIN, HashMap::new());
    if let Some((field, description)) = field {
        details.add_bad_request_violation(field, description);
    }
    Status::with_error_details(code, message, details)
}

impl From<CoordError> for Status {
    fn from(e: CoordError) -> Status {
        let (code, reason, field) = match &e {
            CoordError::InvalidArgument { field, message } => (
                Code::InvalidArgument,
                "INVALID_ARGUMENT",
                Some((field.as_str(), message.as_str())),
            ),
            CoordError::NotFound(_) => (Code::NotFound, "NOT_FOUND", None),
            CoordError::AlreadyExists(_) => (Code::AlreadyExists, "ALREADY_EXISTS", None),
            CoordError::PermissionDenied(_) => (Code::PermissionDenied, "PERMISSION_DENIED", None),
            CoordError::FailedPrecondition(_) => {
                (Code::FailedPrecondition, "FAILED_PRECONDITION", None)
            }
            CoordError::Registry(_) => (Code::Unavailable, "REGISTRY_UNAVAILABLE", None),
            CoordError::Unavailable(_) => (Code::Unavailable, "UNAVAILABLE", None),
        };
        rich(code, reason, e.to_string(), field)
    }
}

impl From<AdminError> for Status {
    fn from(e: AdminError) -> Status {
        let (code, reason, field) = match &e {
            AdminError::JobNotFound(_) => (Code::NotFound, "JOB_NOT_FOUND", None),
            AdminError::NotFound(_) => (Code::NotFound, "NOT_FOUND", None),
            AdminError::InvalidArgument { field, message } => (
                Code::InvalidArgument,
                "INVALID_ARGUMENT",
                Some((field.as_str(), message.as_str())),
            ),
            AdminError::FailedPrecondition(_) => {
                (Code::FailedPrecondition, "FAILED_PRECONDITION", None)
            }
            AdminError::Corrupt { .. } => (Code::FailedPrecondition, "CORRUPT_JOB_DATA", None),
            AdminError::Registry(_) => (Code::Unavailable, "REGISTRY_UNAVAILABLE", None),
        };
        rich(code, reason, e.to_string(), field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_argument_names_its_field_in_a_bad_request() {
        let status = Status::from(CoordError::InvalidArgument {
            field: "config.cron".into(),
            message: "\"0 0\" is not a Quartz cron expression".into(),
        });
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(
            status.message().contains("config.cron"),
            "{}",
            status.message()
        );
        let details = status.get_error_details();
        let info = details.error_info().expect("ErrorInfo");
        assert_eq!(
            (info.reason.as_str(), info.domain.as_str()),
            ("INVALID_ARGUMENT", ERROR_DOMAIN)
        );
        let violations = &details.bad_request().expect("BadRequest").field_violations;
        assert_eq!(violations.len(), 1);
        assert_eq!(violations[0].field, "config.cron");
        assert!(violations[0].description.contains("Quartz"));
    }

    #[test]
    fn every_error_carries_a_reason_and_only_bad_input_a_bad_request() {
        let cases = [
            (Status::from(CoordError::NotFound("x".into())), "NOT_FOUND"),
            (
                Status::from(CoordError::AlreadyExists("x".into())),
                "ALREADY_EXISTS",
            ),
            (
                Status::from(CoordError::PermissionDenied("x".into())),
                "PERMISSION_DENIED",
            ),
            (
                Status::from(CoordError::FailedPrecondition("x".into())),
                "FAILED_PRECONDITION",
            ),
            (
                Status::from(CoordError::Unavailable("x".into())),
                "UNAVAILABLE",
            ),
            (
                Status::from(AdminError::JobNotFound("orders".into())),
                "JOB_NOT_FOUND",
            ),
            (
                Status::from(AdminError::Corrupt {
                    job: "orders".into(),
                    message: "bad yaml".into(),
                }),
                "CORRUPT_JOB_DATA",
            ),
        ];
        for (status, reason) in cases {
            let details = status.get_error_details();
            assert_eq!(
                details.error_info().map(|i| i.reason.as_str()),
                Some(reason)
            );
            assert!(details.bad_request().is_none(), "{reason}");
        }
    }
}
