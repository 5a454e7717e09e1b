//! The web console in a real browser (headless Chromium over WebDriver, `common/browser.rs`),
//! against real sidecars on a real ZooKeeper with real workers (the strict proto worker of
//! `common/worker.rs`): the jobs list, a job's item grid against ZooKeeper, runs appearing live
//! without a reload, an item disabled and its worker no longer given it, a bad cron refused at
//! its field with nothing written and a good one previewed and saved, a job removed; and the
//! admin token: without it, or with a wrong one, the console answers 401 and the Admin API
//! `UNAUTHENTICATED`, and nothing changes.
//!
//! Screenshots go to `$CARGO_TARGET_TMPDIR/console-*.png`; with `SHARDCAR_UPDATE_SCREENSHOTS=1`
//! they also replace `docs/console-*.png`, which `docs/operations.md` shows.
#![allow(
    clippy::disallowed_methods,
    reason = "tests, benchmarks and examples run against real time and real processes"
)]

#[path = "common/browser.rs"]
mod browser;
mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use browser::Browser;
use common::{free_port, job_config, subscribe_request, zk_tree, Sidecar, SidecarOptions};
use common::{TestWorker, ZooKeeper};
use shardcar::proto::admin_service_client::AdminServiceClient;
use shardcar::proto::{DisableJobRequest, ListJobsRequest, PutJobRequest, TriggerJobRequest};

const WAIT: Duration = Duration::from_secs(30);
/// A cron that never fires during a test (1 January 2099).
const NEVER: &str = "0 0 0 1 1 ? 2099";
/// How long the strict workers work on each trigger: long enough to see the run on the page.
const WORK: Duration = Duration::from_millis(2500);
const TOKEN: &str = "console-test-token-0123456789";

/// The screenshots `docs/operations.md` shows.
const DOCS_SCREENSHOTS: &[&str] = &["console-jobs.png", "console-job.png"];

/// Saves a screenshot under the target dir, and over `docs/` when asked to (those
/// `docs/operations.md` shows).
async fn screenshot(browser: &Browser, name: &str) {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    browser.screenshot(&path).await;
    if DOCS_SCREENSHOTS.contains(&name)
        && std::env::var_os("SHARDCAR_UPDATE_SCREENSHOTS").is_some_and(|v| v == "1")
    {
        let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("docs")
            .join(name);
        std::fs::copy(&path, &docs)
            .unwrap_or_else(|e| panic!("cannot copy the screenshot to {}: {e}", docs.display()));
    }
}

/// A sidecar with the HTTP listener on a free loopback port: it and the console's base URL.
async fn sidecar_with_console(
    zk: &ZooKeeper,
    ns: &str,
    ip: &str,
    extra: &[&str],
) -> (Sidecar, String) {
    let port = free_port();
    let mut extra_args = vec!["--http-listen".to_string(), format!("127.0.0.1:{port}")];
    extra_args.extend(extra.iter().map(|s| s.to_string()));
    let sidecar = Sidecar::start(SidecarOptions {
        namespace: ns.to_string(),
        extra_args,
        ..SidecarOptions::zk(zk.connect_string(), ip)
    })
    .await;
    (sidecar, format!("http://127.0.0.1:{port}"))
}

fn node<'a>(tree: &'a common::ZkTree, path: &str) -> Option<&'a str> {
    tree.get(path).map(|(data, _)| data.as_str())
}

/// The number of rows of the executions table.
async fn execution_rows(browser: &Browser) -> u64 {
    browser
        .execute("return document.querySelectorAll('#executions tr[data-execution]').length;")
        .await
        .as_u64()
        .unwrap_or(0)
}

