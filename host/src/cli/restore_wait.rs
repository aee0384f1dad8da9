//! `iar restore-wait UID DIR...`: what a restored pod's `restore-wait`
//! init container runs (Velero's restore helper). It ends once every DIR
//! (a volume the node agent fills) holds `.velero/UID`, the file the agent
//! writes after the volume's data; the pod's own containers start after
//! it, on the restored data.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub struct RestoreWaitArgs {
    /// The restore's uid, which names the file each volume's restore
    /// writes last.
    uid: String,
    /// The volumes' mount points.
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// How often each volume is looked at.
    #[arg(long, value_parser = iar::duration::parse_positive, default_value = "1s")]
    every: Duration,
}

pub fn restore_wait(args: RestoreWaitArgs) -> anyhow::Result<ExitCode> {
    if args.uid.is_empty() || args.uid.contains(['/', '\0']) || args.uid.starts_with('.') {
        anyhow::bail!("{:?} is not a restore uid", args.uid);
    }
    let done = iar::restore::pod_volumes::done_file(&args.uid);
    let mut waiting: Vec<PathBuf> = args.dirs.iter().map(|d| d.join(&done)).collect();
    let mut said = false;
    loop {
        waiting.retain(|f| !f.is_file());
        if waiting.is_empty() {
            eprintln!(
                "iar: every volume's data is restored ({} volumes)",
                args.dirs.len()
            );
            return Ok(ExitCode::SUCCESS);
        }
        if !said {
            // Once: the pod's log says what it waits for.
            for f in &waiting {
                eprintln!("iar: waiting for {}", f.display());
            }
            said = true;
        }
        std::thread::sleep(args.every);
    }
}
