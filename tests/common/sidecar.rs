//! A real `shardcar run` process for tests. It listens on `127.0.0.1:{free port}` (or, with
//! `unix_socket`, on a Unix socket in its temp dir) and advertises its own loopback IP
//! (127.0.0.2, 127.0.0.3, …), so several sidecars of one test look like several hosts to
//! ZooKeeper. Ready = its gRPC address accepts connections (it binds only after connecting to
//! ZooKeeper). Its stderr goes to a log file; drop kills and reaps it.
//! `SHARDCAR_TEST_BIN` overrides the binary (see [`binary`]); `SHARDCAR_TEST_LOG_DIR` keeps every
//! sidecar's log there when it is dropped.
use super::free_port;
use super::log_tail;
use super::process::{mark_log, Process};
use shardcar::proto::worker_service_client::WorkerServiceClient;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;
use tonic::transport::Channel;

/// The `shardcar` binary: `SHARDCAR_TEST_BIN` if set (e.g. a release build), else the one Cargo
/// built for this test.
pub fn binary() -> PathBuf {
    std::env::var_os("SHARDCAR_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_shardcar")))
}

/// How long a sidecar may take to accept connections.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How to run a sidecar. `Default` is standalone (no ZooKeeper), namespace `shardcar-test`,
/// advertised IP 127.0.0.2, 4 s session timeout, log level `info,shardcar=debug`.
#[derive(Clone, Debug)]
pub struct SidecarOptions {
    /// ZooKeeper connect string; `None` runs the in-memory standalone mode.
    pub zk: Option<String>,
    pub namespace: String,
    pub advertise_ip: String,
    /// Passed as `--session-timeout {ms}ms`, only together with `zk`.
    pub session_timeout: Duration,
    /// Passed as `--log-level`; empty leaves the flag out.
    pub log_level: String,
    /// Appended after the harness's own flags.
    pub extra_args: Vec<String>,
    /// Extra environment variables. Inherited `SHARDCAR_*` variables are always removed.
    pub env: Vec<(String, String)>,
    /// Listen on a Unix socket in the sidecar's temp dir (`unix:///…/grpc.sock`) instead of
    /// `127.0.0.1:{free port}`: the transport of workers on the sidecar's own host.
    pub unix_socket: bool,
}

impl Default for SidecarOptions {
    fn default() -> Self {
        SidecarOptions {
            zk: None,
            namespace: "shardcar-test".into(),
            advertise_ip: "127.0.0.2".into(),
            session_timeout: Duration::from_secs(4),
            log_level: "info,shardcar=debug".into(),
            extra_args: Vec::new(),
            env: Vec::new(),
            unix_socket: false,
        }
    }
}

impl SidecarOptions {
    /// A sidecar on ZooKeeper `zk` advertising `ip`, other settings as `Default`.
    pub fn zk(zk: impl Into<String>, ip: impl Into<String>) -> Self {
        SidecarOptions {
            zk: Some(zk.into()),
            advertise_ip: ip.into(),
            ..Default::default()
        }
    }

    /// A standalone (in-memory) sidecar.
    pub fn standalone() -> Self {
        SidecarOptions::default()
    }
}

/// A running `shardcar` process.
pub struct Sidecar {
    options: SidecarOptions,
    port: u16,
    /// The socket's path when `options.unix_socket`.
    socket: PathBuf,
    log: PathBuf,
    process: Option<Process>,
    // Dropped after the process (field order): holds the log file.
    _dir: tempfile::TempDir,
}

impl Sidecar {
    /// Starts `shardcar run` and waits until it accepts connections.
    ///
    /// # Panics
    /// When it exits or does not accept connections within 30 s; the message has its log tail.
    pub async fn start(options: SidecarOptions) -> Sidecar {
        let mut sidecar = Sidecar::spawn_only(options);
        sidecar.wait_ready(READY_TIMEOUT).await;
        sidecar
    }

