//! The sidecar's log, end to end with the real binary: plain text wherever no person reads it
//! (a log file, as the harness and systemd give it: no ANSI colour codes), colour on a terminal
//! (a pseudo-terminal from util-linux `script`, which Debian always has), and `NO_COLOR`
//! honoured there.
#![allow(
    clippy::disallowed_methods,
    reason = "tests, benchmarks and examples run against real time and real processes"
)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::process::Process;
use common::sidecar::binary;
use common::{eventually, free_port, log_tail, Sidecar, SidecarOptions};

const ESC: u8 = 0x1b;
const WAIT: Duration = Duration::from_secs(30);

fn read(log: &Path) -> Vec<u8> {
    std::fs::read(log).unwrap_or_default()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[tokio::test]
async fn a_log_file_gets_no_colour_codes() {
    // An empty NO_COLOR counts as unset (no-color.org), so only the file turns colour off here.
    let car = Sidecar::start(SidecarOptions {
        env: vec![("NO_COLOR".into(), String::new())],
        ..SidecarOptions::standalone()
    })
    .await;
    // The line comes with fields (`listen=…`), which the text format sets in italics when it
    // colours. No SIGTERM here: one that lands between the bind and the sidecar's first poll of
    // its shutdown signal ends it by the default action, which this test is not about.
    let listening = eventually(WAIT, || async {
        contains(&read(car.log_path()), "shardcar listening").then_some(())
    })
    .await;
    assert!(
        listening.is_some(),
        "the sidecar did not log 'shardcar listening':\n{}",
        car.log_tail(40)
    );
    let log = read(car.log_path());
    assert!(
        !log.contains(&ESC),
        "the log file holds ANSI escape codes:\n{}",
        String::from_utf8_lossy(&log).escape_debug()
    );
}

/// `shardcar run` on a pseudo-terminal: `script` gives the sidecar a pty for stdin, stdout and
/// stderr, and copies what it writes there into `log`. `no_color` is the sidecar's `NO_COLOR`.
fn on_a_terminal(no_color: Option<&str>, log: &Path) -> Process {
    let sidecar = format!(
        "exec '{}' run --listen 127.0.0.1:{} --advertise-ip 127.0.0.2 --log-level info",
        binary().display(),
        free_port()
    );
    let mut command = Command::new("script");
    command.args(["--quiet", "--return", "--command", &sidecar, "/dev/null"]);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("SHARDCAR_") {
            command.env_remove(key);
        }
    }
    command.env_remove("NO_COLOR").env("SHELL", "/bin/sh");
    if let Some(value) = no_color {
        command.env("NO_COLOR", value);
    }
    Process::spawn("shardcar on a pty", command, log)
}

/// Runs the sidecar on a terminal until it has logged that it listens, stops it, and returns
/// what it wrote.
async fn terminal_output(no_color: Option<&str>) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = dir.path().join("pty.log");
    let mut process = on_a_terminal(no_color, &log);
    let listening = eventually(WAIT, || async {
        contains(&read(&log), "shardcar listening").then_some(())
    })
    .await;
    // SIGTERM to `script`, which passes it on; the hang-up of the pty ends the sidecar in any
    // case once `script` is gone (drop kills it).
    let status = process.stop(WAIT).await;
    assert!(
        listening.is_some(),
        "the sidecar on a pty did not log 'shardcar listening' within {WAIT:?} ({status}):\n{}",
        log_tail(&log, 40)
    );
    read(&log)
}

#[tokio::test]
async fn a_terminal_gets_colour() {
    let output = terminal_output(None).await;
    assert!(
        contains(&output, "\x1b["),
        "no ANSI colour codes on a terminal:\n{}",
        String::from_utf8_lossy(&output)
    );
}

#[tokio::test]
async fn no_color_turns_colour_off_on_a_terminal() {
    let output = terminal_output(Some("1")).await;
    assert!(
        contains(&output, "INFO"),
        "the terminal got no log lines:\n{}",
        String::from_utf8_lossy(&output)
    );
    assert!(
        !output.contains(&ESC),
        "ANSI escape codes on a terminal despite NO_COLOR=1:\n{}",
        String::from_utf8_lossy(&output).escape_debug()
    );
}
