//! The connection to a sidecar's Admin API: which sidecar (`--target`), with which token, over
//! TCP or a Unix socket, each request with its deadline.

use std::collections::HashMap;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Request, Status};

use super::CtlError;
use crate::config::DEFAULT_LISTEN;
use crate::proto::admin_service_client::AdminServiceClient;

/// How long to wait for the sidecar to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take (`job rm` waits for instances to go).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

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
pub struct WithToken(pub(super) Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

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

/// `message` as a request with its deadline.
pub(super) fn request<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(REQUEST_TIMEOUT);
    request
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
