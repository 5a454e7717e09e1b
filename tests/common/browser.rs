//! A real browser for tests: headless Chromium driven over WebDriver by Debian's `chromedriver`
//! (`apt-get install chromium chromium-driver`, done by `scripts/install-deps.sh`), through
//! fantoccini. Each [`Browser`] has its own chromedriver on a free port, in a process group of
//! its own, and its own profile directory; dropping it kills chromedriver, every Chromium
//! process it started (found by process group, parentage and profile directory) and removes the
//! profile, also when the test panics. Every wait has a deadline and says what it saw.
//!
//! Overrides: `SHARDCAR_TEST_CHROMEDRIVER` (the driver), `SHARDCAR_TEST_CHROMIUM` (the browser
//! binary).
//!
//! It is not in `common/mod.rs` (only the console's tests need a browser): a test file includes
//! it with `#[path = "common/browser.rs"] mod browser;` beside `mod common;`.
use crate::common::free_port;
use crate::common::log_tail;
use crate::common::process::Process;
use fantoccini::elements::Element;
use fantoccini::error::{CmdError, ErrorStatus};
use fantoccini::{Client, ClientBuilder, Locator};
use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long chromedriver and Chromium may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(50);

fn chromedriver() -> PathBuf {
    std::env::var_os("SHARDCAR_TEST_CHROMEDRIVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("chromedriver"))
}

fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("SHARDCAR_TEST_CHROMIUM") {
        return PathBuf::from(path);
    }
    // Debian's /usr/bin/chromium is a shell wrapper around this binary.
    let direct = Path::new("/usr/lib/chromium/chromium");
    if direct.exists() {
        direct.to_path_buf()
    } else {
        PathBuf::from("/usr/bin/chromium")
    }
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// A headless Chromium session; see the module docs.
pub struct Browser {
    client: Option<Client>,
    driver: Option<Process>,
    driver_pid: u32,
    log: PathBuf,
    profile: tempfile::TempDir,
    // Dropped last: holds the driver's log.
    _dir: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session.
    ///
    /// # Panics
    /// When either is missing or does not start within a minute (with chromedriver's log).
    pub async fn start() -> Browser {
        let dir = tempfile::Builder::new()
            .prefix("shardcar-browser-")
            .tempdir()
            .expect("cannot create a temp dir for the browser");
        let profile = tempfile::Builder::new()
            .prefix("shardcar-chromium-profile-")
            .tempdir()
            .expect("cannot create a Chromium profile dir");
        let log = dir.path().join("chromedriver.log");
        let port = free_port();
        let mut command = Command::new(chromedriver());
        command
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            // Chromium's own scratch (its singleton socket's directory, left behind when it is
            // killed) goes into the dir removed with this browser, not the machine's /tmp.
            .env("TMPDIR", dir.path())
            // Its own process group: everything it starts is killed with it.
            .process_group(0);
        let driver = Process::spawn("chromedriver", command, &log);
        let driver_pid = driver.pid();
        let mut browser = Browser {
            client: None,
            driver: Some(driver),
            driver_pid,
            log,
            profile,
            _dir: dir,
        };
        let mut args = vec![
            "--headless=new".to_string(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1400,1000".into(),
            "--no-first-run".into(),
            "--no-default-browser-check".into(),
            "--disable-extensions".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-breakpad".into(),
            "--disable-crash-reporter".into(),
            // Only this machine: nothing is resolved, addresses are used as they are.
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1".into(),
            format!("--user-data-dir={}", browser.profile.path().display()),
        ];
        if running_as_root() {
            // Chromium's sandbox refuses to run as root.
            args.push("--no-sandbox".into());
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "binary": chromium(), "args": args }),
        );
        // Confirmation dialogs stay open until the test answers them.
        capabilities.insert(
            "unhandledPromptBehavior".into(),
            serde_json::json!("ignore"),
        );
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        let url = format!("http://127.0.0.1:{port}");
        let client = loop {
            let attempt =
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(capabilities.clone())
                    .connect(&url)
                    .await;
            match attempt {
                Ok(client) => break client,
                Err(e) => {
                    let exited = browser.driver.as_mut().and_then(Process::try_status);
                    if exited.is_some() || tokio::time::Instant::now() >= deadline {
                        panic!(
                            "cannot start a headless Chromium through {} ({e}; driver exit: {exited:?}); \
                             install Debian's chromium and chromium-driver (scripts/install-deps.sh)\n\
                             --- chromedriver log ---\n{}",
                            chromedriver().display(),
                            log_tail(&browser.log, 40)
                        );
                    }
                    tokio::time::sleep(POLL * 2).await;
                }
            }
        };
        browser.client = Some(client);
        browser
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("the browser is closed")
    }

    /// Opens `url` and waits for the page to load.
    pub async fn goto(&self, url: &str) {
        self.client()
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
    }

    pub async fn current_url(&self) -> String {
        self.client()
            .current_url()
            .await
            .map(|u| u.to_string())
            .unwrap_or_default()
    }

    /// The page's HTML, for failure messages.
    pub async fn source(&self) -> String {
        self.client().source().await.unwrap_or_default()
    }

    /// Runs a script in the page and returns its value.
    pub async fn execute(&self, script: &str) -> serde_json::Value {
        self.client()
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Waits for an element matching `css`.
    pub async fn find(&self, css: &str, timeout: Duration) -> Element {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Ok(element) = self.client().find(Locator::Css(css)).await {
                return element;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "no element {css:?} within {timeout:?} at {}\n--- page ---\n{}",
                    self.current_url().await,
                    self.source().await
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The text of the first element matching `css`, `None` when there is none. Finding an
    /// element and reading its text are two requests: when the page replaces the element
    /// between them (a live update re-renders its part), the new one is found and read.
    pub async fn text(&self, css: &str) -> Option<String> {
        for _ in 0..STALE_READS {
            let element = self.client().find(Locator::Css(css)).await.ok()?;
            match element.text().await {
                Ok(text) => return Some(text),
                Err(CmdError::Standard(w)) if w.error == ErrorStatus::StaleElementReference => {}
                Err(_) => return None,
            }
        }
        panic!("{css:?} was replaced {STALE_READS} times in a row while its text was read");
    }

    /// Waits until `check` holds for the text of `css` (an absent element reads as `None`),
    /// and returns that text.
    pub async fn wait_text<F>(&self, css: &str, timeout: Duration, mut check: F) -> Option<String>
    where
        F: FnMut(Option<&str>) -> bool,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let text = self.text(css).await;
            if check(text.as_deref()) {
                return text;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "{css:?} never read as expected within {timeout:?} (last: {text:?}) at {}\n--- page ---\n{}",
                    self.current_url().await,
                    self.source().await
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Clicks the element matching `css` (found again if the page replaced it meanwhile).
    pub async fn click(&self, css: &str, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let element = self.find(css, timeout).await;
            match element.click().await {
                Ok(()) => return,
                Err(e) if tokio::time::Instant::now() < deadline && retryable(&e) => {
                    tokio::time::sleep(POLL).await;
                }
                Err(e) => panic!("cannot click {css:?}: {e}"),
            }
        }
    }

    /// Replaces the value of the input matching `css` with `text`, as typed.
    pub async fn type_into(&self, css: &str, text: &str, timeout: Duration) {
        let element = self.find(css, timeout).await;
        element
            .clear()
            .await
            .unwrap_or_else(|e| panic!("cannot clear {css:?}: {e}"));
        element
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("cannot type into {css:?}: {e}"));
    }

    /// Waits for a confirmation dialog, accepts it, and returns its question.
    pub async fn accept_confirm(&self, timeout: Duration) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Ok(question) = self.client().get_alert_text().await {
                self.client()
                    .accept_alert()
                    .await
                    .unwrap_or_else(|e| panic!("cannot accept the dialog {question:?}: {e}"));
                return question;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("no confirmation dialog within {timeout:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the page's URL satisfies `check`.
    pub async fn wait_url<F: Fn(&str) -> bool>(&self, timeout: Duration, check: F) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let url = self.current_url().await;
            if check(&url) {
                return url;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("the page stayed at {url} for {timeout:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Resizes the window (a screenshot shows the window only).
    pub async fn resize(&self, width: u32, height: u32) {
        self.client()
            .set_window_size(width, height)
            .await
            .unwrap_or_else(|e| panic!("cannot resize the window: {e}"));
    }

    /// Saves a PNG of the window to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let png = self
            .client()
            .screenshot()
            .await
            .unwrap_or_else(|e| panic!("cannot take a screenshot: {e}"));
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        std::fs::write(path, png)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }

    /// Ends the WebDriver session (Chromium exits); drop does the rest.
    pub async fn close(mut self) {
        if let Some(client) = self.client.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), client.close()).await;
        }
    }

    /// Every process of this browser: chromedriver's group, its descendants, and anything
    /// running with this browser's profile directory.
    fn processes(&self) -> BTreeSet<u32> {
        let marker = self.profile.path().display().to_string();
        let mut table: Vec<(u32, u32, u32, bool)> = Vec::new(); // pid, ppid, pgid, ours by cmdline
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return BTreeSet::new();
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            if fields.first() == Some(&"Z") {
                continue; // already dead, waiting to be reaped
            }
            let (Some(ppid), Some(pgid)) = (
                fields.get(1).and_then(|v| v.parse().ok()),
                fields.get(2).and_then(|v| v.parse().ok()),
            ) else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let ours = String::from_utf8_lossy(&cmdline).contains(&marker);
            table.push((pid, ppid, pgid, ours));
        }
        let mut found: BTreeSet<u32> = table
            .iter()
            .filter(|(pid, _, pgid, ours)| {
                *pid == self.driver_pid || *pgid == self.driver_pid || *ours
            })
            .map(|(pid, ..)| *pid)
            .collect();
        loop {
            let more: Vec<u32> = table
                .iter()
                .filter(|(pid, ppid, ..)| found.contains(ppid) && !found.contains(pid))
                .map(|(pid, ..)| *pid)
                .collect();
            if more.is_empty() {
                break;
            }
            found.extend(more);
        }
        found.remove(&std::process::id());
        found
    }
}

/// How many times in a row [`Browser::text`] may find its element replaced before it gives up.
const STALE_READS: usize = 20;

fn retryable(e: &CmdError) -> bool {
    matches!(
        e,
        CmdError::Standard(w) if matches!(
            w.error,
            ErrorStatus::StaleElementReference
                | ErrorStatus::ElementNotInteractable
                | ErrorStatus::ElementClickIntercepted
        )
    )
}

impl Drop for Browser {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "----- last lines of chromedriver's log -----\n{}",
                log_tail(&self.log, 30)
            );
        }
        // SIGKILL everything of this browser until nothing is left (bounded).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let left = self.processes();
            if left.is_empty() {
                break;
            }
            for pid in &left {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status();
            }
            // Reap chromedriver itself, our child.
            if let Some(driver) = self.driver.as_mut() {
                driver.try_status();
            }
            if std::time::Instant::now() >= deadline {
                eprintln!("browser processes still alive after SIGKILL: {left:?}");
                break;
            }
            std::thread::sleep(POLL);
        }
        if let Some(mut driver) = self.driver.take() {
            driver.kill_and_reap();
        }
    }
}
