//! A failed item reported through its job's error handler, as ElasticJob-Lite 3.0.4 reports
//! one: the handler is chosen by the job config's `jobErrorHandlerType` and set up by its
//! `props`, with ElasticJob's type names, prop names, defaults and message texts (read from its
//! `elasticjob-ecosystem/elasticjob-error-handler` modules at the 3.0.4 tag), so a job moved
//! from ElasticJob keeps its alerts. WEBHOOK is shardcar's own.
//!
//! This module owns the handlers ([`ErrorHandler::parse`]), what they send, and the one task
//! that sends ([`Alerts`]); who reports which failure, and when, is the job's business.
//!
//! # Handlers and their props
//!
//! | `jobErrorHandlerType` | what it does |
//! | --- | --- |
//! | `LOG` (also when unset or empty) | an error line: `Job 'JOB' exception occur in job processing`, with the failure's fields |
//! | `THROW` | ElasticJob throws to the job's caller; a sidecar has none: logs as LOG |
//! | `IGNORE` | nothing |
//! | `EMAIL` | a mail over SMTP |
//! | `WECHAT` | a text message to a WeCom (WeChat Work) group robot |
//! | `DINGTALK` | a text message to a DingTalk group robot |
//! | `WEBHOOK` | a JSON POST of the failure (shardcar's own) |
//!
//! Any other type is refused. Only the chosen handler's props are read and checked.
//!
//! EMAIL (`EmailPropertiesConstants`, `EmailJobErrorHandlerPropertiesValidator`):
//! `email.host` (required), `email.port` (required, 1 to 65535), `email.username` and
//! `email.password` (required; the login happens when the server offers AUTH PLAIN or LOGIN
//! and the username is not empty, as JavaMail does), `email.useSsl` (`true`: implicit TLS from
//! the first byte, usually port 465; `false`: STARTTLS when the server offers it, usually port
//! 587 or 25), `email.ssl.trust` (`*` or a space-separated list of hosts whose certificate is
//! not checked, as JavaMail's `mail.smtp.ssl.trust`; unset), `email.subject` (`ElasticJob
//! error message`), `email.from` (required), `email.to` (required; addresses separated by
//! commas), `email.cc`, `email.bcc` (unset; here lists too, one address in ElasticJob),
//! `email.debug` (`false`; `true` logs each step of the SMTP conversation). `email.useSsl` and
//! `email.debug` take `true` or `false` in any case; Java would read any other word as false,
//! here it is refused. ElasticJob has no `email.protocol` prop (its transport is always
//! `smtp`). The mail is a `multipart/mixed` with one `text/html; charset=utf-8` part holding
//! the text below, HTML-escaped, line breaks as `<br>`. Connecting may take 10 s and the whole
//! conversation 30 s (ElasticJob sets no timeout).
//!
//! WECHAT (`WechatPropertiesConstants`): `wechat.webhook` (required, an http(s) URL, e.g.
//! `https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=KEY`),
//! `wechat.connectTimeoutMilliseconds` (3000), `wechat.readTimeoutMilliseconds` (5000). It
//! POSTs `{"msgtype":"text","text":{"content":TEXT}}`.
//!
//! DINGTALK (`DingtalkPropertiesConstants`): `dingtalk.webhook` (required, an http(s) URL, e.g.
//! `https://oapi.dingtalk.com/robot/send?access_token=TOKEN`), `dingtalk.keyword` (unset; put
//! right before the text, as the robot's "custom keywords" security setting wants),
//! `dingtalk.secret` (unset; with it the URL gets `timestamp`, the milliseconds since the
//! epoch at the send, and `sign`, the base64 of HMAC-SHA256 keyed by the secret over
//! `timestamp + "\n" + secret`, both URL-encoded: the "additional signature" setting),
//! `dingtalk.connectTimeoutMilliseconds` (3000), `dingtalk.readTimeoutMilliseconds` (5000).
//! It POSTs `{"msgtype":"text","text":{"content":KEYWORD+TEXT}}`.
//!
//! WEBHOOK: `webhook.url` (required, an http(s) URL), `webhook.token` (unset; with it the
//! request carries `Authorization: Bearer TOKEN`), `webhook.connectTimeoutMilliseconds`
//! (3000), `webhook.readTimeoutMilliseconds` (5000). It POSTs, as
//! `application/json; charset=utf-8`:
//!
//! ```json
//! {"jobName": "orders", "item": 1, "executionId": "…", "taskId": "…", "instanceId": "…",
//!  "attempt": 0, "error": "the worker's error", "time": "2025-01-31T08:00:00.250Z",
//!  "text": "Job 'orders' exception occur in job processing, caused by …"}
//! ```
//!
//! `attempt` is 0 for an item's first run, 1 for its first retry; `time` is when the failure
//! was reported (RFC 3339, UTC, milliseconds); `text` is the text below, so a receiver that
//! wants only a `text` field (Slack's incoming webhooks, Mattermost) can take the body as it
//! is. Any 2xx answer is success. ElasticJob processes do not know WEBHOOK: an ElasticJob
//! process running the same job fails to load its handler, so use it for jobs that only
//! shardcar workers run.
//!
//! The robots' answers are read as ElasticJob reads them: HTTP 200 with `errcode` 0 is
//! success; anything else is a failed send, logged with its `errmsg`. Timeouts are positive
//! whole milliseconds; besides the connect and read timeouts a whole request is bounded by
//! their sum. HTTP requests honour the usual `HTTPS_PROXY`/`NO_PROXY` variables.
//!
//! # The text
//!
//! ElasticJob's handlers send `Job '%s' exception occur in job processing, caused by %s`, the
//! job's name and the exception's stack trace. shardcar sends the same sentence with the
//! worker's error text where the stack trace was, then, on a line of its own, what it knows
//! besides: `item 1, retry 2, execution E, task T, instance I, at 2025-01-31T08:00:00.250Z`
//! (`retry N` only for a retry, that is an attempt above 0).
//!
//! # Field names in errors
//!
//! [`HandlerError::field`] is `jobErrorHandlerType` for the type and `props["KEY"]` for a prop,
//! e.g. `props["dingtalk.webhook"]`.
//!
//! # Sending
//!
//! [`Alerts::report`] never waits: LOG and THROW log where they are called, IGNORE does
//! nothing, and the other handlers' failures go into a bounded queue ([`QUEUE`]) that one task
//! owns; when it is full the failure is dropped, logged (at each power of two) and counted.
//! The task sends up to [`IN_FLIGHT`] at a time, each once: a send that fails or times out is
//! logged and counted and not tried again (the next failure is the next alert). When the
//! sidecar stops, what is queued has [`FLUSH`] to go out; the rest is dropped. Metrics:
//! `shardcar_alerts_sent_total{handler}`, `shardcar_alerts_failed_total{handler}`,
//! `shardcar_alerts_dropped_total`.

mod handler;
mod message;
mod send;
mod task;

use std::time::SystemTime;

pub use handler::{
    DingtalkSettings, EmailSettings, ErrorHandler, HandlerError, HttpTimeouts, WebhookSettings,
    WechatSettings, DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT, DEFAULT_SUBJECT, DEFAULT_TYPE,
    TYPES,
};
pub use task::{Alerts, FLUSH, IN_FLIGHT, QUEUE, SENDING};

/// A failed item, as its handler reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub job: String,
    pub item: i32,
    pub execution_id: String,
    /// ElasticJob's task id of the execution.
    pub task_id: String,
    /// The instance that ran it.
    pub instance_id: String,
    /// 0 for the item's first run, 1 for its first retry, and so on.
    pub attempt: u32,
    /// The worker's error (or why the sidecar ended the run, e.g. its timeout).
    pub error: String,
    /// When the failure was reported.
    pub time: SystemTime,
}

impl Failure {
    /// The text the EMAIL, WECHAT and DINGTALK handlers send (see [the module docs](self)).
    pub fn text(&self) -> String {
        message::text(self)
    }
}
