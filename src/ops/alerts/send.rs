//! Sending one alert, once: an HTTP POST to a robot or a webhook, or a mail over SMTP. Each
//! send is bounded by its timeouts; what went wrong comes back as a line for the log, without
//! the URL's query (where the robots' tokens are) or any password.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use lettre::message::header::ContentType;
use lettre::message::{MultiPart, SinglePart};
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::Message;
use reqwest::Url;
use serde_json::Value;

use super::handler::{shown, EmailSettings, ErrorHandler, HttpTimeouts};
use super::{message, Failure};

/// How long connecting to an SMTP server may take, and the whole conversation (ElasticJob sets
/// no timeout on its mail session; JavaMail's default is to wait for ever).
pub(super) const SMTP_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub(super) const SMTP_TIMEOUT: Duration = Duration::from_secs(30);

/// One HTTP client per pair of timeouts the jobs ask for (reqwest sets them per client), kept
/// by the alerts task: a client holds its connection pool and TLS configuration.
#[derive(Default)]
pub(super) struct HttpClients(HashMap<HttpTimeouts, reqwest::Client>);

impl HttpClients {
    /// The client for `handler` if it sends over HTTP.
    pub(super) fn for_handler(
        &mut self,
        handler: &ErrorHandler,
    ) -> Result<Option<reqwest::Client>, String> {
        let timeouts = match handler {
            ErrorHandler::Wechat(s) => s.timeouts,
            ErrorHandler::Dingtalk(s) => s.timeouts,
            ErrorHandler::Webhook(s) => s.timeouts,
            _ => return Ok(None),
        };
        if let Some(client) = self.0.get(&timeouts) {
            return Ok(Some(client.clone()));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(timeouts.connect)
            .read_timeout(timeouts.read)
            .user_agent(concat!("shardcar/", env!("CARGO_PKG_VERSION")))
            // A redirect is an answer like any other that is not success, as for ElasticJob's
            // Apache HttpClient, which does not follow a POST's redirect.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {}", describe(e)))?;
        self.0.insert(timeouts, client.clone());
        Ok(Some(client))
    }
}

/// Sends `failure` through `handler` (one that [sends](ErrorHandler::sends)); `now` is the
/// wall clock at the send, for DingTalk's timestamp and the mail's date.
///
/// # Errors
/// Why it was not sent (not answered in time, refused, a robot's `errcode`).
pub(super) async fn deliver(
    handler: &ErrorHandler,
    failure: &Failure,
    http: Option<reqwest::Client>,
    now: SystemTime,
) -> Result<(), String> {
    let text = message::text(failure);
    let client = || http.clone().ok_or("no HTTP client".to_string());
    match handler {
        ErrorHandler::Wechat(s) => {
            let body = message::robot_body(&text);
            let (status, answer) =
                post(&client()?, s.webhook.clone(), s.timeouts, &body, None).await?;
            message::robot_answer(status, &answer)
        }
        ErrorHandler::Dingtalk(s) => {
            let content = message::dingtalk_content(s.keyword.as_deref(), &text);
            let body = message::robot_body(&content);
            let url = match &s.secret {
                Some(secret) => {
                    let ms = now
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as i64);
                    message::dingtalk_signed_url(&s.webhook, secret, ms)
                }
                None => s.webhook.clone(),
            };
            let (status, answer) = post(&client()?, url, s.timeouts, &body, None).await?;
            message::robot_answer(status, &answer)
        }
        ErrorHandler::Webhook(s) => {
            let body = message::webhook_body(failure);
            let (status, _) = post(
                &client()?,
                s.url.clone(),
                s.timeouts,
                &body,
                s.token.as_deref(),
            )
            .await?;
            if (200..300).contains(&status) {
                Ok(())
            } else {
                Err(format!("unexpected HTTP status {status}"))
            }
        }
        ErrorHandler::Email(s) => {
            match tokio::time::timeout(SMTP_TIMEOUT, mail(s, &text, now)).await {
                Ok(result) => result,
                Err(_) => Err(format!(
                    "the SMTP server {}:{} did not finish within {} s",
                    s.host,
                    s.port,
                    SMTP_TIMEOUT.as_secs()
                )),
            }
        }
        ErrorHandler::Log | ErrorHandler::Ignore | ErrorHandler::Throw => Ok(()),
    }
}

/// POSTs `body` as JSON; the status and, for a 200, the answer's text. The whole exchange is
/// bounded by the connect and read timeouts together, on top of the client's own.
async fn post(
    client: &reqwest::Client,
    url: Url,
    timeouts: HttpTimeouts,
    body: &Value,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    let mut request = client
        .post(url)
        .timeout(timeouts.connect + timeouts.read)
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/json; charset=utf-8",
        )
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.map_err(describe)?;
    let status = response.status().as_u16();
    let text = if status == 200 {
        response.text().await.map_err(describe)?
    } else {
        String::new()
    };
    Ok((status, text))
}

