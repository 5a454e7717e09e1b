//! What each handler sends, built without I/O: the text of a failure in ElasticJob's words, the
//! robots' JSON, DingTalk's signed URL, the mail's HTML and the WEBHOOK body. The clock's
//! readings (DingTalk's timestamp) come in as arguments.

use base64::Engine as _;
use chrono::SecondsFormat;
use hmac::{Hmac, KeyInit, Mac};
use reqwest::Url;
use serde_json::{json, Value};
use sha2::Sha256;

use super::Failure;

/// ElasticJob's sentence for a failure in a job (`LogJobErrorHandler`), which every handler
/// starts its message with.
pub(super) fn headline(job: &str) -> String {
    format!("Job '{job}' exception occur in job processing")
}

/// The text EMAIL, WECHAT, DINGTALK (after its keyword) and WEBHOOK (its `text`) send:
/// ElasticJob's template `Job '%s' exception occur in job processing, caused by %s` with the
/// worker's error where Java puts the exception's stack trace, then one line of what shardcar
/// knows besides (see the [module docs](super)).
pub(super) fn text(f: &Failure) -> String {
    let retry = if f.attempt > 0 {
        format!(", retry {}", f.attempt)
    } else {
        String::new()
    };
    format!(
        "{}, caused by {}\nitem {}{retry}, execution {}, task {}, instance {}, at {}",
        headline(&f.job),
        f.error,
        f.item,
        f.execution_id,
        f.task_id,
        f.instance_id,
        rfc3339(f.time),
    )
}

/// A time as RFC 3339 in UTC with milliseconds: `2025-01-31T08:00:00.250Z`.
pub(super) fn rfc3339(time: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The robots' text message, as ElasticJob's WeChat and DingTalk handlers send it:
/// `{"msgtype":"text","text":{"content":CONTENT}}`.
pub(super) fn robot_body(content: &str) -> Value {
    json!({"msgtype": "text", "text": {"content": content}})
}

/// DingTalk's content: the keyword (a robot's "custom keyword" security setting wants it in
/// every message) right before the text, with nothing between, as ElasticJob writes it.
pub(super) fn dingtalk_content(keyword: Option<&str>, text: &str) -> String {
    format!("{}{text}", keyword.unwrap_or_default())
}

/// The webhook with DingTalk's signature appended (its "additional signature" security
/// setting): `timestamp` (milliseconds since the epoch, within an hour of DingTalk's clock)
/// and `sign`, the base64 of HMAC-SHA256 keyed by the secret over `timestamp + "\n" + secret`,
/// both URL-encoded as query parameters.
pub(super) fn dingtalk_signed_url(webhook: &Url, secret: &str, timestamp_ms: i64) -> Url {
    let mut url = webhook.clone();
    url.query_pairs_mut()
        .append_pair("timestamp", &timestamp_ms.to_string())
        .append_pair("sign", &dingtalk_sign(secret, timestamp_ms));
    url
}

/// DingTalk's `sign` before URL encoding.
pub(super) fn dingtalk_sign(secret: &str, timestamp_ms: i64) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(format!("{timestamp_ms}\n{secret}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// The mail's one `text/html` part: the text with `&`, `<` and `>` escaped (the error comes
/// from a worker) and its line breaks as `<br>`.
pub(super) fn email_html(text: &str) -> String {
    let mut html = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => html.push_str("&amp;"),
            '<' => html.push_str("&lt;"),
            '>' => html.push_str("&gt;"),
            '\n' => html.push_str("<br>\n"),
            c => html.push(c),
        }
    }
    html
}

/// The WEBHOOK handler's JSON body (documented in the [module docs](super)).
pub(super) fn webhook_body(f: &Failure) -> Value {
    json!({
        "jobName": f.job,
        "item": f.item,
        "executionId": f.execution_id,
        "taskId": f.task_id,
        "instanceId": f.instance_id,
        "attempt": f.attempt,
        "error": f.error,
        "time": rfc3339(f.time),
        "text": text(f),
    })
}

/// Whether a robot's answer says the message was taken: HTTP 200 with `errcode` 0 (a number
/// or, as ElasticJob also accepts, the string "0"); otherwise why not.
pub(super) fn robot_answer(status: u16, body: &str) -> Result<(), String> {
    if status != 200 {
        return Err(format!("unexpected HTTP status {status}"));
    }
    let answer: Value = serde_json::from_str(body)
        .map_err(|_| format!("the answer is not JSON: {:?}", clip(body)))?;
    let ok = match &answer["errcode"] {
        Value::Number(n) => n.as_i64() == Some(0),
        Value::String(s) => s == "0",
        _ => return Err(format!("the answer has no errcode: {}", clip(body))),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "errcode {}: {}",
            answer["errcode"],
            answer["errmsg"].as_str().unwrap_or_default()
        ))
    }
}