async fn wait_executions(browser: &Browser, at_least: u64) -> Instant {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if execution_rows(browser).await >= at_least {
            return Instant::now();
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "fewer than {at_least} executions on the page\n{}",
                browser.source().await
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_is_browsed_and_operated_live_in_a_real_browser() {
    let zk = ZooKeeper::start().await;
    let ns = "console-live";
    let (a, console) = sidecar_with_console(&zk, ns, "127.0.0.2", &[]).await;
    let b = Sidecar::start(SidecarOptions {
        namespace: ns.to_string(),
        ..SidecarOptions::zk(zk.connect_string(), "127.0.0.3")
    })
    .await;
    let mut config = job_config("orders", NEVER, 4);
    config.description = "Orders to ship".into();
    config.failover = true;
    config.sharding_item_parameters = [
        (0, "north".to_string()),
        (1, "south".to_string()),
        (2, "east".to_string()),
        (3, "west".to_string()),
    ]
    .into();
    let wa = TestWorker::subscribe_strict(&a.endpoint(), subscribe_request(config.clone()), WORK)
        .await
        .unwrap();
    let wb = TestWorker::subscribe_strict(&b.endpoint(), subscribe_request(config), WORK)
        .await
        .unwrap();
    wa.wait_items(|i| i.len() == 2, WAIT).await.unwrap();
    wb.wait_items(|i| i.len() == 2, WAIT).await.unwrap();

    // A job nobody runs yet: CRASHED, as ElasticJob-UI says.
    let mut admin = AdminServiceClient::connect(a.endpoint()).await.unwrap();
    let mut report = job_config("nightly-report", "0 30 2 * * ?", 3);
    report.time_zone = "Asia/Shanghai".into();
    report.description = "Daily sales report".into();
    admin
        .put_job(PutJobRequest {
            config: Some(report),
        })
        .await
        .unwrap();

    let browser = Browser::start().await;

    // The jobs list: the job, its state as ElasticJob-UI names it, its instances; the header
    // says which namespace and that ZooKeeper is connected.
    browser.goto(&format!("{console}/")).await;
    browser
        .wait_text(r#"#jobs tr[data-job="nightly-report"] .state"#, WAIT, |t| {
            t == Some("CRASHED")
        })
        .await;
    let report_next = browser
        .text(r#"#jobs tr[data-job="nightly-report"] .next-fire"#)
        .await
        .unwrap_or_default();
    assert!(report_next.contains("02:30:00 +08:00"), "{report_next}");
    let row = r#"#jobs tr[data-job="orders"]"#;
    browser
        .wait_text(&format!("{row} .state"), WAIT, |t| t == Some("OK"))
        .await;
    browser
        .wait_text(&format!("{row} .instances"), WAIT, |t| t == Some("2"))
        .await;
    assert_eq!(browser.text("#namespace").await.as_deref(), Some(ns));
    let zk_state = browser.text("#zk-state").await.unwrap_or_default();
    assert!(zk_state.starts_with("connected"), "{zk_state}");
    let next = browser
        .text(&format!("{row} .next-fire"))
        .await
        .unwrap_or_default();
    assert!(next.starts_with("2099-01-01 00:00:00"), "{next}");

    // One job: the item grid's owners are ZooKeeper's.
    browser.click(&format!("{row} a"), WAIT).await;
    browser
        .wait_url(WAIT, |u| u.ends_with("/jobs/orders"))
        .await;
    // The live stream is open before anything changes.
    browser.find("#live-indicator.ok", WAIT).await;
    let tree = zk_tree(&zk.connect_string(), ns).await;
    for item in 0..4 {
        let owner = node(&tree, &format!("/{ns}/orders/sharding/{item}/instance"))
            .unwrap_or_else(|| panic!("item {item} has no owner in ZooKeeper: {tree:#?}"));
        let shown = browser
            .text(&format!(r#"#items tr[data-item="{item}"] .owner"#))
            .await;
        if shown.as_deref() != Some(owner) {
            panic!(
                "item {item}: the page shows owner {shown:?}, ZooKeeper {owner:?}\n--- page ---\n{}",
                browser.source().await
            );
        }
    }
    for w in [&wa, &wb] {
        browser
            .find(
                &format!(r#"#instances tr[data-instance="{}"]"#, w.instance_id()),
                WAIT,
            )
            .await;
    }

    // Another operator triggers it (the Admin API): the run shows up, running, then done,
    // without a reload of the page.
    // Each update is merged into the page: the item's buttons stay the same elements while
    // its row changes around them (a button replaced as it is clicked swallows the click).
    browser.execute("window.__notReloaded = 42;").await;
    let a_item = wa.current_items()[0];
    let disable_button = serde_json::to_string(&format!(
        r#"#items tr[data-item="{a_item}"] form[action$="/disable"] button"#
    ))
    .unwrap();
    browser
        .execute(&format!(
            "document.querySelector({disable_button}).__kept = 42;"
        ))
        .await;
    admin
        .trigger_job(TriggerJobRequest {
            job_name: "orders".into(),
            job_parameter: None,
        })
        .await
        .unwrap();
    let running = format!(r#"#items tr[data-item="{a_item}"] .running"#);
    browser
        .wait_text(&running, WAIT, |t| t.is_some_and(|t| t.contains("running")))
        .await;
    let seen = wait_executions(&browser, 1).await;
    let ended = wa
        .strict_runs()
        .first()
        .and_then(|r| r.end)
        .expect("the worker on sidecar A ran the trigger");
    let lag = seen.saturating_duration_since(ended);
    assert!(
        lag < Duration::from_secs(1),
        "the run's end showed {lag:?} after it happened"
    );
    browser.wait_text(&running, WAIT, |t| t == Some("")).await;
    assert_eq!(
        browser.execute("return window.__notReloaded;").await,
        serde_json::json!(42),
        "the page was reloaded"
    );
    assert_eq!(
        browser
            .execute(&format!(
                "return document.querySelector({disable_button}).__kept;"
            ))
            .await,
        serde_json::json!(42),
        "an update replaced item {a_item}'s disable button instead of merging into it"
    );
    assert_eq!(
        browser
            .text(r#"#executions tr[data-execution] .source"#)
            .await
            .as_deref(),
        Some("MANUAL")
    );

    // Trigger from the console (confirmed): both workers run it.
    let (runs_a, runs_b) = (wa.strict_runs().len(), wb.strict_runs().len());
    browser
        .click(r#".actions form[action$="/trigger"] button"#, WAIT)
        .await;
    let question = browser.accept_confirm(WAIT).await;
    assert!(question.contains("Run job orders once now"), "{question}");
    browser
        .wait_url(WAIT, |u| u.contains("done=triggered"))
        .await;
    for (w, runs) in [(&wa, runs_a), (&wb, runs_b)] {
        let ran = common::eventually(WAIT, || async {
            (w.strict_runs().len() > runs).then_some(())
        })
        .await;
        assert!(
            ran.is_some(),
            "{} did not run the console's trigger",
            w.instance_id()
        );
    }
    wait_executions(&browser, 2).await;
    browser.resize(1400, 1640).await;
    screenshot(&browser, "console-job.png").await;
    browser.resize(1400, 1000).await;

    // The list says how the last run here went.
    browser.goto(&format!("{console}/")).await;
    browser
        .wait_text(&format!("{row} .last-run"), WAIT, |t| {
            t.is_some_and(|t| t.starts_with("completed"))
        })
        .await;
    browser.resize(1400, 560).await;
    screenshot(&browser, "console-jobs.png").await;
    browser.resize(1400, 1000).await;
    browser.goto(&format!("{console}/jobs/orders")).await;
    browser.find("#live-indicator.ok", WAIT).await;

    // Disable one of A's items: ZooKeeper has ElasticJob's node, the page says so, and the
    // worker is no longer given the item.
    let item_row = format!(r#"#items tr[data-item="{a_item}"]"#);
    browser
        .click(
            &format!(r#"{item_row} form[action$="/disable"] button"#),
            WAIT,
        )
        .await;
    browser.accept_confirm(WAIT).await;
    browser
        .wait_text(&format!("{item_row} .disabled"), WAIT, |t| t == Some("yes"))
        .await;
    let disabled_node = format!("/{ns}/orders/sharding/{a_item}/disabled");
    assert!(zk_tree(&zk.connect_string(), ns)
        .await
        .contains_key(&disabled_node));
    let before = wa.strict_runs().len();
    admin
        .trigger_job(TriggerJobRequest {
            job_name: "orders".into(),
            job_parameter: None,
        })
        .await
        .unwrap();
    let ran = common::eventually(WAIT, || async {
        (wa.strict_runs().len() > before).then_some(())
    })
    .await;
    assert!(ran.is_some(), "the worker was not triggered");
    let run = wa.strict_runs()[before].clone();
    assert!(
        !run.items.contains(&a_item) && !run.items.is_empty(),
        "the worker was given {:?} with item {a_item} disabled",
        run.items
    );
    browser
        .click(
            &format!(r#"{item_row} form[action$="/enable"] button"#),
            WAIT,
        )
        .await;
    browser.accept_confirm(WAIT).await;
    browser
        .wait_text(&format!("{item_row} .disabled"), WAIT, |t| t == Some(""))
        .await;
    assert!(!zk_tree(&zk.connect_string(), ns)
        .await
        .contains_key(&disabled_node));

    // The servers page: both hosts, each with the job.
    browser.goto(&format!("{console}/servers")).await;
    for ip in ["127.0.0.2", "127.0.0.3"] {
        browser
            .find(
                &format!(r#"#server-list tr[data-server="{ip}"] [data-server-job="orders"]"#),
                WAIT,
            )
            .await;
    }

    // A bad cron: the preview says why as it is typed, and saving shows the reason at the
    // field, with nothing written.
    let config_path = format!("/{ns}/orders/config");
    let config_before = node(&zk_tree(&zk.connect_string(), ns).await, &config_path)
        .map(str::to_string)
        .unwrap();
    browser.goto(&format!("{console}/jobs/orders/edit")).await;
    browser.type_into("#cron", "0 0 * * *", WAIT).await;
    browser
        .wait_text("#cron-preview .error", WAIT, |t| {
            t.is_some_and(|t| t.contains("0 0 * * *"))
        })
        .await;
    browser.click("#save", WAIT).await;
    browser.accept_confirm(WAIT).await;
    let error = browser
        .wait_text("#error-cron", WAIT, |t| t.is_some_and(|t| !t.is_empty()))
        .await
        .unwrap();
    assert!(error.contains("0 0 * * *"), "{error}");
    assert_eq!(
        browser
            .execute("return document.getElementById('cron').value;")
            .await,
        serde_json::json!("0 0 * * *"),
        "the form keeps what was typed"
    );
    assert_eq!(
        node(&zk_tree(&zk.connect_string(), ns).await, &config_path),
        Some(config_before.as_str()),
        "a refused configuration was written"
    );
    screenshot(&browser, "console-edit-refused.png").await;

    // A good one: ten fire times previewed in its zone, then saved for everyone.
    browser.type_into("#cron", "0 0 12 * * ?", WAIT).await;
    browser.type_into("#time_zone", "Asia/Shanghai", WAIT).await;
    browser
        .wait_text("#cron-preview-times li:first-child", WAIT, |t| {
            t.is_some_and(|t| t.ends_with("12:00:00 +08:00"))
        })
        .await;
    let previewed = browser
        .execute("return document.querySelectorAll('#cron-preview-times li').length;")
        .await;
    assert_eq!(previewed, serde_json::json!(10));
    browser.click("#save", WAIT).await;
    browser.accept_confirm(WAIT).await;
    browser.wait_url(WAIT, |u| u.contains("done=saved")).await;
    let saved = node(&zk_tree(&zk.connect_string(), ns).await, &config_path)
        .map(str::to_string)
        .unwrap();
    assert!(
        saved.contains("cron: 0 0 12 * * ?") && saved.contains("timeZone: Asia/Shanghai"),
        "{saved}"
    );
    browser
        .wait_text("#next-fires li:first-child", WAIT, |t| {
            t.is_some_and(|t| t.ends_with("12:00:00 +08:00"))
        })
        .await;

    // Remove the job: its workers are shut down, it leaves the list and the namespace.
    browser.find("#live-indicator.ok", WAIT).await;
    browser
        .click(r#".actions form[action$="/remove"] button"#, WAIT)
        .await;
    let question = browser.accept_confirm(WAIT).await;
    assert!(question.contains("Remove job orders"), "{question}");
    browser.wait_url(WAIT, |u| u.contains("done=removed")).await;
    assert!(browser.text(row).await.is_none(), "the job is still listed");
    wa.wait_stream_end(WAIT).await.unwrap();
    wb.wait_stream_end(WAIT).await.unwrap();
    let gone = common::eventually(WAIT, || async {
        let tree = zk_tree(&zk.connect_string(), ns).await;
        (!tree.contains_key(&format!("/{ns}/orders"))).then_some(())
    })
    .await;
    assert!(gone.is_some(), "the job is still in ZooKeeper");
    browser.close().await;
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(WAIT)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_admin_token_nothing_is_read_or_changed() {
    let zk = ZooKeeper::start().await;
    let ns = "console-token";
    let (a, console) = sidecar_with_console(&zk, ns, "127.0.0.2", &["--admin-token", TOKEN]).await;
    // The Worker API needs no token.
    let worker = TestWorker::subscribe(
        &a.endpoint(),
        subscribe_request(job_config("billing", NEVER, 2)),
    )
    .await
    .unwrap();
    worker.wait_items(|i| i.len() == 2, WAIT).await.unwrap();
    let before = zk_tree(&zk.connect_string(), ns).await;

    // The console: pages and actions, without a token and with a wrong one: 401.
    let client = http();
    let response = client.get(format!("{console}/")).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert!(response.headers().contains_key("www-authenticate"));
    for path in [
        "/jobs/billing/trigger",
        "/jobs/billing/disable",
        "/jobs/billing/items/0/disable",
        "/jobs/billing/remove",
        "/servers/127.0.0.2/disable",
    ] {
        for bearer in [None, Some("console-test-token-wrong-0000")] {
            let mut request = client
                .post(format!("{console}{path}"))
                .form(&[("confirmed", "yes")]);
            if let Some(b) = bearer {
                request = request.bearer_auth(b);
            }
            let status = request.send().await.unwrap().status();
            assert_eq!(status, 401, "POST {path} with {bearer:?}");
        }
    }
    // Probes and metrics stay open.
    for path in ["/healthz", "/readyz", "/metrics"] {
        let status = client
            .get(format!("{console}{path}"))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200, "{path}");
    }

    // The Admin API: UNAUTHENTICATED without the token and with a wrong one.
    let mut admin = AdminServiceClient::connect(a.endpoint()).await.unwrap();
    let refused = admin
        .disable_job(DisableJobRequest {
            job_name: "billing".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused}");
    let mut wrong = tonic::Request::new(TriggerJobRequest {
        job_name: "billing".into(),
        job_parameter: None,
    });
    wrong.metadata_mut().insert(
        "authorization",
        "Bearer console-test-token-wrong-0000".parse().unwrap(),
    );
    assert_eq!(
        admin.trigger_job(wrong).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    assert_eq!(
        admin
            .list_jobs(ListJobsRequest {})
            .await
            .unwrap_err()
            .code(),
        tonic::Code::Unauthenticated
    );

    // Nothing changed: no trigger, no disabled item or server, the job still there.
    let after = zk_tree(&zk.connect_string(), ns).await;
    let relevant = |tree: &common::ZkTree| -> Vec<(String, String)> {
        tree.iter()
            .filter(|(p, _)| {
                p.contains("/trigger")
                    || p.ends_with("/disabled")
                    || p.contains("/servers/")
                    || p.ends_with("/config")
            })
            .map(|(p, (d, _))| (p.clone(), d.clone()))
            .collect()
    };
    assert_eq!(relevant(&after), relevant(&before));
    assert!(worker.triggers().is_empty(), "a refused trigger was sent");

    // `shardcar ctl` without the token is refused; with it (flag or variable) it works.
    let ctl = |args: Vec<String>, env: Vec<(&'static str, &'static str)>| async move {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_shardcar"));
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SHARDCAR_") {
                command.env_remove(key);
            }
        }
        command
            .arg("ctl")
            .args(&args)
            .envs(env)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(WAIT, command.output())
            .await
            .unwrap()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let target = a.addr().to_string();
    let (code, _, stderr) = ctl(
        vec!["--target".into(), target.clone(), "jobs".into()],
        vec![],
    )
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.starts_with("shardcar ctl: unauthenticated: "),
        "{stderr}"
    );
    let (code, stdout, stderr) = ctl(
        vec![
            "--target".into(),
            target.clone(),
            "--token".into(),
            TOKEN.into(),
            "jobs".into(),
        ],
        vec![],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("billing"), "{stdout}");
    let (code, _, stderr) = ctl(
        vec![
            "--target".into(),
            target,
            "disable".into(),
            "billing".into(),
            "--item".into(),
            "1".into(),
        ],
        vec![("SHARDCAR_TOKEN", TOKEN)],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let item_1 = format!("/{ns}/billing/sharding/1/disabled");
    assert!(zk_tree(&zk.connect_string(), ns)
        .await
        .contains_key(&item_1));

    // A script with the token acts.
    let response = client
        .post(format!("{console}/jobs/billing/items/1/enable"))
        .bearer_auth(TOKEN)
        .form(&[("confirmed", "yes")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert!(!zk_tree(&zk.connect_string(), ns)
        .await
        .contains_key(&item_1));

    // A browser logs in: a wrong token is refused, the right one opens the console, whose
    // actions then work.
    let browser = Browser::start().await;
    browser.goto(&format!("{console}/jobs/billing")).await;
    browser
        .type_into("#token", "console-test-token-wrong-0000", WAIT)
        .await;
    browser.click("#login", WAIT).await;
    browser
        .wait_text("#login-message", WAIT, |t| {
            t.is_some_and(|t| t.contains("not this sidecar's"))
        })
        .await;
    browser.type_into("#token", TOKEN, WAIT).await;
    browser.click("#login", WAIT).await;
    browser
        .wait_url(WAIT, |u| u.ends_with("/jobs/billing"))
        .await;
    let item_row = r#"#items tr[data-item="0"]"#;
    browser
        .click(
            &format!(r#"{item_row} form[action$="/disable"] button"#),
            WAIT,
        )
        .await;
    browser.accept_confirm(WAIT).await;
    browser
        .wait_text(&format!("{item_row} .disabled"), WAIT, |t| t == Some("yes"))
        .await;
    assert!(zk_tree(&zk.connect_string(), ns)
        .await
        .contains_key(&format!("/{ns}/billing/sharding/0/disabled")));
    browser.close().await;
}

/// The data of `path` in `ns`, if it exists.
async fn data_of(zk: &ZooKeeper, ns: &str, path: &str) -> Option<String> {
    node(
        &zk_tree(&zk.connect_string(), ns).await,
        &format!("/{ns}/{path}"),
    )
    .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_policy_and_error_handler_edited_in_the_form_are_saved_and_shown() {
    let zk = ZooKeeper::start().await;
    let ns = "console-retry";
    let (a, console) = sidecar_with_console(&zk, ns, "127.0.0.2", &[]).await;
    let w = TestWorker::subscribe(
        &a.endpoint(),
        subscribe_request(job_config("payments", NEVER, 2)),
    )
    .await
    .unwrap();
    w.wait_items(|i| i.len() == 2, WAIT).await.unwrap();
    let browser = Browser::start().await;
    browser.goto(&format!("{console}/jobs/payments")).await;
    browser
        .wait_text("#retry-policy", WAIT, |t| {
            t == Some("none: a failed item waits for the next fire")
        })
        .await;
    assert_eq!(
        browser.text("#error-handler").await.as_deref(),
        Some("LOG (the default)")
    );
    let (config_before, extras_before) = (
        data_of(&zk, ns, "payments/config").await.unwrap(),
        data_of(&zk, ns, "payments/shardcar").await.unwrap(),
    );

    // A handler's prop PutJob refuses is shown at the properties, its key named; nothing is
    // written.
    browser.goto(&format!("{console}/jobs/payments/edit")).await;
    browser
        .type_into("#job_error_handler_type", "WEBHOOK", WAIT)
        .await;
    browser
        .type_into("#props", "webhook.url=ftp://alerts.example.com/hook", WAIT)
        .await;
    browser.type_into("#retry_max_attempts", "3", WAIT).await;
    browser.click("#save", WAIT).await;
    browser.accept_confirm(WAIT).await;
    let error = browser
        .wait_text("#error-props", WAIT, |t| t.is_some_and(|t| !t.is_empty()))
        .await
        .unwrap();
    assert!(
        error.starts_with("webhook.url: ") && error.contains("http:// or https://"),
        "{error}"
    );
    assert!(
        browser.text("#error-form").await.is_none(),
        "the error is at the field, not at the top of the form"
    );
    assert_eq!(
        data_of(&zk, ns, "payments/config").await.as_deref(),
        Some(config_before.as_str())
    );
    assert_eq!(
        data_of(&zk, ns, "payments/shardcar").await.as_deref(),
        Some(extras_before.as_str())
    );

    // A good handler and a retry policy: saved for everyone, shown on the job page (the
    // handler's token is not), and in the form again.
    browser
        .type_into(
            "#props",
            "webhook.url=http://127.0.0.1:9/hook\nwebhook.token=console-secret-token",
            WAIT,
        )
        .await;
    browser.type_into("#retry_max_attempts", "3", WAIT).await;
    browser
        .type_into("#retry_initial_backoff", "1m", WAIT)
        .await;
    browser.type_into("#retry_max_backoff", "2m", WAIT).await;
    browser.type_into("#retry_multiplier", "1.5", WAIT).await;
    browser.click("#save", WAIT).await;
    browser.accept_confirm(WAIT).await;
    browser.wait_url(WAIT, |u| u.contains("done=saved")).await;
    let extras = data_of(&zk, ns, "payments/shardcar").await.unwrap();
    assert!(
        extras.contains(
            "retry:\n  maxAttempts: 3\n  initialBackoffMillis: 60000\n  maxBackoffMillis: 120000\n  multiplierPermille: 1500\n"
        ),
        "{extras}"
    );
    let config = data_of(&zk, ns, "payments/config").await.unwrap();
    assert!(
        config.contains("jobErrorHandlerType: WEBHOOK")
            && config.contains("webhook.url: http://127.0.0.1:9/hook"),
        "{config}"
    );
    browser
        .wait_text("#retry-policy", WAIT, |t| {
            t == Some(
                "3 runs in all (2 retries): the first after 1m, each next wait ×1.5, up to 2m",
            )
        })
        .await;
    assert_eq!(
        browser.text("#error-handler").await.as_deref(),
        Some("WEBHOOK")
    );
    let page = browser.source().await;
    assert!(
        page.contains("http://127.0.0.1:9/hook"),
        "the handler's URL is shown"
    );
    assert!(
        !page.contains("console-secret-token"),
        "the handler's token is on the page"
    );
    browser.goto(&format!("{console}/jobs/payments/edit")).await;
    for (field, value) in [
        ("retry_max_attempts", "3"),
        ("retry_initial_backoff", "1m"),
        ("retry_max_backoff", "2m"),
        ("retry_multiplier", "1.5"),
        ("job_error_handler_type", "WEBHOOK"),
    ] {
        assert_eq!(
            browser
                .execute(&format!("return document.getElementById('{field}').value;"))
                .await,
            serde_json::json!(value),
            "{field}"
        );
    }

    // A failed item waits a minute for its retry: the item grid shows the pending retry, the
    // executions table the failed run's attempt.
    browser.goto(&format!("{console}/jobs/payments")).await;
    browser.find("#live-indicator.ok", WAIT).await;
    let mut admin = AdminServiceClient::connect(a.endpoint()).await.unwrap();
    admin
        .trigger_job(TriggerJobRequest {
            job_name: "payments".into(),
            job_parameter: None,
        })
        .await
        .unwrap();
    let t = w.next_trigger(WAIT).await.unwrap();
    w.complete(&t.execution_id, &[0]).await.unwrap();
    w.report_failure(&t.execution_id, 1, "card declined")
        .await
        .unwrap();
    let pending = browser
        .wait_text(r#"#items tr[data-item="1"] .retry"#, WAIT, |t| {
            t.is_some_and(|t| t.starts_with("attempt 1 at "))
        })
        .await
        .unwrap();
    assert!(
        data_of(&zk, ns, "payments/shardcar/retries/1")
            .await
            .is_some_and(|d| d.starts_with("attempt: 1\n")),
        "the page shows {pending:?} without a pending retry in ZooKeeper"
    );
    assert_eq!(
        browser
            .text(r#"#items tr[data-item="0"] .retry"#)
            .await
            .as_deref(),
        Some("")
    );
    wait_executions(&browser, 1).await;
    assert_eq!(
        browser
            .text("#executions tr[data-execution] .attempt")
            .await
            .as_deref(),
        Some("0")
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trigger_with_a_parameter_from_the_console_reaches_workers_and_the_trigger_nodes() {
    let zk = ZooKeeper::start().await;
    let ns = "console-parameter";
    let (a, console) = sidecar_with_console(&zk, ns, "127.0.0.2", &[]).await;
    let mut config = job_config("reports", NEVER, 2);
    config.job_parameter = "daily".into();
    let w = TestWorker::subscribe(&a.endpoint(), subscribe_request(config))
        .await
        .unwrap();
    w.set_auto_complete(true);
    w.wait_items(|i| !i.is_empty(), WAIT).await.unwrap();
    // An ElasticJob JVM in the job too: its trigger node stays until it runs it, which this one
    // never does, so the node can be read back.
    let jvm = "10.9.9.9@-@4242";
    let session = zookeeper_client::Client::connect(&zk.connect_string())
        .await
        .expect("a ZooKeeper session");
    session
        .create(
            &format!("/{ns}/reports/instances/{jvm}"),
            format!("jobInstanceId: {jvm}\nserverIp: 10.9.9.9\n").as_bytes(),
            &zookeeper_client::CreateMode::Ephemeral
                .with_acls(zookeeper_client::Acls::anyone_all()),
        )
        .await
        .expect("the JVM's instance node");

    let browser = Browser::start().await;
    browser.goto(&format!("{console}/jobs/reports")).await;
    browser
        .find(&format!(r#"#instances tr[data-instance="{jvm}"]"#), WAIT)
        .await;
    browser
        .type_into("#trigger-parameter", "2025-11-29", WAIT)
        .await;
    browser
        .click(r#".actions form[action$="/trigger"] button"#, WAIT)
        .await;
    browser.accept_confirm(WAIT).await;
    browser
        .wait_url(WAIT, |u| u.contains("done=triggered"))
        .await;
    let t = w.next_trigger(WAIT).await.unwrap();
    assert_eq!(t.source, shardcar::proto::TriggerSource::Manual as i32);
    assert_eq!(
        t.job_parameter, "2025-11-29",
        "the run carries the console's parameter"
    );
    assert_eq!(
        data_of(&zk, ns, &format!("reports/trigger/{jvm}"))
            .await
            .as_deref(),
        Some("2025-11-29"),
        "the JVM's trigger node carries it as ElasticJob reads it"
    );

    // The next run without a parameter carries the job's own.
    browser.goto(&format!("{console}/jobs/reports")).await;
    browser
        .click(r#".actions form[action$="/trigger"] button"#, WAIT)
        .await;
    browser.accept_confirm(WAIT).await;
    browser
        .wait_url(WAIT, |u| u.contains("done=triggered"))
        .await;
    let t = w.next_trigger(WAIT).await.unwrap();
    assert_eq!(t.job_parameter, "daily");
    assert_eq!(
        data_of(&zk, ns, &format!("reports/trigger/{jvm}"))
            .await
            .as_deref(),
        Some("")
    );
    browser.close().await;
}
