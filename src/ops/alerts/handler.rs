//! A job's error handler read from its `jobErrorHandlerType` and `props`, with ElasticJob
//! 3.0.4's prop names, defaults and required props (each handler's `*PropertiesConstants` and
//! `*JobErrorHandlerPropertiesValidator`), plus shardcar's own WEBHOOK. What each prop means is
//! in the [module docs](super).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use lettre::message::Mailbox;
use reqwest::Url;

/// The handler ElasticJob uses when `jobErrorHandlerType` is unset or empty
/// (`JobErrorHandlerFactory.DEFAULT_HANDLER`).
pub const DEFAULT_TYPE: &str = "LOG";
/// Every type, as `jobErrorHandlerType` spells it (upper case, as ElasticJob looks them up).
pub const TYPES: [&str; 7] = [
    "LOG", "IGNORE", "THROW", "EMAIL", "WECHAT", "DINGTALK", "WEBHOOK",
];
/// ElasticJob's subject when `email.subject` is unset.
pub const DEFAULT_SUBJECT: &str = "ElasticJob error message";
/// ElasticJob's defaults for the robots' HTTP timeouts (WeChat's and DingTalk's
/// `DEFAULT_CONNECT_TIMEOUT_MILLISECONDS`, `DEFAULT_READ_TIMEOUT_MILLISECONDS`); WEBHOOK's too.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(3000);
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_millis(5000);

/// A bad `jobErrorHandlerType` or handler prop, named as the job's config names it:
/// `jobErrorHandlerType` for the type, `props["KEY"]` for a prop (e.g.
/// `props["dingtalk.webhook"]`). The message says what is wrong and never repeats a password,
/// secret or token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {message}")]
pub struct HandlerError {
    pub field: String,
    pub message: String,
}

impl HandlerError {
    /// The field as the wire `JobConfig` names it: `config.job_error_handler_type`, or
    /// `config.props["KEY"]`.
    pub fn config_field(&self) -> String {
        match self.field.strip_prefix("props") {
            Some(key) => format!("config.props{key}"),
            None => "config.job_error_handler_type".to_string(),
        }
    }
}

/// How one job's failures are reported: parsed once from its config with
/// [`ErrorHandler::parse`], then handed with each failure to
/// [`Alerts::report`](super::Alerts::report).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorHandler {
    /// An error line in the sidecar's log (ElasticJob's default).
    Log,
    /// Nothing.
    Ignore,
    /// ElasticJob throws to the job's caller; a sidecar has none, so it logs as [`Log`] does.
    ///
    /// [`Log`]: ErrorHandler::Log
    Throw,
    Email(EmailSettings),
    Wechat(WechatSettings),
    Dingtalk(DingtalkSettings),
    Webhook(WebhookSettings),
}

/// The EMAIL handler's `email.*` props.
#[derive(Clone, PartialEq, Eq)]
pub struct EmailSettings {
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) username: String,
    pub(super) password: String,
    /// Implicit TLS from the first byte (SMTPS); otherwise STARTTLS when the server offers it.
    pub(super) use_ssl: bool,
    /// `email.ssl.trust` names the host (or is `*`): its certificate is not checked.
    pub(super) trust_host: bool,
    pub(super) subject: String,
    pub(super) from: Mailbox,
    pub(super) to: Vec<Mailbox>,
    pub(super) cc: Vec<Mailbox>,
    pub(super) bcc: Vec<Mailbox>,
    /// Log each step of the SMTP conversation (JavaMail's `mail.debug`).
    pub(super) debug: bool,
}

/// The WECHAT handler's `wechat.*` props.
#[derive(Clone, PartialEq, Eq)]
pub struct WechatSettings {
    pub(super) webhook: Url,
    pub(super) timeouts: HttpTimeouts,
}

/// The DINGTALK handler's `dingtalk.*` props.
#[derive(Clone, PartialEq, Eq)]
pub struct DingtalkSettings {
    pub(super) webhook: Url,
    pub(super) keyword: Option<String>,
    pub(super) secret: Option<String>,
    pub(super) timeouts: HttpTimeouts,
}

/// The WEBHOOK handler's `webhook.*` props.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    pub(super) url: Url,
    pub(super) token: Option<String>,
    pub(super) timeouts: HttpTimeouts,
}

/// An HTTP handler's `*.connectTimeoutMilliseconds` and `*.readTimeoutMilliseconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HttpTimeouts {
    pub connect: Duration,
    pub read: Duration,
}

