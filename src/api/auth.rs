//! The admin token on the gRPC side: an interceptor in front of the Admin service that refuses a
//! call without the token (or with another) as `UNAUTHENTICATED`, before the call reaches the
//! service, so nothing is read or changed. The Worker API, health and reflection are not behind
//! it. The policy itself is [`crate::access`].

use std::sync::Arc;

use tonic::{Request, Status};

use crate::access::Access;

/// The interceptor of the Admin service for `access`.
pub fn admin_interceptor(
    access: Arc<Access>,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |request: Request<()>| {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        match access.check_bearer(header) {
            Ok(()) => Ok(request),
            Err(denied) => {
                tracing::warn!(reason = ?denied, "Admin API call refused: no valid admin token");
                Err(Status::unauthenticated(denied.message()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::AdminToken;

    #[test]
    fn calls_without_the_token_are_unauthenticated() {
        let access = Arc::new(Access {
            token: Some(AdminToken::new("0123456789abcdef-secret").unwrap()),
            read_only_open: false,
        });
        let mut check = admin_interceptor(access);
        let status = check(Request::new(())).unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated);
        let mut wrong = Request::new(());
        wrong.metadata_mut().insert(
            "authorization",
            "Bearer nope-nope-nope-nope".parse().unwrap(),
        );
        assert_eq!(
            check(wrong).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        let mut right = Request::new(());
        right.metadata_mut().insert(
            "authorization",
            "Bearer 0123456789abcdef-secret".parse().unwrap(),
        );
        assert!(check(right).is_ok());
        let mut open = admin_interceptor(Arc::new(Access::default()));
        assert!(open(Request::new(())).is_ok());
    }
}