    /// Starts `shardcar run` and returns at once, ready or not.
    pub fn spawn_only(options: SidecarOptions) -> Sidecar {
        let dir = tempfile::Builder::new()
            .prefix("shardcar-sidecar-")
            .tempdir()
            .expect("cannot create a temp dir for a sidecar");
        let mut sidecar = Sidecar {
            log: dir.path().join("shardcar.log"),
            socket: dir.path().join("grpc.sock"),
            port: free_port(),
            options,
            process: None,
            _dir: dir,
        };
        sidecar.spawn();
        sidecar
    }

    /// The command line used (program first), for messages.
    pub fn args(&self) -> Vec<String> {
        let o = &self.options;
        let mut args = vec![
            "run".to_string(),
            "--listen".into(),
            self.listen(),
            "--advertise-ip".into(),
            o.advertise_ip.clone(),
            "--namespace".into(),
            o.namespace.clone(),
        ];
        if let Some(zk) = &o.zk {
            args.push("--zk".into());
            args.push(zk.clone());
            args.push("--session-timeout".into());
            args.push(format!("{}ms", o.session_timeout.as_millis()));
        }
        if !o.log_level.is_empty() {
            args.push("--log-level".into());
            args.push(o.log_level.clone());
        }
        args.extend(o.extra_args.iter().cloned());
        args
    }

