//! The jobs' error handlers against real receivers: an HTTP server in the test that answers as
//! WeCom's and DingTalk's robots do (checking DingTalk's signature and keyword as its server
//! would) and as a webhook receiver that wants a bearer token; a real SMTP server (aiosmtpd
//! from the repo's `.venv`, run as a process, over implicit TLS and over STARTTLS, with a
//! login); a full queue that drops without waiting; a receiver that never answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::routing::post;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use shardcar::ops::alerts::{Alerts, ErrorHandler, Failure, IN_FLIGHT};
use shardcar::ops::metrics::Metrics;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::*;
use crate::common::eventually;
use crate::common::process::Process;

/// The DingTalk robot's secret and keyword, as set in its security settings.
const SECRET: &str = "SEC0123456789abcdef";
const KEYWORD: &str = "[shardcar]";
/// The webhook receiver's token, and the WeCom robot's key.
const TOKEN: &str = "hook-token-1";
const WECHAT_KEY: &str = "wecom-key";

/// One request the HTTP receiver took.
#[derive(Clone, Debug)]
struct Request {
    path: String,
    query: HashMap<String, String>,
    authorization: Option<String>,
    content_type: Option<String>,
    body: String,
}

impl Request {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

type Requests = Arc<Mutex<Vec<Request>>>;

/// The HTTP receiver: `/cgi-bin/webhook/send` (WeCom), `/robot/send` (DingTalk, signed when
/// the token is `signed`), `/hook` (a webhook), `/hang` (never answers). Every request is
/// kept, answered or not.
async fn http_receiver() -> (SocketAddr, Requests) {
    let requests = Requests::default();
    let keep = |requests: Requests| {
        move |uri: Uri,
              Query(query): Query<HashMap<String, String>>,
              headers: HeaderMap,
              body: String| {
            let requests = requests.clone();
            async move {
                let header = |name: &str| {
                    headers
                        .get(name)
                        .map(|v| v.to_str().unwrap_or_default().to_string())
                };
                let request = Request {
                    path: uri.path().to_string(),
                    query,
                    authorization: header("authorization"),
                    content_type: header("content-type"),
                    body,
                };
                requests.lock().unwrap().push(request.clone());
                answer(&request).await
            }
        }
    };
    let app = axum::Router::new()
        .route("/cgi-bin/webhook/send", post(keep(requests.clone())))
        .route("/robot/send", post(keep(requests.clone())))
        .route("/hook", post(keep(requests.clone())))
        .route("/hang", post(keep(requests.clone())));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", free_port()))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, requests)
}

fn robot(errcode: i64, errmsg: &str) -> (StatusCode, String) {
    (
        StatusCode::OK,
        serde_json::json!({"errcode": errcode, "errmsg": errmsg}).to_string(),
    )
}

/// What each robot (or receiver) answers, checking what its real counterpart checks.
async fn answer(r: &Request) -> (StatusCode, String) {
    match r.path.as_str() {
        "/hang" => std::future::pending().await,
        "/cgi-bin/webhook/send" => {
            if r.query.get("key").map(String::as_str) != Some(WECHAT_KEY) {
                return robot(93000, "invalid webhook url");
            }
            match r.json()["text"]["content"].as_str() {
                Some(_) if r.json()["msgtype"] == "text" => robot(0, "ok"),
                _ => robot(40008, "invalid message type"),
            }
        }
        "/robot/send" => {
            if r.query.get("access_token").map(String::as_str) == Some("signed") {
                if let Err(e) = dingtalk_check(r) {
                    return robot(310000, &e);
                }
            }
            match r.json()["text"]["content"].as_str() {
                Some(_) if r.json()["msgtype"] == "text" => robot(0, "ok"),
                _ => robot(40035, "missing text"),
            }
        }
        "/hook" => {
            if r.authorization.as_deref() == Some(&format!("Bearer {TOKEN}")) {
                (StatusCode::NO_CONTENT, String::new())
            } else {
                (StatusCode::UNAUTHORIZED, "no".into())
            }
        }
        other => (StatusCode::NOT_FOUND, other.to_string()),
    }
}

/// DingTalk's checks of a robot with "additional signature" and "custom keywords": the
/// timestamp within an hour, the HMAC-SHA256 signature of `timestamp\nsecret`, the keyword in
/// the content.
fn dingtalk_check(r: &Request) -> Result<(), String> {
    let timestamp = r.query.get("timestamp").ok_or("no timestamp")?;
    let sign = r.query.get("sign").ok_or("no sign")?;
    let ms: i64 = timestamp.parse().map_err(|_| "bad timestamp")?;
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    if (now - ms).abs() > 3_600_000 {
        return Err("timestamp is too far from now".into());
    }
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{timestamp}\n{SECRET}").as_bytes());
    let want = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    if *sign != want {
        return Err(format!("sign not match, {sign} != {want}"));
    }
    let content = r.json()["text"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if !content.contains(KEYWORD) {
        return Err("keywords not in content".into());
    }
    Ok(())
}

fn handler(kind: &str, props: &[(&str, &str)]) -> Arc<ErrorHandler> {
    let props = props
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Arc::new(ErrorHandler::parse(Some(kind), &props).unwrap_or_else(|e| panic!("{kind}: {e}")))
}

fn failure(job: &str, item: i32, attempt: u32, error: &str) -> Failure {
    Failure {
        job: job.into(),
        item,
        execution_id: format!("exec-{job}-{item}"),
        task_id: format!("{job}@-@0,1,2@-@READY@-@127.0.0.2@-@4242"),
        instance_id: "127.0.0.2@-@4242".into(),
        attempt,
        error: error.into(),
        time: SystemTime::now(),
    }
}

/// A counter's value in the metrics' text, 0 when absent.
fn counter(metrics: &Metrics, series: &str) -> f64 {
    metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

fn sent(m: &Metrics, handler: &str) -> f64 {
    counter(
        m,
        &format!("shardcar_alerts_sent_total{{handler=\"{handler}\"}}"),
    )
}

fn failed(m: &Metrics, handler: &str) -> f64 {
    counter(
        m,
        &format!("shardcar_alerts_failed_total{{handler=\"{handler}\"}}"),
    )
}

fn dropped(m: &Metrics) -> f64 {
    counter(m, "shardcar_alerts_dropped_total")
}

/// Waits until `handler` has `want_sent` sent and `want_failed` failed.
async fn wait_counts(m: &Metrics, handler: &str, want_sent: f64, want_failed: f64) {
    let reached = eventually(WAIT, || async {
        (sent(m, handler) == want_sent && failed(m, handler) == want_failed).then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "{handler}: want {want_sent} sent and {want_failed} failed\n{}",
        m.render()
    );
}

struct Running {
    alerts: Alerts,
    metrics: Arc<Metrics>,
    tracker: TaskTracker,
    cancel: CancellationToken,
}

fn start(queue: usize) -> Running {
    let metrics = Arc::new(Metrics::new());
    let tracker = TaskTracker::new();
    let cancel = CancellationToken::new();
    let alerts = Alerts::spawn_with_queue(queue, metrics.clone(), &tracker, cancel.clone());
    Running {
        alerts,
        metrics,
        tracker,
        cancel,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn robots_and_webhook_receive_elasticjobs_messages() {
    let (addr, requests) = http_receiver().await;
    let run = start(64);
    let m = &run.metrics;
    let base = format!("http://{addr}");

    // WeCom: the text message, in ElasticJob's words; a wrong key is refused by the robot.
    let wechat = handler(
        "WECHAT",
        &[(
            "wechat.webhook",
            &format!("{base}/cgi-bin/webhook/send?key={WECHAT_KEY}"),
        )],
    );
    run.alerts.report(
        wechat,
        failure(
            "orders",
            1,
            0,
            "java.lang.IllegalStateException: out of stock",
        ),
    );
    wait_counts(m, "WECHAT", 1.0, 0.0).await;
    let wrong_key = handler(
        "WECHAT",
        &[(
            "wechat.webhook",
            &format!("{base}/cgi-bin/webhook/send?key=other"),
        )],
    );
    run.alerts
        .report(wrong_key, failure("orders", 2, 0, "boom"));
    wait_counts(m, "WECHAT", 1.0, 1.0).await;
    let first = requests.lock().unwrap()[0].clone();
    assert_eq!(first.path, "/cgi-bin/webhook/send");
    assert_eq!(
        first.content_type.as_deref(),
        Some("application/json; charset=utf-8")
    );
    let body = first.json();
    assert_eq!(body["msgtype"], "text");
    assert_eq!(body.as_object().unwrap().len(), 2, "{body}");
    let content = body["text"]["content"].as_str().unwrap();
    let (text, at) = content.rsplit_once(", at ").unwrap();
    assert_eq!(
        text,
        "Job 'orders' exception occur in job processing, caused by \
         java.lang.IllegalStateException: out of stock\n\
         item 1, execution exec-orders-1, task orders@-@0,1,2@-@READY@-@127.0.0.2@-@4242, \
         instance 127.0.0.2@-@4242"
    );
    chrono::DateTime::parse_from_rfc3339(at).expect("the time is RFC 3339");

    // DingTalk, signed and with a keyword: the robot checks both; a wrong secret is refused.
    let signed = format!("{base}/robot/send?access_token=signed");
    let dingtalk = handler(
        "DINGTALK",
        &[
            ("dingtalk.webhook", &signed),
            ("dingtalk.secret", SECRET),
            ("dingtalk.keyword", KEYWORD),
        ],
    );
    run.alerts
        .report(dingtalk, failure("billing", 0, 2, "exit status 3"));
    wait_counts(m, "DINGTALK", 1.0, 0.0).await;
    let content = requests.lock().unwrap().last().unwrap().json()["text"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        content.starts_with(
            "[shardcar]Job 'billing' exception occur in job processing, caused by exit status 3\n\
             item 0, retry 2, execution exec-billing-0, "
        ),
        "{content}"
    );
    let wrong_secret = handler(
        "DINGTALK",
        &[
            ("dingtalk.webhook", &signed),
            ("dingtalk.secret", "SECwrong"),
            ("dingtalk.keyword", KEYWORD),
        ],
    );
    run.alerts
        .report(wrong_secret, failure("billing", 1, 0, "boom"));
    wait_counts(m, "DINGTALK", 1.0, 1.0).await;
    let no_keyword = handler(
        "DINGTALK",
        &[("dingtalk.webhook", &signed), ("dingtalk.secret", SECRET)],
    );
    run.alerts
        .report(no_keyword, failure("billing", 2, 0, "boom"));
    wait_counts(m, "DINGTALK", 1.0, 2.0).await;
    // A robot without a secret takes the plain webhook as it is.
    let plain = handler(
        "DINGTALK",
        &[(
            "dingtalk.webhook",
            &format!("{base}/robot/send?access_token=plain"),
        )],
    );
    run.alerts.report(plain, failure("billing", 3, 0, "boom"));
    wait_counts(m, "DINGTALK", 2.0, 2.0).await;
    let last = requests.lock().unwrap().last().unwrap().clone();
    assert_eq!(last.query.len(), 1, "{:?}", last.query);

    // The webhook: the failure as JSON, with the bearer token; a wrong token is refused.
    let hook = handler(
        "WEBHOOK",
        &[
            ("webhook.url", &format!("{base}/hook")),
            ("webhook.token", TOKEN),
        ],
    );
    let f = failure("reports", 7, 1, "timed out after 30 s");
    run.alerts.report(hook, f.clone());
    wait_counts(m, "WEBHOOK", 1.0, 0.0).await;
    let request = requests.lock().unwrap().last().unwrap().clone();
    assert_eq!(
        request.authorization.as_deref(),
        Some("Bearer hook-token-1")
    );
    let body = request.json();
    assert_eq!(body["jobName"], "reports");
    assert_eq!(body["item"], 7);
    assert_eq!(body["executionId"], "exec-reports-7");
    assert_eq!(body["taskId"], f.task_id);
    assert_eq!(body["instanceId"], "127.0.0.2@-@4242");
    assert_eq!(body["attempt"], 1);
    assert_eq!(body["error"], "timed out after 30 s");
    assert_eq!(body["text"], f.text());
    let time = chrono::DateTime::parse_from_rfc3339(body["time"].as_str().unwrap())
        .expect("time is RFC 3339");
    assert_eq!(
        time.timestamp_millis(),
        chrono::DateTime::<chrono::Utc>::from(f.time).timestamp_millis()
    );
    let wrong_token = handler(
        "WEBHOOK",
        &[
            ("webhook.url", &format!("{base}/hook")),
            ("webhook.token", "nope"),
        ],
    );
    run.alerts
        .report(wrong_token, failure("reports", 8, 0, "boom"));
    wait_counts(m, "WEBHOOK", 1.0, 1.0).await;

    // LOG, THROW and IGNORE send nothing and count nothing.
    let before = requests.lock().unwrap().len();
    for kind in ["LOG", "THROW", "IGNORE"] {
        run.alerts
            .report(handler(kind, &[]), failure("quiet", 0, 0, "boom"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(requests.lock().unwrap().len(), before);
    assert_eq!(dropped(m), 0.0);
    assert_eq!(sent(m, "EMAIL") + failed(m, "EMAIL"), 0.0);
    run.cancel.cancel();
    run.tracker.close();
    run.tracker.wait().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_that_never_answers_is_given_up_after_its_read_timeout() {
    let (addr, requests) = http_receiver().await;
    let run = start(64);
    let hang = handler(
        "WEBHOOK",
        &[
            ("webhook.url", &format!("http://{addr}/hang")),
            ("webhook.readTimeoutMilliseconds", "300"),
        ],
    );
    let started = std::time::Instant::now();
    run.alerts.report(hang, failure("slow", 0, 0, "boom"));
    wait_counts(&run.metrics, "WEBHOOK", 0.0, 1.0).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "given up after {took:?}"
    );
    // Tried once, not again.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(requests.lock().unwrap().len(), 1);
    assert_eq!(failed(&run.metrics, "WEBHOOK"), 1.0);
    run.cancel.cancel();
    run.tracker.close();
    run.tracker.wait().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_queue_drops_and_counts_without_waiting() {
    let (addr, _requests) = http_receiver().await;
    let run = start(1);
    let hang = handler(
        "WEBHOOK",
        &[
            ("webhook.url", &format!("http://{addr}/hang")),
            ("webhook.readTimeoutMilliseconds", "60000"),
        ],
    );
    const N: usize = 100;
    let started = std::time::Instant::now();
    for item in 0..N {
        run.alerts
            .report(hang.clone(), failure("flood", item as i32, 0, "boom"));
    }
    // Nothing waits for the receiver, which holds each send for a minute; on a loaded machine
    // the reports may still take a few scheduling delays.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "{N} reports took {took:?}");
    // At most the queue (1) and the sends in progress are taken; the rest are dropped.
    let m = &run.metrics;
    let most_taken = (1 + IN_FLIGHT) as f64;
    assert!(dropped(m) >= N as f64 - most_taken, "{}", m.render());
    assert_eq!(sent(m, "WEBHOOK") + failed(m, "WEBHOOK"), 0.0);
    // Stopping: the hung sends are given up after the flush and counted failed; every report
    // is then accounted for.
    run.cancel.cancel();
    run.tracker.close();
    tokio::time::timeout(
        shardcar::ops::alerts::FLUSH + Duration::from_secs(3),
        run.tracker.wait(),
    )
    .await
    .expect("the alerts task ends after its flush");
    assert_eq!(
        dropped(m) + failed(m, "WEBHOOK") + sent(m, "WEBHOOK"),
        N as f64,
        "{}",
        m.render()
    );
    // After the task ended, a report is dropped too, still without waiting.
    run.alerts.report(hang, failure("flood", 0, 0, "late"));
    assert_eq!(
        dropped(m) + failed(m, "WEBHOOK"),
        N as f64 + 1.0,
        "{}",
        m.render()
    );
}

/// The SMTP sink: two aiosmtpd servers on loopback, one with implicit TLS and one that
/// requires STARTTLS, both requiring a login; each mail received is printed as a JSON line.
const SMTP_SINK: &str = r#"
import asyncio, email, email.policy, json, ssl, sys
from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

tls_port, starttls_port, cert, key, user, password = sys.argv[1:7]

def authenticator(server, session, envelope, mechanism, auth_data):
    ok = (isinstance(auth_data, LoginPassword) and auth_data.login.decode() == user
          and auth_data.password.decode() == password)
    # handled=False: aiosmtpd then answers a refused login with 535 itself.
    return AuthResult(success=ok, handled=False,
                      auth_data=(auth_data.login.decode() if ok else None))

class Sink:
    def __init__(self, mode):
        self.mode = mode

    async def handle_DATA(self, server, session, envelope):
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        parts = [{"content_type": p.get_content_type(), "charset": p.get_content_charset(),
                  "body": p.get_content()} for p in msg.walk() if not p.is_multipart()]
        print(json.dumps({
            "mode": self.mode, "login": session.auth_data,
            "tls": server.transport.get_extra_info("ssl_object") is not None,
            "mail_from": envelope.mail_from, "rcpt_tos": envelope.rcpt_tos,
            "subject": msg["subject"], "from": msg["from"], "to": msg["to"], "cc": msg["cc"],
            "bcc": msg["bcc"], "date": msg["date"], "content_type": msg.get_content_type(),
            "parts": parts}), flush=True)
        return "250 OK"

async def main():
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    loop = asyncio.get_running_loop()
    login = dict(authenticator=authenticator, auth_required=True)
    await loop.create_server(lambda: SMTP(Sink("tls"), auth_require_tls=False, **login),
                             "127.0.0.1", int(tls_port), ssl=ctx)
    await loop.create_server(
        lambda: SMTP(Sink("starttls"), tls_context=ctx, require_starttls=True, **login),
        "127.0.0.1", int(starttls_port))
    print("READY", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"#;

/// The repo's venv Python (scripts/install-deps.sh puts aiosmtpd there), or
/// `SHARDCAR_TEST_PYTHON`.
fn python() -> std::path::PathBuf {
    let path = std::env::var_os("SHARDCAR_TEST_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python").into());
    let ok = std::process::Command::new(&path)
        .args(["-c", "import aiosmtpd"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "no aiosmtpd for {}: run scripts/install-deps.sh or set SHARDCAR_TEST_PYTHON",
        path.display()
    );
    path
}

/// The mails the sink printed so far.
fn mails(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("{\"mode\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn email_reaches_a_real_smtp_server_over_tls_and_starttls() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("cannot run openssl");
    assert!(made.success(), "openssl could not make a certificate");
    let script = dir.path().join("smtp_sink.py");
    std::fs::write(&script, SMTP_SINK).unwrap();
    let (tls_port, starttls_port) = (free_port(), free_port());
    let log = dir.path().join("smtp.log");
    let mut command = std::process::Command::new(python());
    command
        .arg(&script)
        .args([tls_port.to_string(), starttls_port.to_string()])
        .arg(&cert)
        .arg(&key)
        .args(["alerts", "s3cret"]);
    let mut sink = Process::spawn("aiosmtpd", command, &log);
    let ready = eventually(WAIT, || async {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("READY")
            .then_some(())
    })
    .await;
    assert!(
        ready.is_some() && sink.is_running(),
        "the SMTP sink did not start:\n{}",
        common::log_tail(&log, 30)
    );

    let run = start(64);
    let m = &run.metrics;
    let props = |port: u16, ssl: &str, trust: Option<&str>| {
        let mut p = vec![
            ("email.host", "127.0.0.1".to_string()),
            ("email.port", port.to_string()),
            ("email.username", "alerts".into()),
            ("email.password", "s3cret".into()),
            ("email.useSsl", ssl.into()),
            ("email.from", "shardcar <alerts@example.com>".into()),
            ("email.to", "ops@example.com, oncall@example.com".into()),
            ("email.cc", "lead@example.com".into()),
            ("email.bcc", "audit@example.com".into()),
        ];
        if let Some(trust) = trust {
            p.push(("email.ssl.trust", trust.into()));
        }
        p
    };
    let email = |p: Vec<(&str, String)>| {
        let pairs: Vec<(&str, &str)> = p.iter().map(|(k, v)| (*k, v.as_str())).collect();
        handler("EMAIL", &pairs)
    };

    // A self-signed certificate is refused unless email.ssl.trust names the host.
    run.alerts.report(
        email(props(tls_port, "true", None)),
        failure("orders", 0, 0, "boom"),
    );
    wait_counts(m, "EMAIL", 0.0, 1.0).await;

    // Implicit TLS (email.useSsl defaults to true), with the login.
    let error = "java.lang.RuntimeException: <no stock> & no luck für item 1";
    run.alerts.report(
        email(props(tls_port, "true", Some("127.0.0.1"))),
        failure("orders", 1, 0, error),
    );
    wait_counts(m, "EMAIL", 1.0, 1.0).await;
    // STARTTLS (email.useSsl false), required by this server before the login and the mail.
    run.alerts.report(
        email(props(starttls_port, "false", Some("*"))),
        failure("orders", 2, 3, "exit status 1"),
    );
    wait_counts(m, "EMAIL", 2.0, 1.0).await;
    // A wrong password is refused by the server.
    let mut bad_login = props(starttls_port, "false", Some("*"));
    bad_login[3].1 = "wrong".into();
    run.alerts
        .report(email(bad_login), failure("orders", 3, 0, "boom"));
    wait_counts(m, "EMAIL", 2.0, 2.0).await;

    let got = mails(&log);
    assert_eq!(got.len(), 2, "{got:#?}\n{}", common::log_tail(&log, 30));
    for (mail, mode) in got.iter().zip(["tls", "starttls"]) {
        assert_eq!(mail["mode"], mode);
        assert_eq!(mail["tls"], true, "{mail:#}");
        assert_eq!(mail["login"], "alerts");
        assert_eq!(mail["mail_from"], "alerts@example.com");
        assert_eq!(
            mail["rcpt_tos"],
            serde_json::json!([
                "ops@example.com",
                "oncall@example.com",
                "lead@example.com",
                "audit@example.com"
            ])
        );
        assert_eq!(mail["subject"], "ElasticJob error message");
        assert_eq!(mail["from"], "shardcar <alerts@example.com>");
        assert_eq!(mail["to"], "ops@example.com, oncall@example.com");
        assert_eq!(mail["cc"], "lead@example.com");
        assert_eq!(mail["bcc"], Value::Null, "Bcc is not shown");
        assert!(mail["date"].is_string());
        assert_eq!(mail["content_type"], "multipart/mixed");
        assert_eq!(mail["parts"].as_array().unwrap().len(), 1);
        assert_eq!(mail["parts"][0]["content_type"], "text/html");
        assert_eq!(mail["parts"][0]["charset"], "utf-8");
    }
    // SMTP carries lines ending in CRLF.
    let body = got[0]["parts"][0]["body"]
        .as_str()
        .unwrap()
        .replace("\r\n", "\n");
    assert!(
        body.starts_with(
            "Job 'orders' exception occur in job processing, caused by \
             java.lang.RuntimeException: &lt;no stock&gt; &amp; no luck für item 1<br>\n\
             item 1, execution exec-orders-1, task orders@-@0,1,2@-@READY@-@127.0.0.2@-@4242, \
             instance 127.0.0.2@-@4242, at "
        ),
        "{body}"
    );
    let body = got[1]["parts"][0]["body"]
        .as_str()
        .unwrap()
        .replace("\r\n", "\n");
    assert!(
        body.contains("exit status 1<br>\nitem 2, retry 3, execution exec-orders-2, "),
        "{body}"
    );

    run.cancel.cancel();
    run.tracker.close();
    run.tracker.wait().await;
    sink.stop(Duration::from_secs(5)).await;
}

/// Writes `yaml` as job `job`'s `config` straight into ZooKeeper, as an ElasticJob process
/// writes it (its parents created first).
async fn write_elasticjob_config(zk: &ZooKeeper, ns: &str, job: &str, yaml: &str) {
    let client = zookeeper_client::Client::connect(&zk.connect_string())
        .await
        .expect("a ZooKeeper session");
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    for path in [format!("/{ns}"), format!("/{ns}/{job}")] {
        match client.create(&path, b"", &persistent).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => panic!("cannot create {path}: {e}"),
        }
    }
    client
        .create(&format!("/{ns}/{job}/config"), yaml.as_bytes(), &persistent)
        .await
        .expect("the config written");
}

/// Triggers `job` once through `car`'s Admin API.
async fn trigger_once(car: &Sidecar, job: &str) {
    let mut admin = AdminServiceClient::connect(car.endpoint())
        .await
        .expect("the admin API");
    admin
        .trigger_job(shardcar::proto::TriggerJobRequest {
            job_name: job.into(),
            job_parameter: None,
        })
        .await
        .expect("triggered");
}

/// The requests taken at `path`.
fn taken(requests: &Requests, path: &str) -> Vec<Request> {
    requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.path == path)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dingtalk_handler_elasticjob_wrote_sends_one_message_when_an_item_fails() {
    let (addr, requests) = http_receiver().await;
    let zk = ZooKeeper::start().await;
    let ns = "alerts-dingtalk";
    // ElasticJob 3.0.4's own YAML, as a Java process writes it.
    let yaml = format!(
        "cron: {NEVER}\njobName: ledger\nshardingTotalCount: 2\nmonitorExecution: true\n\
         failover: false\nmisfire: true\nmaxTimeDiffSeconds: -1\nreconcileIntervalMinutes: 10\n\
         jobErrorHandlerType: DINGTALK\nprops:\n  dingtalk.webhook: http://{addr}/robot/send?access_token=signed\n\
         \x20 dingtalk.keyword: '{KEYWORD}'\n  dingtalk.secret: {SECRET}\n\
         disabled: false\noverwrite: false\n"
    );
    write_elasticjob_config(&zk, ns, "ledger", &yaml).await;
    let car = Sidecar::start(SidecarOptions {
        namespace: ns.into(),
        ..SidecarOptions::zk(zk.connect_string(), "127.0.0.2")
    })
    .await;
    let w = TestWorker::subscribe(
        &car.endpoint(),
        SubscribeRequest {
            config: None,
            ..subscribe_request(job_config("ledger", NEVER, 2))
        },
    )
    .await
    .unwrap();
    w.wait_items(|i| i.len() == 2, WAIT).await.unwrap();
    trigger_once(&car, "ledger").await;
    let t = w.next_trigger(WAIT).await.unwrap();
    w.report_failure(&t.execution_id, 1, "ledger out of balance")
        .await
        .unwrap();
    w.complete(&t.execution_id, &[0]).await.unwrap();
    let sent = eventually(WAIT, || async {
        Some(taken(&requests, "/robot/send")).filter(|r| !r.is_empty())
    })
    .await
    .unwrap_or_else(|| panic!("no DingTalk message\n{}", car.log_tail(40)));
    assert_eq!(sent.len(), 1);
    assert!(
        dingtalk_check(&sent[0]).is_ok(),
        "signed and with the keyword"
    );
    let content = sent[0].json()["text"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        content.starts_with(&format!(
            "{KEYWORD}Job 'ledger' exception occur in job processing, caused by ledger out of balance"
        )),
        "{content}"
    );
    assert!(content.contains("item 1,"), "{content}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        taken(&requests, "/robot/send").len(),
        1,
        "one failure, one message"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retried_failure_alerts_once_its_attempts_have_run_out() {
    let (addr, requests) = http_receiver().await;
    let car = Sidecar::start(SidecarOptions::standalone()).await;
    let mut config = job_config("retried", NEVER, 1);
    config.job_error_handler_type = "WEBHOOK".into();
    config.props = [
        ("webhook.url".to_string(), format!("http://{addr}/hook")),
        ("webhook.token".to_string(), TOKEN.to_string()),
    ]
    .into_iter()
    .collect();
    config.retry = Some(shardcar::proto::RetryPolicy {
        max_attempts: 3,
        initial_backoff: Some(prost_types::Duration {
            seconds: 0,
            nanos: 100_000_000,
        }),
        max_backoff: None,
        multiplier: 1.0,
    });
    let w = TestWorker::subscribe(&car.endpoint(), subscribe_request(config))
        .await
        .unwrap();
    w.wait_items(|i| i.len() == 1, WAIT).await.unwrap();
    trigger_once(&car, "retried").await;
    // Three runs in all, each failed: the first and two retries.
    for attempt in 0..3 {
        let t = w.next_trigger(WAIT).await.unwrap();
        assert_eq!(t.attempt, attempt);
        if attempt == 0 {
            assert!(
                taken(&requests, "/hook").is_empty(),
                "nothing is sent before the first failure"
            );
        }
        w.report_failure(&t.execution_id, 0, &format!("failed run {attempt}"))
            .await
            .unwrap();
        if attempt < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(
                taken(&requests, "/hook").is_empty(),
                "a failure that will be retried is not reported"
            );
        }
    }
    let sent = eventually(WAIT, || async {
        Some(taken(&requests, "/hook")).filter(|r| !r.is_empty())
    })
    .await
    .unwrap_or_else(|| panic!("no webhook call\n{}", car.log_tail(40)));
    let body = sent[0].json();
    assert_eq!(body["jobName"], "retried");
    assert_eq!(body["attempt"], 2);
    assert_eq!(body["error"], "failed run 2");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(taken(&requests, "/hook").len(), 1);
}