/// A reqwest error with its causes and without its URL (which may carry a token): `error
/// sending request: operation timed out`.
fn describe(e: reqwest::Error) -> String {
    let timed_out = e.is_timeout();
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    if timed_out && !text.contains("timed out") {
        text.push_str(" (timed out)");
    }
    text
}

/// The mail ElasticJob's EMAIL handler sends: from `email.from` to `email.to`, `email.cc` and
/// `email.bcc` (not shown in the headers), subject `email.subject`, one `text/html` part in a
/// `multipart/mixed` body.
pub(super) fn compose(s: &EmailSettings, text: &str, now: SystemTime) -> Result<Message, String> {
    let mut builder = Message::builder()
        .from(s.from.clone())
        .subject(s.subject.clone())
        .date(now);
    for to in &s.to {
        builder = builder.to(to.clone());
    }
    for cc in &s.cc {
        builder = builder.cc(cc.clone());
    }
    for bcc in &s.bcc {
        builder = builder.bcc(bcc.clone());
    }
    builder
        .multipart(
            MultiPart::mixed().singlepart(
                SinglePart::builder()
                    .header(ContentType::TEXT_HTML)
                    .body(message::email_html(text)),
            ),
        )
        .map_err(|e| format!("cannot build the mail: {e}"))
}

/// One SMTP conversation: implicit TLS with `email.useSsl` (the default), otherwise STARTTLS
/// when the server offers it; a login (PLAIN or LOGIN) when the server offers one and
/// `email.username` is not empty, as JavaMail does with `mail.smtp.auth`; then the mail.
async fn mail(s: &EmailSettings, text: &str, now: SystemTime) -> Result<(), String> {
    let mail = compose(s, text, now)?;
    let envelope = mail.envelope().clone();
    let bytes = mail.formatted();
    let server = format!("{}:{}", s.host, s.port);
    let smtp = |step: &str, e: lettre::transport::smtp::Error| format!("{step} {server}: {e}");
    let tls = TlsParameters::builder(s.host.clone())
        .dangerous_accept_invalid_certs(s.trust_host)
        .dangerous_accept_invalid_hostnames(s.trust_host)
        .build_rustls()
        .map_err(|e| smtp("cannot set up TLS for", e))?;
    let hello = ClientId::default();
    let mut conn = AsyncSmtpConnection::connect_tokio1(
        (s.host.as_str(), s.port),
        Some(SMTP_CONNECT_TIMEOUT),
        &hello,
        s.use_ssl.then(|| tls.clone()),
        None,
    )
    .await
    .map_err(|e| smtp("cannot connect to", e))?;
    if s.debug {
        tracing::info!(server = %server, tls = s.use_ssl, info = %conn.server_info(),
                       "SMTP: connected");
    }
    if !s.use_ssl && conn.can_starttls() {
        conn.starttls(tls, &hello)
            .await
            .map_err(|e| smtp("STARTTLS with", e))?;
        if s.debug {
            tracing::info!(server = %server, info = %conn.server_info(), "SMTP: STARTTLS done");
        }
    }
    let mechanism = conn
        .server_info()
        .get_auth_mechanism(&[Mechanism::Plain, Mechanism::Login]);
    if mechanism.is_none() && s.debug {
        tracing::info!(server = %server, "SMTP: no login offered (PLAIN or LOGIN): none made");
    }
    if let (Some(mechanism), false) = (mechanism, s.username.is_empty()) {
        conn.auth(
            &[mechanism],
            &Credentials::new(s.username.clone(), s.password.clone()),
        )
        .await
        .map_err(|e| smtp("login refused by", e))?;
        if s.debug {
            tracing::info!(server = %server, user = %s.username, ?mechanism, "SMTP: logged in");
        }
    }
    let response = conn
        .send(&envelope, &bytes)
        .await
        .map_err(|e| smtp("mail refused by", e))?;
    if s.debug {
        tracing::info!(server = %server, from = ?envelope.from(), to = ?envelope.to(),
                       answer = ?response.message().collect::<Vec<_>>(), "SMTP: mail sent");
    }
    let _ = conn.quit().await;
    Ok(())
}

/// What a handler's destination is, for logs: a robot's or webhook's URL without its query,
/// the SMTP server.
pub(super) fn destination(handler: &ErrorHandler) -> String {
    match handler {
        ErrorHandler::Wechat(s) => shown(s.webhook.as_str()),
        ErrorHandler::Dingtalk(s) => shown(s.webhook.as_str()),
        ErrorHandler::Webhook(s) => shown(s.url.as_str()),
        ErrorHandler::Email(s) => format!("smtp://{}:{}", s.host, s.port),
        ErrorHandler::Log | ErrorHandler::Ignore | ErrorHandler::Throw => String::new(),
    }
}
