//! `shardcar`: parse and validate settings, then call [`shardcar::sidecar::run`].

use std::collections::HashMap;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use shardcar::config::{Flags, LogFormat, Settings};

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

#[derive(Args)]
struct RunArgs {
    /// TOML settings file; flags and SHARDCAR_* variables override it
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// ZooKeeper connect string (h1:2181,h2:2181); without it the sidecar runs standalone.
    #[arg(long, value_name = "HOSTS")]
    zk: Option<String>,
    /// ZooKeeper namespace (ElasticJob's registry-center namespace) [default: shardcar]
    #[arg(long, value_name = "NS")]
    namespace: Option<String>,
    /// gRPC listen address: host:port or unix:///path [default: 127.0.0.1:50061]
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// IPv4 address this sidecar registers as its server (default: detected)
    #[arg(long, value_name = "IP")]
    advertise_ip: Option<String>,
    /// ZooKeeper session timeout [default: 10s]
    #[arg(long, value_name = "DURATION")]
    session_timeout: Option<String>,
    /// ZooKeeper connection timeout [default: 15s]
    #[arg(long, value_name = "DURATION")]
    connection_timeout: Option<String>,
    /// ZooKeeper digest credentials user:password (nodes get creator-only ACLs)
    #[arg(long, value_name = "USER:PASS")]
    digest: Option<String>,
    /// Worker lease length, at most half the session timeout [default: half the session timeout]
    #[arg(long, value_name = "DURATION")]
    lease: Option<String>,
    /// HTTP/2 keepalive ping interval on worker connections [default: 1s]
    #[arg(long, value_name = "DURATION")]
    keepalive_interval: Option<String>,
    /// A worker that does not answer a ping within this long is dead [default: 3s]
    #[arg(long, value_name = "DURATION")]
    keepalive_timeout: Option<String>,
    /// SIGTERM: the drain ends and the process exits within this long (at least the lease) [default: 10s]
    #[arg(long, value_name = "DURATION")]
    shutdown_grace: Option<String>,
    /// Log filter (RUST_LOG syntax) [default: info]
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<String>,
    /// text or json [default: text]
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics (host:port)
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    /// Finished executions kept in memory for `ctl executions` [default: 1000]
    #[arg(long, value_name = "N")]
    history_size: Option<String>,
    /// Append finished executions to FILE as JSON lines
    #[arg(long, value_name = "FILE")]
    history_file: Option<String>,
    /// Export execution spans by OTLP/gRPC to URL [default: $OTEL_EXPORTER_OTLP_ENDPOINT, else none]
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(EXIT_USAGE);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    let args = match cli.command {
        Command::Run(args) => *args,
        Command::Ctl(args) => return ctl(args),
        Command::Config => {
            print!("{}", shardcar::config::example_file());
            return ExitCode::SUCCESS;
        }
    };
    let flags = Flags {
        config: args.config,
        zk: args.zk,
        namespace: args.namespace,
        listen: args.listen,
        advertise_ip: args.advertise_ip,
        session_timeout: args.session_timeout,
        connection_timeout: args.connection_timeout,
        digest: args.digest,
        lease: args.lease,
        keepalive_interval: args.keepalive_interval,
        keepalive_timeout: args.keepalive_timeout,
        shutdown_grace: args.shutdown_grace,
        log_level: args.log_level,
        log_format: args.log_format,
        metrics_listen: args.metrics_listen,
        history_size: args.history_size,
        history_file: args.history_file,
        otlp_endpoint: args.otlp_endpoint,
    };
    let env: HashMap<String, String> = std::env::vars().collect();
    let settings = match Settings::resolve(flags, &env) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("shardcar: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    init_logging(&settings);
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
    let result = runtime.block_on(shardcar::sidecar::run(settings, shutdown_signal()));
    // Tasks still running (a ZooKeeper client's, a stream's) are not waited for: the drain
    // already gave back what matters.
    runtime.shutdown_timeout(std::time::Duration::from_millis(20));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("shardcar: {e}");
            ExitCode::FAILURE
        }
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

fn init_logging(settings: &Settings) {
    // `Settings` already chose between --log-level, RUST_LOG and the rest, and checked it.
    let filter = tracing_subscriber::EnvFilter::try_new(&settings.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match settings.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