impl ErrorHandler {
    /// Reads the handler of a job from its `jobErrorHandlerType` (unset or empty: LOG) and its
    /// `props`, checking the props that handler uses (and only those): the ones ElasticJob
    /// requires, numbers that must be positive, URLs that must be http(s), addresses that must
    /// be mail addresses.
    ///
    /// # Errors
    /// [`HandlerError`] naming the field: an unknown type, a required prop missing (or empty),
    /// a bad value.
    pub fn parse(
        kind: Option<&str>,
        props: &BTreeMap<String, String>,
    ) -> Result<ErrorHandler, HandlerError> {
        let props = Props(props);
        match kind.filter(|k| !k.is_empty()).unwrap_or(DEFAULT_TYPE) {
            "LOG" => Ok(ErrorHandler::Log),
            "IGNORE" => Ok(ErrorHandler::Ignore),
            "THROW" => Ok(ErrorHandler::Throw),
            "EMAIL" => email(&props).map(ErrorHandler::Email),
            "WECHAT" => Ok(ErrorHandler::Wechat(WechatSettings {
                webhook: props.url("wechat.webhook", "WECHAT")?,
                timeouts: props.timeouts("wechat")?,
            })),
            "DINGTALK" => Ok(ErrorHandler::Dingtalk(DingtalkSettings {
                webhook: props.url("dingtalk.webhook", "DINGTALK")?,
                keyword: props.optional("dingtalk.keyword"),
                secret: props.optional("dingtalk.secret"),
                timeouts: props.timeouts("dingtalk")?,
            })),
            "WEBHOOK" => Ok(ErrorHandler::Webhook(WebhookSettings {
                url: props.url("webhook.url", "WEBHOOK")?,
                token: props.optional("webhook.token"),
                timeouts: props.timeouts("webhook")?,
            })),
            other => Err(HandlerError {
                field: "jobErrorHandlerType".into(),
                message: format!(
                    "{other:?} is not an error handler type: use one of {} (as written, in upper \
                     case)",
                    TYPES.join(", ")
                ),
            }),
        }
    }

    /// The type as `jobErrorHandlerType` spells it (`LOG` for the default); the `handler`
    /// label of the alert metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ErrorHandler::Log => "LOG",
            ErrorHandler::Ignore => "IGNORE",
            ErrorHandler::Throw => "THROW",
            ErrorHandler::Email(_) => "EMAIL",
            ErrorHandler::Wechat(_) => "WECHAT",
            ErrorHandler::Dingtalk(_) => "DINGTALK",
            ErrorHandler::Webhook(_) => "WEBHOOK",
        }
    }

    /// Whether a failure is sent somewhere (by the alerts task) rather than logged or ignored
    /// where it is reported.
    pub fn sends(&self) -> bool {
        matches!(
            self,
            ErrorHandler::Email(_)
                | ErrorHandler::Wechat(_)
                | ErrorHandler::Dingtalk(_)
                | ErrorHandler::Webhook(_)
        )
    }
}

fn email(props: &Props) -> Result<EmailSettings, HandlerError> {
    let host = props.required("email.host", "EMAIL")?.trim().to_string();
    let port_text = props.required("email.port", "EMAIL")?;
    let port = match port_text.parse::<i64>() {
        Ok(p) if (1..=65535).contains(&p) => p as u16,
        _ => {
            return Err(prop_error(
                "email.port",
                format!("{port_text:?} must be a port number from 1 to 65535"),
            ))
        }
    };
    // ElasticJob requires both; an empty one is taken as given (the login is skipped when the
    // username is empty).
    let username = props.present("email.username", "EMAIL")?;
    let password = props.present("email.password", "EMAIL")?;
    let trust = props.optional("email.ssl.trust").unwrap_or_default();
    let trust_host = trust
        .split_whitespace()
        .any(|h| h == "*" || h.eq_ignore_ascii_case(&host));
    let from_text = props.required("email.from", "EMAIL")?;
    let from = mailbox("email.from", from_text.trim())?;
    let to = mailboxes(props, "email.to")?;
    if to.is_empty() {
        return Err(prop_error(
            "email.to",
            "is required by the EMAIL error handler (one address or several, separated by commas)",
        ));
    }
    Ok(EmailSettings {
        host,
        port,
        username,
        password,
        use_ssl: props.boolean("email.useSsl", true)?,
        trust_host,
        subject: props
            .0
            .get("email.subject")
            .cloned()
            .unwrap_or_else(|| DEFAULT_SUBJECT.to_string()),
        from,
        to,
        cc: mailboxes(props, "email.cc")?,
        bcc: mailboxes(props, "email.bcc")?,
        debug: props.boolean("email.debug", false)?,
    })
}

fn mailbox(key: &str, text: &str) -> Result<Mailbox, HandlerError> {
    Mailbox::from_str(text)
        .map_err(|e| prop_error(key, format!("{text:?} is not a mail address: {e}")))
}

/// A comma-separated list of addresses (ElasticJob splits `email.to` on commas and takes
/// `email.cc` and `email.bcc` as one address each; a list is accepted in all three).
fn mailboxes(props: &Props, key: &str) -> Result<Vec<Mailbox>, HandlerError> {
    let Some(text) = props.0.get(key) else {
        return Ok(Vec::new());
    };
    text.split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| mailbox(key, a))
        .collect()
}

