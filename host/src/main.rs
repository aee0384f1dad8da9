//! The `iar` command line. Argument parsing and output live in `cli`; the
//! work is done by the library.

mod cli;

fn main() -> std::process::ExitCode {
    iar::tune_allocator();
    ignore_hangup();
    cli::main()
}

/// SIGHUP is ignored, as restic ignores it: `restic unlock` run on the
/// host that holds a repository lock probes the holder's pid with SIGHUP
/// to judge the lock stale, which would kill an iar holding one. A
/// backup also outlives the terminal that started it, as with `nohup`.
fn ignore_hangup() {
    // SAFETY: SIG_IGN installs no handler; called before any thread starts.
    unsafe {
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
}
