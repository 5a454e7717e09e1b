//! The listener's routes against a standalone registry, without a socket: probes, metrics,
//! pages, and who may read and act.

use super::*;
use crate::access::AdminToken;
use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt;

const TOKEN: &str = "0123456789abcdef-token";

fn web(access: Access) -> Arc<Web> {
    Arc::new(Web {
        registry: Registry::standalone(),
        history: Arc::new(History::new(10)),
        tracing_db: None,
        metrics: Arc::new(Metrics::new()),
        access: Arc::new(access),
        sessions: session::Sessions::new(8080),
        namespace: "ns".into(),
        zk: None,
        ip: "127.0.0.2".into(),
        draining: CancellationToken::new(),
        cancel: CancellationToken::new(),
        tracker: TaskTracker::new(),
    })
}

fn token() -> Access {
    Access {
        token: Some(AdminToken::new(TOKEN).unwrap()),
        read_only_open: false,
    }
}

async fn call(web: &Arc<Web>, request: Request<Body>) -> (StatusCode, String) {
    let response = router(web.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn get(path: &str) -> Request<Body> {
    Request::get(path)
        .header("host", "127.0.0.1:8080")
        .body(Body::empty())
        .unwrap()
}

fn post(path: &str, form: &str, bearer: Option<&str>) -> Request<Body> {
    let mut request = Request::post(path)
        .header("host", "127.0.0.1:8080")
        .header("content-type", "application/x-www-form-urlencoded");
    if let Some(b) = bearer {
        request = request.header("authorization", format!("Bearer {b}"));
    }
    request.body(Body::from(form.to_string())).unwrap()
}

async fn put_job(web: &Web, name: &str) {
    let config = crate::proto::JobConfig {
        job_name: name.into(),
        cron: "0 0 0 1 1 ? 2099".into(),
        sharding_total_count: 2,
        ..Default::default()
    };
    crate::api::admin::put_job(&web.registry, &config)
        .await
        .unwrap();
}

#[tokio::test]
async fn probes_metrics_and_unknown_paths() {
    let web = web(Access::default());
    web.metrics
        .trigger_sent("j", "CRON", Duration::from_millis(1));
    let (status, body) = call(&web, get("/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("shardcar_triggers_total{job_name=\"j\",source=\"CRON\"} 1\n"));
    assert_eq!(call(&web, get("/healthz")).await.0, StatusCode::OK);
    assert_eq!(call(&web, get("/readyz")).await.0, StatusCode::OK);
    web.draining.cancel();
    let (status, body) = call(&web, get("/readyz")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("draining"), "{body}");
    assert_eq!(call(&web, get("/nope")).await.0, StatusCode::NOT_FOUND);
    let (status, _) = call(&web, post("/metrics", "", None)).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn without_a_token_only_loopback_names_are_served_and_actions_need_the_csrf_token() {
    let web = web(Access::default());
    put_job(&web, "j").await;
    let (status, body) = call(&web, get("/")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#"data-job="j""#), "{body}");
    assert!(body.contains(r#"<b id="namespace">ns</b>"#));
    let rebound = Request::get("/")
        .header("host", "evil.example:8080")
        .body(Body::empty())
        .unwrap();
    assert_eq!(call(&web, rebound).await.0, StatusCode::MISDIRECTED_REQUEST);
    // No CSRF token: refused, nothing disabled.
    let (status, _) = call(&web, post("/jobs/j/items/0/disable", "confirmed=yes", None)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        !crate::ops::jobs::get_job(&web.registry, "j")
            .await
            .unwrap()
            .items[0]
            .disabled
    );
    // Not confirmed: a page that asks.
    let csrf = web.sessions.process_csrf_for_tests();
    let (status, body) = call(
        &web,
        post("/jobs/j/items/0/disable", &format!("csrf={csrf}"), None),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#"id="question""#), "{body}");
    assert!(
        !crate::ops::jobs::get_job(&web.registry, "j")
            .await
            .unwrap()
            .items[0]
            .disabled
    );
    let (status, _) = call(
        &web,
        post(
            "/jobs/j/items/0/disable",
            &format!("csrf={csrf}&confirmed=yes"),
            None,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(
        crate::ops::jobs::get_job(&web.registry, "j")
            .await
            .unwrap()
            .items[0]
            .disabled
    );
}

#[tokio::test]
async fn with_a_token_nothing_is_read_or_changed_without_it() {
    let web = web(token());
    put_job(&web, "j").await;
    assert_eq!(call(&web, get("/")).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(call(&web, get("/jobs/j")).await.0, StatusCode::UNAUTHORIZED);
    // Probes and metrics stay open.
    assert_eq!(call(&web, get("/metrics")).await.0, StatusCode::OK);
    assert_eq!(call(&web, get("/readyz")).await.0, StatusCode::OK);
    for bearer in [None, Some("0123456789abcdef-wrong")] {
        let (status, _) = call(
            &web,
            post("/jobs/j/items/1/disable", "confirmed=yes", bearer),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{bearer:?}");
    }
    assert!(
        !crate::ops::jobs::get_job(&web.registry, "j")
            .await
            .unwrap()
            .items[1]
            .disabled
    );
    let (status, _) = call(
        &web,
        post("/jobs/j/items/1/disable", "confirmed=yes", Some(TOKEN)),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(
        crate::ops::jobs::get_job(&web.registry, "j")
            .await
            .unwrap()
            .items[1]
            .disabled
    );
    // A wrong login is refused; the right one gives a session cookie that reads.
    let (status, _) = call(&web, post("/login", "token=nope-nope-nope-nope", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let response = router(web.clone())
        .oneshot(post("/login", &format!("token={TOKEN}&next=/jobs/j"), None))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    let id = cookie.split(';').next().unwrap().to_string();
    let with_cookie = Request::get("/jobs/j")
        .header("host", "shardcar.example:8080")
        .header("cookie", id)
        .body(Body::empty())
        .unwrap();
    let (status, body) = call(&web, with_cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("Log out"), "{body}");
}

#[tokio::test]
async fn read_only_pages_can_be_left_open() {
    let web = web(Access {
        read_only_open: true,
        ..token()
    });
    put_job(&web, "j").await;
    let (status, body) = call(&web, get("/jobs/j")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !body.contains("Trigger now"),
        "no actions without the token"
    );
    assert!(body.contains("Log in"));
    let (status, _) = call(&web, post("/jobs/j/disable", "confirmed=yes", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_bad_configuration_is_shown_at_its_field_and_not_written() {
    let web = web(token());
    put_job(&web, "j").await;
    let before = crate::ops::jobs::get_job(&web.registry, "j").await.unwrap();
    let (status, body) = call(
        &web,
        post(
            "/jobs/j/edit",
            "cron=0+0+*+*+*&sharding_total_count=2&sharding_strategy=AVG_ALLOCATION&max_time_diff_seconds=-1&reconcile_interval_minutes=10&execution_timeout_seconds=0&confirmed=yes",
            Some(TOKEN),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body.contains(r#"id="error-cron""#), "{body}");
    assert_eq!(
        crate::ops::jobs::get_job(&web.registry, "j").await.unwrap(),
        before
    );
    let (status, body) = call(&web, get("/cron/preview?cron=0+0+12+*+*+%3F&time_zone=UTC")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
}