fn prop_error(key: &str, message: impl Into<String>) -> HandlerError {
    HandlerError {
        field: format!("props[\"{key}\"]"),
        message: message.into(),
    }
}

/// A job's props, read as ElasticJob's handlers read them.
struct Props<'a>(&'a BTreeMap<String, String>);

impl Props<'_> {
    /// A prop that must be there and not empty.
    fn required(&self, key: &str, kind: &str) -> Result<String, HandlerError> {
        match self.0.get(key) {
            Some(v) if !v.trim().is_empty() => Ok(v.clone()),
            _ => Err(prop_error(
                key,
                format!("is required by the {kind} error handler"),
            )),
        }
    }

    /// A prop that must be there, possibly empty (ElasticJob's `validateIsRequired`).
    fn present(&self, key: &str, kind: &str) -> Result<String, HandlerError> {
        self.0
            .get(key)
            .cloned()
            .ok_or_else(|| prop_error(key, format!("is required by the {kind} error handler")))
    }

    /// A prop that may be absent; empty counts as absent (ElasticJob's `isNullOrEmpty`).
    fn optional(&self, key: &str) -> Option<String> {
        self.0.get(key).filter(|v| !v.is_empty()).cloned()
    }

    /// `true` or `false` in any case (Java's `Boolean.parseBoolean` takes anything else as
    /// false; here it is a mistake worth naming).
    fn boolean(&self, key: &str, default: bool) -> Result<bool, HandlerError> {
        match self.0.get(key) {
            None => Ok(default),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(prop_error(key, format!("{v:?} must be true or false"))),
        }
    }

    /// A required http:// or https:// URL with a host.
    fn url(&self, key: &str, kind: &str) -> Result<Url, HandlerError> {
        let text = self.required(key, kind)?;
        let not_http = || {
            prop_error(
                key,
                format!("{:?} must be an http:// or https:// URL", shown(&text)),
            )
        };
        let url = Url::parse(text.trim()).map_err(|_| not_http())?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
            return Err(not_http());
        }
        Ok(url)
    }

    /// `PREFIX.connectTimeoutMilliseconds` and `PREFIX.readTimeoutMilliseconds`, positive
    /// numbers of milliseconds (a Java `int`), 3000 and 5000 when unset.
    fn timeouts(&self, prefix: &str) -> Result<HttpTimeouts, HandlerError> {
        Ok(HttpTimeouts {
            connect: self.millis(
                &format!("{prefix}.connectTimeoutMilliseconds"),
                DEFAULT_CONNECT_TIMEOUT,
            )?,
            read: self.millis(
                &format!("{prefix}.readTimeoutMilliseconds"),
                DEFAULT_READ_TIMEOUT,
            )?,
        })
    }

    /// ElasticJob's `validateIsPositiveInteger`: an integer (Java `int`) above zero.
    fn millis(&self, key: &str, default: Duration) -> Result<Duration, HandlerError> {
        let Some(text) = self.0.get(key) else {
            return Ok(default);
        };
        match text.parse::<i32>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms as u64)),
            Ok(_) => Err(prop_error(key, format!("{text:?} must be positive"))),
            Err(_) => Err(prop_error(
                key,
                format!("{text:?} must be a whole number of milliseconds"),
            )),
        }
    }
}

/// A URL for messages and logs: its query (where the robots' tokens are:
/// `?access_token=`, `?key=`) and any password left out.
pub(super) fn shown(url: &str) -> String {
    let Ok(mut parsed) = Url::parse(url.trim()) else {
        return url.split(['?', '#']).next().unwrap_or_default().to_string();
    };
    if parsed.query().is_some() {
        parsed.set_query(Some("..."));
    }
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some("***"));
    }
    parsed.set_fragment(None);
    parsed.to_string()
}

const HIDDEN: &str = "***";

impl fmt::Debug for EmailSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmailSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("username", &self.username)
            .field("password", &HIDDEN)
            .field("use_ssl", &self.use_ssl)
            .field("trust_host", &self.trust_host)
            .field("subject", &self.subject)
            .field("from", &self.from.to_string())
            .field("to", &self.to.len())
            .field("cc", &self.cc.len())
            .field("bcc", &self.bcc.len())
            .field("debug", &self.debug)
            .finish()
    }
}

impl fmt::Debug for WechatSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WechatSettings")
            .field("webhook", &shown(self.webhook.as_str()))
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

impl fmt::Debug for DingtalkSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DingtalkSettings")
            .field("webhook", &shown(self.webhook.as_str()))
            .field("keyword", &self.keyword)
            .field("secret", &self.secret.as_ref().map(|_| HIDDEN))
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

impl fmt::Debug for WebhookSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookSettings")
            .field("url", &shown(self.url.as_str()))
            .field("token", &self.token.as_ref().map(|_| HIDDEN))
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

#[cfg(test)]
mod tests;
