//! `shardcar`: parse and validate settings, build each subsystem's config from them, then call
//! [`shardcar::sidecar::run`].

use std::collections::HashMap;
use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use shardcar::config::{Given, LogFormat, RunArgs, Settings};
use shardcar::sidecar::Config;

/// Exit code for bad settings (EX_USAGE).
const EXIT_USAGE: u8 = 64;

#[derive(Parser)]
#[command(
    name = "shardcar",
    version,
    about = "ElasticJob-compatible job coordination for workers in any language"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the sidecar.
    Run(Box<RunArgs>),
    /// Operate jobs through a running sidecar's Admin API.
    Ctl(shardcar::ctl::CtlArgs),
    /// Print a settings file with every setting commented out (its meaning, default and an
    /// example), to start a `--config` file from: `shardcar config > shardcar.toml`.
    Config,
}

fn main() -> ExitCode {
    let matches = match Cli::command().try_get_matches() {
        Ok(matches) => matches,
        Err(e) => return clap_exit(&e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return clap_exit(&e),
    };
    match cli.command {
        Command::Run(_) => {}
        Command::Ctl(args) => return ctl(args),
        Command::Config => {
            print!("{}", shardcar::config::example_file());
            return ExitCode::SUCCESS;
        }
    }
    // Which of flag and variable each value came from is in the matches.
    let given = match matches.subcommand_matches("run") {
        Some(run) => Given::from_matches(run),
        None => Given::default(),
    };
    let env: HashMap<String, String> = std::env::vars().collect();
    // Every setting is checked before anything binds, by the settings and then by the
    // subsystem it configures.
    let config = match Settings::resolve(given, &env).and_then(Config::prepare) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("shardcar: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    init_logging(&config.settings, &env);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("shardcar: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The handlers are installed before anything binds: a SIGTERM that comes as the sidecar
    // starts is a drain like any other, not the default action that ends the process at once.
    let shutdown = {
        let _entered = runtime.enter();
        shutdown_signal()
    };
    let result = runtime.block_on(shardcar::sidecar::run(config, shutdown));
    // Tasks still running (a ZooKeeper client's, a stream's) are not waited for: the drain
    // already gave back what matters.
    runtime.shutdown_timeout(std::time::Duration::from_millis(20));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("shardcar: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Prints clap's message; help and version exit 0, a usage error 64.
fn clap_exit(e: &clap::Error) -> ExitCode {
    let _ = e.print();
    if e.use_stderr() {
        ExitCode::from(EXIT_USAGE)
    } else {
        ExitCode::SUCCESS
    }
}

/// `shardcar ctl`: one Admin call, on a small runtime, no logging.
fn ctl(args: shardcar::ctl::CtlArgs) -> ExitCode {
    let env: HashMap<String, String> = std::env::vars().collect();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("shardcar ctl: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(shardcar::ctl::run(args, &env)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shardcar ctl: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Logs to stderr, in colour only where a person reads it: when stderr is a terminal and
/// `NO_COLOR` is unset or empty (no-color.org). A log file, a pipe or journald gets plain text.
fn init_logging(settings: &Settings, env: &HashMap<String, String>) {
    // `Settings` already chose between --log-level, RUST_LOG and the rest, and checked it.
    let filter = tracing_subscriber::EnvFilter::try_new(&settings.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi =
        std::io::stderr().is_terminal() && env.get("NO_COLOR").is_none_or(|value| value.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match settings.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Installs the SIGTERM and SIGINT handlers now (inside the runtime) and returns what resolves
/// on either.
#[cfg(unix)]
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let interrupt = signal(SignalKind::interrupt());
    async move {
        match (term, interrupt) {
            (Ok(mut term), Ok(mut interrupt)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = interrupt.recv() => {}
                }
            }
            (Ok(mut one), Err(_)) | (Err(_), Ok(mut one)) => {
                one.recv().await;
            }
            (Err(_), Err(_)) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

#[cfg(not(unix))]
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
