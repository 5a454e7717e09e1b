//! A real PostgreSQL for tests, from Debian's packages (`apt-get install postgresql`, done by
//! `scripts/install-deps.sh`): `initdb` into a temp dir, then `postgres` on a free loopback port
//! with its Unix socket in the same temp dir. PostgreSQL refuses to run as root, so when the
//! tests do, both run as `nobody` (the temp dir is handed to that user). Dropping the
//! [`Postgres`] stops the server (fast shutdown, then SIGKILL) and removes the directory.
//!
//! The cluster has a superuser `postgres` (password [`SUPERUSER_PASSWORD`], scram-sha-256 over
//! TCP) and, made by [`Postgres::start`], a role [`USER`] with password [`PASSWORD`] owning the
//! database [`DATABASE`], which is what a sidecar is given.
//!
//! Override: `SHARDCAR_TEST_PG_BIN`, the directory of `initdb` and `postgres` (default: the
//! newest `/usr/lib/postgresql/*/bin`).
use super::free_port;
use super::log_tail;
use super::process::{mark_log, Process};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub const SUPERUSER_PASSWORD: &str = "pg-test-superuser";
/// The role and database a sidecar uses.
pub const USER: &str = "shardcar";
pub const PASSWORD: &str = "sidecar-test-pw";
pub const DATABASE: &str = "elasticjob";

/// How long the server may take to accept logins.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a fast shutdown may take before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// One PostgreSQL server, stopped on drop.
pub struct Postgres {
    port: u16,
    bin: PathBuf,
    data: PathBuf,
    sockets: PathBuf,
    log: PathBuf,
    /// The uid and gid to run as (when the tests run as root).
    run_as: Option<(u32, u32)>,
    process: Option<Process>,
    // Dropped last: the server stops before its directory goes.
    _dir: tempfile::TempDir,
}

/// The directory of `initdb` and `postgres`.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SHARDCAR_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!(
            "no PostgreSQL under /usr/lib/postgresql/*/bin: install Debian's `postgresql` \
             (scripts/install-deps.sh) or set SHARDCAR_TEST_PG_BIN"
        )
    })
}

