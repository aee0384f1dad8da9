//! Argument parsing and output only.

/// `print!` and `println!` for a command's output: a reader that went
/// away (`iar run … | head`) ends the command quietly, as it does any Unix
/// tool, instead of panicking in `println!`. SIGPIPE stays ignored (Rust's
/// default) because the same process writes to sockets.
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::write_stdout(format_args!($($arg)*), false) };
}
macro_rules! outln {
    () => { $crate::cli::write_stdout(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::cli::write_stdout(format_args!($($arg)*), true) };
}

mod backup;
mod bench;
mod componentize;
mod conformance;
mod controller;
mod delete;
mod describe;
mod inspect;
mod install;
mod new;
mod plugin;
mod progress;
mod repository;
mod restore;
mod restore_wait;
mod run;
mod schedule;
mod test;
mod through_cluster;
mod velero;
mod volume;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "iar",
    version,
    about = "The item action runtime: Kubernetes backup item actions as sandboxed WebAssembly components"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run plugins on one item, without a cluster, and print what they return
    /// (execute, or progress, or get-related-items with --related).
    Run(run::RunArgs),
    /// Show what a plugin is: name, contract version, interfaces, imports, exports, applies-to, size, digest.
    Inspect(inspect::InspectArgs),
    /// Back up manifests through every plugin in a directory, wait for their
    /// operations, finalize; exits 0 only when the backup Completed.
    Backup(backup::BackupArgs),
    /// Continue a backup that a killed process left behind.
    Resume(backup::ResumeArgs),
    /// Show one backup: phase, counts, errors, and its operations.
    Describe(describe::DescribeArgs),
    /// List the backups in a store, one line each.
    Get(describe::GetArgs),
    /// Delete the backups whose expiration (creation + ttl) has passed and
    /// that have ended; one line per backup deleted or failed.
    Gc(backup::GcArgs),
    /// Print a backup's log (Velero's `backup logs`).
    Logs(delete::LogsArgs),
    /// Delete one backup now, expired or not (Velero's `backup delete`):
    /// its data, then its object, then its leases.
    Delete(delete::DeleteArgs),
    /// Restore a backup's objects into the cluster (--cluster) or a
    /// directory of manifests (--to DIR), as Velero's `restore create`;
    /// exits 0 when Completed, 1 when PartiallyFailed.
    Restore(restore::RestoreArgs),
    /// Pod volume data: `iar volume restore BACKUP NS/POD/VOLUME --to DIR`.
    Volume(volume::VolumeArgs),
    /// The namespaces' volume repositories: `iar repository check|repair|prune`.
    Repository(repository::RepositoryArgs),
    /// Run a plugin's declarative test files (`*.iar-test.yaml`).
    Test(test::TestArgs),
    /// Check any plugin against the generic rules of the contract.
    Conformance(conformance::ConformanceArgs),
    /// Create a new plugin crate (action, test file, README).
    New(new::NewArgs),
    /// Build a plugin (a Go module or a Rust crate) into the component
    /// iar loads, with its language's toolchain.
    Build(componentize::BuildArgs),
    /// Turn a core wasm module (a Go plugin built with GOOS=wasip1
    /// -buildmode=c-shared) into a plugin component.
    Componentize(componentize::ComponentizeArgs),
    /// Measure a plugin's execute latency on one item, warm and fresh.
    Bench(bench::BenchArgs),
    /// Reconcile backups.iar.dev resources in a cluster (leader-elected),
    /// serving /healthz, /readyz and /metrics.
    Controller(controller::ControllerArgs),
    /// Back up the pod volumes of one node (a DaemonSet): serves the
    /// volumebackups.iar.dev requests of its node.
    NodeAgent(controller::NodeAgentArgs),
    /// Print iar's CustomResourceDefinitions (backups, volumebackups,
    /// volumerestores, schedules, restores, downloadrequests).
    Crd(controller::CrdArgs),
    /// What a restored pod's `restore-wait` init container runs: waits
    /// until each volume holds the file its restore writes last.
    RestoreWait(restore_wait::RestoreWaitArgs),
    /// Plugin packaging: `iar plugin configmap` prints a plugin ConfigMap.
    Plugin(plugin::PluginArgs),
    /// Velero's schedules without a cluster: print the backup due now
    /// (`NAME-<timestamp>`, exit 0) or when the next is (exit 3), for a
    /// CronJob or a timer to run `iar backup` with.
    Schedule(schedule::ScheduleArgs),
    /// Print every manifest of an install (namespace, RBAC, CRDs, grant
    /// policy, Secrets, controller, node agents) for one namespace, image
    /// and store: `iar install --print --store s3://B | kubectl apply -f -`.
    Install(install::InstallArgs),
}