    fn spawn(&mut self) {
        let mut command = Command::new(binary());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SHARDCAR_") {
                command.env_remove(key);
            }
        }
        command
            .args(self.args())
            .env("RUST_BACKTRACE", "1")
            // Plain text in the log file.
            .env("NO_COLOR", "1")
            .envs(self.options.env.iter().map(|(k, v)| (k, v)));
        self.process = Some(Process::spawn(
            &format!("shardcar {}", self.options.advertise_ip),
            command,
            &self.log,
        ));
    }

    async fn wait_ready(&mut self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let connect = async {
                if self.options.unix_socket {
                    tokio::net::UnixStream::connect(&self.socket)
                        .await
                        .map(drop)
                } else {
                    tokio::net::TcpStream::connect(self.addr()).await.map(drop)
                }
            };
            if let Ok(Ok(())) = tokio::time::timeout(Duration::from_millis(500), connect).await {
                return;
            }
            let exited = self.process.as_mut().and_then(Process::try_status);
            if let Some(status) = exited {
                panic!(
                    "shardcar exited with {status} before accepting connections on {}\n\
                     command: shardcar {}\n--- last lines of {} ---\n{}",
                    self.listen(),
                    self.args().join(" "),
                    self.log.display(),
                    log_tail(&self.log, 60)
                );
            }
            if tokio::time::Instant::now() >= deadline {
                if let Some(process) = self.process.as_mut() {
                    process.kill_and_reap();
                }
                panic!(
                    "shardcar did not accept connections on {} within {timeout:?}\n\
                     command: shardcar {}\n--- last lines of {} ---\n{}",
                    self.listen(),
                    self.args().join(" "),
                    self.log.display(),
                    log_tail(&self.log, 60)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn options(&self) -> &SidecarOptions {
        &self.options
    }

    /// Its `--listen`: `127.0.0.1:{port}`, or `unix://{socket}` with `unix_socket`.
    pub fn listen(&self) -> String {
        if self.options.unix_socket {
            format!("unix://{}", self.socket.display())
        } else {
            format!("127.0.0.1:{}", self.port)
        }
    }

    /// The gRPC listen address, `127.0.0.1:{port}`.
    ///
    /// # Panics
    /// On a sidecar listening on a Unix socket (`unix_socket`): use [`Sidecar::endpoint`].
    pub fn addr(&self) -> SocketAddr {
        assert!(
            !self.options.unix_socket,
            "this sidecar listens on {}, not on TCP",
            self.listen()
        );
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// For gRPC clients ([`shardcar::ctl::connect`]): `http://127.0.0.1:{port}`, or
    /// `unix://{socket}` with `unix_socket`.
    pub fn endpoint(&self) -> String {
        if self.options.unix_socket {
            self.listen()
        } else {
            format!("http://{}", self.addr())
        }
    }

    /// The advertised IP (the `{ip}` of its instance ids and `servers/{ip}`).
    pub fn ip(&self) -> &str {
        &self.options.advertise_ip
    }

    /// The pid of the current process.
    ///
    /// # Panics
    /// When it is not running (after `kill`/a reaped exit).
    pub fn pid(&self) -> u32 {
        self.process
            .as_ref()
            .map(Process::pid)
            .expect("the sidecar is not running")
    }

    /// Whether the process still runs (a paused one does).
    pub fn is_running(&mut self) -> bool {
        self.process.as_mut().is_some_and(Process::is_running)
    }

    /// A connected gRPC client.
    ///
    /// # Panics
    /// When it cannot connect.
    pub async fn client(&self) -> WorkerServiceClient<Channel> {
        shardcar::ctl::connect(&self.endpoint())
            .await
            .map(WorkerServiceClient::new)
            .unwrap_or_else(|e| panic!("cannot connect to the sidecar at {}: {e}", self.endpoint()))
    }

    /// SIGKILL and reap: no shutdown at all, its ZooKeeper session lives until it times out.
    pub fn kill(&mut self) {
        if let Some(process) = self.process.as_mut() {
            process.kill_and_reap();
            mark_log(&self.log, "killed (SIGKILL)");
        }
    }

    /// SIGSTOP: it keeps its sockets and answers nothing, its ZooKeeper session times out.
    pub fn pause(&mut self) {
        if let Some(process) = self.process.as_mut() {
            process.pause();
        }
    }

    /// SIGCONT after [`Sidecar::pause`].
    pub fn resume(&mut self) {
        if let Some(process) = self.process.as_mut() {
            process.signal("CONT");
        }
    }

    /// SIGTERM (graceful shutdown); see [`Sidecar::wait_exit`].
    pub fn terminate(&mut self) {
        if let Some(process) = self.process.as_mut() {
            process.signal("TERM");
        }
    }

    /// Waits up to `timeout` for the process to exit: its status, or `None` if it still runs.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        match self.process.as_mut() {
            Some(process) => process.wait_exit(timeout).await,
            None => None,
        }
    }

    /// Kills the process if it runs (SIGKILL), then starts it again with the same options and
    /// port, and waits until it accepts connections. The log continues in the same file.
    pub async fn restart(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill_and_reap();
        }
        mark_log(&self.log, "restarting");
        self.spawn();
        self.wait_ready(READY_TIMEOUT).await;
    }

    /// Everything the process (and earlier runs, after `restart`) wrote to stdout and stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }
}

impl Drop for Sidecar {
    /// A failing test shows the end of each sidecar's log: what it decided, and why.
    fn drop(&mut self) {
        // SHARDCAR_TEST_LOG_DIR keeps every sidecar's log, passed or not (to compare a failing
        // run with passing ones).
        if let Some(dir) = std::env::var_os("SHARDCAR_TEST_LOG_DIR") {
            let name = format!(
                "{}-{}-{}-{}.log",
                self.options.namespace,
                self.options.advertise_ip,
                std::process::id(),
                self.port
            );
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::copy(&self.log, std::path::Path::new(&dir).join(name));
        }
        if std::thread::panicking() {
            // The whole log is kept beside the temp dir, which goes with this value.
            let kept = std::env::temp_dir().join(format!(
                "shardcar-failed-{}-{}.log",
                std::process::id(),
                self.options.advertise_ip
            ));
            let _ = std::fs::copy(&self.log, &kept);
            eprintln!(
                "----- last lines of sidecar {} (whole log kept in {}) -----\n{}",
                self.options.advertise_ip,
                kept.display(),
                log_tail(&self.log, 80)
            );
        }
    }
}
