//! The plugin process Velero's server starts (see `iar::velero_plugin`).

use std::process::ExitCode;

pub fn serve() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Velero's levels (logrus: debug, info, warning, error, ...) as
    // tracing's; $IAR_LOG wins. Logs go to stderr, which go-plugin's client
    // logs through Velero's server: stdout carries the handshake.
    let level = match iar::velero_plugin::handshake::log_level(&args) {
        Some("debug" | "trace") => "debug",
        Some("info") => "info",
        Some("error" | "fatal" | "panic") => "error",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(super::log_filter(level))
        .init();
    let config = iar::velero_plugin::Config::from_env();
    let result = super::backup::tokio_runtime()
        .and_then(|rt| rt.block_on(iar::velero_plugin::serve(config)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("iar (Velero plugin): {}", super::error_line(&e));
            ExitCode::from(2)
        }
    }
}