/// iar's own crates, by their names in log targets (`iar_k8s::controller`).
const IAR_CRATES: &[&str] = &[
    "iar",
    "iar_core",
    "iar_plugin",
    "iar_backup",
    "iar_repository",
    "iar_authoring",
    "iar_k8s",
    "iar_velero",
    "iar_restore",
];

/// `IAR_LOG` when set (tracing's directive syntax), else iar's own crates
/// at `level` and every other crate at `warn`: at `debug`, wasmtime's
/// compiler alone wrote ~98,000 lines into the first backup's log inside
/// Velero, and a user asking iar for detail asks for iar's.
fn log_filter(level: &str) -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_env("IAR_LOG").unwrap_or_else(|_| {
        let mut directives = String::from("warn");
        for krate in IAR_CRATES {
            directives.push_str(&format!(",{krate}={level}"));
        }
        tracing_subscriber::EnvFilter::new(directives)
    })
}

pub fn main() -> ExitCode {
    // Started by Velero's plugin client: a plugin process, whatever the
    // arguments (Velero passes its server's flags to every plugin).
    if iar::velero_plugin::handshake::launched_by_velero() {
        return velero::serve();
    }
    let cli = Cli::parse();
    // Backups narrate their phases (plain log lines when stderr is not a
    // terminal; a progress line when it is); the other commands stay quiet.
    let long_running = matches!(
        cli.command,
        Command::Backup(_) | Command::Resume(_) | Command::Controller(_) | Command::NodeAgent(_)
    );
    let default = if long_running && !progress::interactive() {
        "info"
    } else {
        "warn"
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(progress::interactive())
        .with_env_filter(log_filter(default))
        .init();
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Inspect(args) => inspect::inspect(args),
        Command::Backup(args) => backup::backup(args),
        Command::Resume(args) => backup::resume(args),
        Command::Describe(args) => describe::describe(args),
        Command::Get(args) => describe::get(args),
        Command::Gc(args) => backup::gc(args),
        Command::Install(args) => install::install(args),
        Command::Schedule(args) => schedule::schedule(args),
        Command::Logs(args) => delete::logs(args),
        Command::Delete(args) => delete::delete(args),
        Command::Restore(args) => restore::restore(args),
        Command::Volume(args) => volume::volume(args),
        Command::Repository(args) => repository::repository(args),
        Command::Test(args) => test::test(args),
        Command::Conformance(args) => conformance::conformance(args),
        Command::New(args) => new::new(args),
        Command::Build(args) => componentize::build(args),
        Command::Componentize(args) => componentize::componentize(args),
        Command::Bench(args) => bench::bench(args),
        Command::Controller(args) => controller::controller(args),
        Command::NodeAgent(args) => controller::node_agent(args),
        Command::Crd(args) => controller::crd(args),
        Command::RestoreWait(args) => restore_wait::restore_wait(args),
        Command::Plugin(args) => plugin::plugin(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("iar: {}", error_line(&e));
            ExitCode::from(2)
        }
    }
}

/// Errors go to stderr on one line.
/// An error and its causes on one line, each said once. iar's library
/// errors show their cause in their own message and return it as their
/// `source()` too (for code that walks the chain), so a cause whose text
/// is already in the line is not repeated.
pub(crate) fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.is_empty() {
            line = text;
        } else if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    one_line(&line)
}

pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Writes a command's output; see [`out!`].
pub(crate) fn write_stdout(args: std::fmt::Arguments, newline: bool) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_fmt(args).and_then(|()| {
        if newline {
            stdout.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("iar: writing the output: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    /// A cause a message already shows is not said twice; one it does
    /// not show is added, as `{:#}` would.
    #[test]
    fn error_line_says_each_cause_once() {
        let parse = std::path::Path::new("x.json");
        let e = iar::manifests::parse_documents(parse, "{nope").unwrap_err();
        let shown = e.to_string();
        let e = anyhow::Error::new(e).context("reading the sources");
        assert_eq!(
            super::error_line(&e),
            format!("reading the sources: {shown}")
        );
        let io = std::io::Error::other("disk on fire");
        let e = anyhow::Error::new(io).context("writing");
        assert_eq!(super::error_line(&e), "writing: disk on fire");
    }

    /// Every iar crate this binary links is in [`super::IAR_CRATES`], so a
    /// new crate's log lines are not silenced at `warn`.
    #[test]
    fn every_iar_crate_is_in_the_log_filter() {
        let manifest = include_str!("../../Cargo.toml");
        let linked: Vec<String> = manifest
            .lines()
            .filter_map(|l| l.split_once(" = { path = \"../crates/"))
            .map(|(name, _)| name.trim().replace('-', "_"))
            .collect();
        assert!(linked.len() >= 6, "{linked:?}");
        for krate in &linked {
            assert!(
                super::IAR_CRATES.contains(&krate.as_str()),
                "{krate} is not in IAR_CRATES"
            );
        }
    }
}