/// At most 200 characters of a body, for messages.
fn clip(body: &str) -> &str {
    match body.char_indices().nth(200) {
        Some((i, _)) => &body[..i],
        None => body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn failure(attempt: u32) -> Failure {
        Failure {
            job: "orders".into(),
            item: 1,
            execution_id: "e-7".into(),
            task_id: "orders@-@0,1@-@READY@-@10.0.0.1@-@42".into(),
            instance_id: "10.0.0.1@-@42".into(),
            attempt,
            error: "java.lang.IllegalStateException: no stock".into(),
            time: UNIX_EPOCH + Duration::from_millis(1_700_000_000_250),
        }
    }

    #[test]
    fn the_text_is_elasticjobs_sentence_then_what_shardcar_knows() {
        assert_eq!(
            text(&failure(0)),
            "Job 'orders' exception occur in job processing, caused by \
             java.lang.IllegalStateException: no stock\n\
             item 1, execution e-7, task orders@-@0,1@-@READY@-@10.0.0.1@-@42, \
             instance 10.0.0.1@-@42, at 2023-11-14T22:13:20.250Z"
        );
        assert!(text(&failure(2)).contains("\nitem 1, retry 2, execution e-7, "));
    }

    #[test]
    fn robot_bodies_and_dingtalk_keyword() {
        assert_eq!(
            robot_body("hi").to_string(),
            r#"{"msgtype":"text","text":{"content":"hi"}}"#
        );
        assert_eq!(dingtalk_content(Some("[alert]"), "Job"), "[alert]Job");
        assert_eq!(dingtalk_content(None, "Job"), "Job");
    }

    #[test]
    fn dingtalk_signature_matches_its_documented_recipe() {
        // Computed independently: Python's hmac.new(b"SECabc", b"1700000000011\nSECabc",
        // hashlib.sha256), base64, then urllib.parse.quote_plus (what Java's URLEncoder does).
        assert_eq!(
            dingtalk_sign("SECabc", 1_700_000_000_011),
            "xExLZuBAxaIrop0wGL20/+du634TRY5oq4uQ3Y9B5rw="
        );
        let webhook = Url::parse("https://oapi.dingtalk.com/robot/send?access_token=t0k").unwrap();
        let url = dingtalk_signed_url(&webhook, "SECabc", 1_700_000_000_011);
        assert_eq!(
            url.as_str(),
            "https://oapi.dingtalk.com/robot/send?access_token=t0k&timestamp=1700000000011\
             &sign=xExLZuBAxaIrop0wGL20%2F%2Bdu634TRY5oq4uQ3Y9B5rw%3D"
        );
        // A webhook without a query gets one.
        let bare = Url::parse("http://127.0.0.1:1/robot").unwrap();
        assert!(dingtalk_signed_url(&bare, "s", 1)
            .as_str()
            .starts_with("http://127.0.0.1:1/robot?timestamp=1&sign="));
    }

    #[test]
    fn html_escapes_the_workers_text() {
        assert_eq!(email_html("a <b> & 'c'\nd"), "a &lt;b&gt; &amp; 'c'<br>\nd");
    }

    #[test]
    fn webhook_body_carries_every_field() {
        let body = webhook_body(&failure(1));
        assert_eq!(body["jobName"], "orders");
        assert_eq!(body["item"], 1);
        assert_eq!(body["executionId"], "e-7");
        assert_eq!(body["taskId"], "orders@-@0,1@-@READY@-@10.0.0.1@-@42");
        assert_eq!(body["instanceId"], "10.0.0.1@-@42");
        assert_eq!(body["attempt"], 1);
        assert_eq!(body["error"], "java.lang.IllegalStateException: no stock");
        assert_eq!(body["time"], "2023-11-14T22:13:20.250Z");
        assert_eq!(body["text"], text(&failure(1)));
        assert_eq!(body.as_object().unwrap().len(), 9);
    }

    #[test]
    fn robot_answers() {
        assert_eq!(robot_answer(200, r#"{"errcode":0,"errmsg":"ok"}"#), Ok(()));
        assert_eq!(robot_answer(200, r#"{"errcode":"0"}"#), Ok(()));
        assert_eq!(
            robot_answer(200, r#"{"errcode":310000,"errmsg":"sign not match"}"#),
            Err("errcode 310000: sign not match".into())
        );
        assert_eq!(
            robot_answer(404, ""),
            Err("unexpected HTTP status 404".into())
        );
        assert!(robot_answer(200, "<html>")
            .unwrap_err()
            .starts_with("the answer is not JSON"));
        assert!(robot_answer(200, "{}")
            .unwrap_err()
            .starts_with("the answer has no errcode"));
    }
}