/// `nobody`'s uid and gid when this process is root (PostgreSQL will not run as root).
fn unprivileged() -> Option<(u32, u32)> {
    let id = |args: &[&str]| -> Option<u32> {
        let out = Command::new("id").args(args).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id(&["-u"]).expect("cannot run `id -u`") != 0 {
        return None;
    }
    let nobody = |flag: &str| {
        id(&[flag, "nobody"])
            .unwrap_or_else(|| panic!("no user `nobody` to run PostgreSQL as (tests run as root)"))
    };
    Some((nobody("-u"), nobody("-g")))
}

impl Postgres {
    /// Creates a cluster, starts it, and creates [`USER`] and [`DATABASE`].
    ///
    /// # Panics
    /// When PostgreSQL is not installed, `initdb` fails, or the server does not accept logins
    /// within 60 s (the panic shows its log).
    pub async fn start() -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("shardcar-pg-")
            .tempdir()
            .expect("cannot create a temp dir for PostgreSQL");
        let run_as = unprivileged();
        let sockets = dir.path().join("sockets");
        std::fs::create_dir(&sockets).expect("cannot create the socket dir");
        let pwfile = dir.path().join("pwfile");
        std::fs::write(&pwfile, format!("{SUPERUSER_PASSWORD}\n")).expect("cannot write pwfile");
        let mut pg = Postgres {
            port: free_port(),
            bin: bin_dir(),
            data: dir.path().join("data"),
            sockets,
            log: dir.path().join("postgres.log"),
            run_as,
            process: None,
            _dir: dir,
        };
        if let Some((uid, gid)) = run_as {
            for path in [pg._dir.path(), &pg.sockets, &pwfile] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid))
                    .unwrap_or_else(|e| panic!("cannot chown {}: {e}", path.display()));
            }
        }
        let out = pg
            .command("initdb")
            .arg("-D")
            .arg(&pg.data)
            .args(["-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"])
            .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .output()
            .unwrap_or_else(|e| panic!("cannot run initdb from {}: {e}", pg.bin.display()));
        assert!(
            out.status.success(),
            "initdb failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        pg.spawn();
        pg.wait_ready().await;
        let admin = pg.superuser().await;
        for statement in [
            format!("CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'"),
            format!("CREATE DATABASE {DATABASE} OWNER {USER}"),
        ] {
            admin
                .batch_execute(&statement)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
        pg
    }

    /// A command for one of PostgreSQL's programs, run as the unprivileged user if needed.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid).current_dir(self._dir.path());
        }
        command.env("LC_ALL", "C");
        command
    }

    fn spawn(&mut self) {
        let mut command = self.command("postgres");
        command
            .arg("-D")
            .arg(&self.data)
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(&self.sockets)
            .args(["-c", "listen_addresses=127.0.0.1"])
            // Fast and small: nothing here needs to survive a crash of the machine.
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "shared_buffers=16MB"])
            .args(["-c", "max_connections=40"]);
        self.process = Some(Process::spawn("postgres", command, &self.log));
    }

    /// Waits until the superuser can log in.
    async fn wait_ready(&mut self) {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            let url = self.superuser_url();
            let connect = tokio_postgres::connect(&url, tokio_postgres::NoTls);
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), connect).await {
                return;
            }
            if let Some(status) = self.process.as_mut().and_then(Process::try_status) {
                panic!(
                    "postgres (port {}) exited with {status} before serving\n--- last lines of {} ---\n{}",
                    self.port,
                    self.log.display(),
                    log_tail(&self.log, 40)
                );
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "postgres (port {}) did not serve within {READY_TIMEOUT:?}\n--- last lines of {} ---\n{}",
                    self.port,
                    self.log.display(),
                    log_tail(&self.log, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://user:password@127.0.0.1:{port}/database`.
    pub fn url_for(&self, user: &str, password: &str, database: &str) -> String {
        format!(
            "postgres://{user}:{password}@127.0.0.1:{}/{database}",
            self.port
        )
    }

    /// What a sidecar is given: [`USER`] on [`DATABASE`].
    pub fn url(&self) -> String {
        self.url_for(USER, PASSWORD, DATABASE)
    }

    fn superuser_url(&self) -> String {
        self.url_for("postgres", SUPERUSER_PASSWORD, "postgres")
    }

    /// A client logged in as [`USER`] to [`DATABASE`]; its connection runs in a task.
    ///
    /// # Panics
    /// When it cannot log in.
    pub async fn client(&self) -> tokio_postgres::Client {
        connect(&self.url()).await
    }

    async fn superuser(&self) -> tokio_postgres::Client {
        connect(&self.superuser_url()).await
    }

    /// Stops the server (fast shutdown: clients are disconnected); the data stays, so
    /// [`Postgres::start_again`] brings it back on the same port.
    pub async fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.signal("INT");
            if process.wait_exit(STOP_GRACE).await.is_none() {
                process.kill_and_reap();
            }
            mark_log(&self.log, "stopped");
        }
    }

    /// Starts the server again after [`Postgres::stop`] and waits until it serves.
    pub async fn start_again(&mut self) {
        if self.process.is_none() {
            mark_log(&self.log, "starting again");
            self.spawn();
            self.wait_ready().await;
        }
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            // Fast shutdown, so the server leaves no shared memory behind; SIGKILL (on the
            // process's own drop) if it takes too long.
            process.signal("INT");
            let deadline = std::time::Instant::now() + STOP_GRACE;
            while process.is_running() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if std::thread::panicking() {
            eprintln!(
                "----- last lines of postgres (port {}) -----\n{}",
                self.port,
                log_tail(&self.log, 30)
            );
        }
    }
}

/// A client of `url`, its connection driven by a task of its own.
///
/// # Panics
/// When it cannot log in within 10 s.
pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_postgres::connect(url, tokio_postgres::NoTls),
    )
    .await
    .unwrap_or_else(|_| panic!("no login to {url} within 10 s"))
    .unwrap_or_else(|e| panic!("cannot log in to {url}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}
