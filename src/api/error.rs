//! How coordination errors reach a gRPC client: each as the status code a client can act on,
//! with the coordinator's message (which names what is wrong and how to fix it).

use tonic::{Code, Status};

use crate::coordination::CoordError;
use crate::ops::jobs::AdminError;

impl From<CoordError> for Status {
    fn from(e: CoordError) -> Status {
        let code = match &e {
            CoordError::NotFound(_) => Code::NotFound,
            CoordError::AlreadyExists(_) => Code::AlreadyExists,
            CoordError::PermissionDenied(_) => Code::PermissionDenied,
            CoordError::FailedPrecondition(_) => Code::FailedPrecondition,
            CoordError::InvalidArgument { .. } => Code::InvalidArgument,
            CoordError::Registry(_) | CoordError::Unavailable(_) => Code::Unavailable,
        };
        Status::new(code, e.to_string())
    }
}

impl From<AdminError> for Status {
    fn from(e: AdminError) -> Status {
        let code = match &e {
            AdminError::JobNotFound(_) | AdminError::NotFound(_) => Code::NotFound,
            AdminError::InvalidArgument { .. } => Code::InvalidArgument,
            AdminError::FailedPrecondition(_) | AdminError::Corrupt { .. } => {
                Code::FailedPrecondition
            }
            AdminError::Registry(_) => Code::Unavailable,
        };
        Status::new(code, e.to_string())
    }
}
