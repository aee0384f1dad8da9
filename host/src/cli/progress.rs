//! A progress line for backups on a terminal.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::OnceLock;
use std::time::Duration;

static BAR: OnceLock<ProgressBar> = OnceLock::new();

/// Whether stderr is a terminal (then a progress line replaces log lines).
pub fn interactive() -> bool {
    std::io::stderr().is_terminal()
}

/// An observer for the controller: on a terminal, shows each backup's latest
/// log line on a spinner; otherwise does nothing (log lines are printed).
pub fn observer() -> iar::phases::Observer {
    if !interactive() {
        return Box::new(|_, _| {});
    }
    let bar = BAR.get_or_init(|| {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}").expect("valid template"),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    Box::new(move |backup, line| bar.set_message(format!("{backup}: {line}")))
}

/// Clears the progress line before the final report.
pub fn finish() {
    if let Some(bar) = BAR.get() {
        bar.finish_and_clear();
    }
}
