//! A child process owned by a test: spawned with its output in a log file, signalled by pid
//! (via the `kill` command, no `unsafe`), and killed and reaped on drop — also when the test
//! panics.
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// A running (or exited, not yet dropped) child process.
pub struct Process {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Spawns `command` with stdin closed and stdout and stderr appended to `log`.
    ///
    /// # Panics
    /// When the log cannot be opened or the program cannot be started.
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> Process {
        let file = open_log(log);
        let err = file
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot clone log handle {}: {e}", log.display()));
        command
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err));
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({command:?}): {e}"));
        Process {
            name: name.to_string(),
            child,
            log: log.to_path_buf(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The exit status if the process has exited (reaping it), `None` while it runs.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child
            .try_wait()
            .unwrap_or_else(|e| panic!("cannot query {} (pid {}): {e}", self.name, self.pid()))
    }

    pub fn is_running(&mut self) -> bool {
        self.try_status().is_none()
    }

    /// Sends `signal` (`STOP`, `CONT`, `TERM`, `KILL`, …) if the process still runs. A process
    /// that has been reaped is never signalled: its pid may belong to someone else by now.
    pub fn signal(&mut self, signal: &str) {
        if !self.is_running() {
            return;
        }
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("cannot run `kill -{signal}`: {e}"));
        // `kill` fails only if the process exited in between; that is not an error here.
        let _ = status;
    }

    /// SIGSTOP, returning once every thread of the process has stopped ([`wait_stopped`]).
    pub fn pause(&mut self) {
        if !self.is_running() {
            return;
        }
        self.signal("STOP");
        wait_stopped(self.pid());
    }

    /// SIGKILL and reap; returns the exit status.
    pub fn kill_and_reap(&mut self) -> ExitStatus {
        // A stopped process dies on SIGKILL too, so no SIGCONT is needed.
        let _ = self.child.kill();
        self.child
            .wait()
            .unwrap_or_else(|e| panic!("cannot reap {} (pid {}): {e}", self.name, self.pid()))
    }

    /// Waits up to `timeout` for the process to exit; `None` if it is still running.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_status() {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM (after SIGCONT, in case it is paused), wait up to `grace`, then SIGKILL.
    pub async fn stop(&mut self, grace: Duration) -> ExitStatus {
        self.signal("CONT");
        self.signal("TERM");
        match self.wait_exit(grace).await {
            Some(status) => status,
            None => self.kill_and_reap(),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

/// Opens `path` for appending (creating it), so a restarted process adds to the same log.
pub fn open_log(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("cannot open log {}: {e}", path.display()))
}

/// Appends a marker line (e.g. "restarted") to a log.
pub fn mark_log(path: &Path, line: &str) {
    let mut file = open_log(path);
    let _ = writeln!(file, "===== harness: {line} =====");
}

/// Waits until every thread of process `pid` is stopped (or the process is gone), after a
/// SIGSTOP. `kill` returns once the signal is queued; the kernel then stops the threads of a
/// multi-threaded process one by one, as each next runs. On a loaded machine a thread of a
/// JVM could meanwhile still accept a connection and answer it.
///
/// # Panics
/// If some thread still runs after 10 s.
pub fn wait_stopped(pid: u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let running = running_threads(pid);
        if running.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pid {pid}: threads {running:?} still run 10 s after SIGSTOP"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The threads of `pid` that are not stopped, by `/proc/{pid}/task/*/stat` (empty when the
/// process is gone). A thread's state is the field after the command name, which is in
/// parentheses and may itself hold spaces or parentheses.
fn running_threads(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut running = Vec::new();
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue; // the thread ended meanwhile
        };
        let state = stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next());
        // T: stopped by a signal; t: stopped by a tracer; Z, X: ended.
        if !matches!(state, Some("T" | "t" | "Z" | "X")) {
            running.push(format!(
                "{} ({})",
                task.file_name().to_string_lossy(),
                state.unwrap_or("?")
            ));
        }
    }
    running
}
