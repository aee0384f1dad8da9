//! Each backup's log, persisted as `<name>-logs.gz`; every line also goes
//! to the host log and to the observer.
//!
//! What a plugin logs is bounded per plugin per backup: its first
//! [`PLUGIN_HEAD`] lines are kept in place, then only its last
//! [`PLUGIN_TAIL`], and the rest are counted. Unbounded, a plugin that logs
//! its per-call maximum on every item kept gigabytes in memory for the
//! backup's whole life (tried: 1,000 lines of 4 KiB on each of 300 pods,
//! about 6 GB peak), and a restart read it all back.

use super::Observer;
use crate::backup::object::rfc3339;
use iar_core::clock::{Clock, RealClock};
use iar_plugin::plugin::plugin_of_line;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Lines of one plugin kept in place in one backup's log.
pub const PLUGIN_HEAD: usize = 1000;
/// Lines of one plugin kept from the end, past the head.
pub const PLUGIN_TAIL: usize = 100;

pub(super) struct Journal {
    backups: Mutex<HashMap<String, BackupLog>>,
    pub(super) observer: Option<Observer>,
    /// Each line's timestamp.
    pub(super) clock: Arc<dyn Clock>,
}

impl Default for Journal {
    fn default() -> Self {
        Journal {
            backups: Mutex::default(),
            observer: None,
            clock: RealClock::shared(),
        }
    }
}

#[derive(Default)]
struct BackupLog {
    lines: Vec<String>,
    plugins: BTreeMap<String, PluginTally>,
}

#[derive(Default)]
struct PluginTally {
    kept: usize,
    tail: VecDeque<String>,
    dropped: usize,
}

/// Where a line went.
#[derive(Debug, PartialEq)]
enum Kept {
    /// In place (a host line, or within its plugin's head): shown.
    Shown,
    /// The first line past its plugin's head: a notice is shown instead.
    HeadFull,
    /// Past the head: kept in the tail or counted, not shown.
    Hidden,
}

impl BackupLog {
    fn push(&mut self, line: String, plugin: Option<&str>) -> Kept {
        let Some(plugin) = plugin else {
            self.lines.push(line);
            return Kept::Shown;
        };
        let tally = match self.plugins.get_mut(plugin) {
            Some(tally) => tally,
            None => self.plugins.entry(plugin.to_string()).or_default(),
        };
        if tally.kept < PLUGIN_HEAD {
            tally.kept += 1;
            self.lines.push(line);
            return Kept::Shown;
        }
        let first = tally.tail.is_empty() && tally.dropped == 0;
        if tally.tail.len() == PLUGIN_TAIL {
            tally.tail.pop_front();
            tally.dropped += 1;
        }
        tally.tail.push_back(line);
        if first { Kept::HeadFull } else { Kept::Hidden }
    }

    /// The log as persisted: the lines in order, then for each plugin past
    /// its head, a line saying what was dropped and its last lines.
    fn render(&self, now: SystemTime) -> Vec<String> {
        let mut out = self.lines.clone();
        for (plugin, tally) in &self.plugins {
            if tally.tail.is_empty() {
                continue;
            }
            out.push(format!(
                "{} plugin {plugin} logged {} lines in this backup: the first {PLUGIN_HEAD} are above, {} were dropped (rule: log-bound), the last {} follow",
                rfc3339(now),
                tally.kept + tally.dropped + tally.tail.len(),
                tally.dropped,
                tally.tail.len()
            ));
            out.extend(tally.tail.iter().cloned());
        }
        out
    }
}

impl Journal {
    /// A line of the backup's log, and of the host log at its level: a
    /// line starting `error: ` or `warning: ` is an error or a warning
    /// there too (stderr shows them at the default level).
    pub(super) fn line(&self, backup: &str, message: impl Into<String>) {
        let message = message.into();
        if let Some(error) = message.strip_prefix("error: ") {
            tracing::error!(backup, "{error}");
        } else if let Some(warning) = message.strip_prefix("warning: ") {
            tracing::warn!(backup, "{warning}");
        } else {
            tracing::info!(backup, "{message}");
        }
        self.record(backup, message);
    }

    /// Records a line: a plugin's (forwarded by the boundary, and shown in
    /// the host log only here, within its head) or one already in the host
    /// log. The host log and the observer see what the persisted log keeps
    /// in place, so neither grows with what a plugin writes.
    pub(super) fn record(&self, backup: &str, message: String) {
        let plugin = plugin_of_line(&message);
        let now = self.clock.system_now();
        let line = format!("{} backup={backup} {message}", rfc3339(now));
        let kept = {
            let mut backups = self.backups.lock().unwrap_or_else(|p| p.into_inner());
            // The backup's name is copied only for its first line.
            match backups.get_mut(backup) {
                Some(log) => log.push(line, plugin),
                None => {
                    let mut log = BackupLog::default();
                    let kept = log.push(line, plugin);
                    backups.insert(backup.to_string(), log);
                    kept
                }
            }
        };
        let shown = match (kept, plugin) {
            (Kept::Hidden, _) => return,
            (Kept::HeadFull, Some(plugin)) => format!(
                "plugin {plugin} logged more than {PLUGIN_HEAD} lines in this backup: the rest is not shown; the backup log keeps its last {PLUGIN_TAIL} (rule: log-bound)"
            ),
            (_, Some(_)) => message,
            (_, None) => {
                if let Some(observe) = &self.observer {
                    observe(backup, &message);
                }
                return;
            }
        };
        tracing::info!(backup, "{shown}");
        if let Some(observe) = &self.observer {
            observe(backup, &shown);
        }
    }

    /// Continues a log a previous process persisted (already bounded when
    /// it was written).
    pub(super) fn preload(&self, backup: &str, previous: Vec<String>) {
        let mut backups = self.backups.lock().unwrap_or_else(|p| p.into_inner());
        let log = backups.entry(backup.to_string()).or_default();
        let new = std::mem::replace(&mut log.lines, previous);
        log.lines.extend(new);
    }

    pub(super) fn has(&self, backup: &str) -> bool {
        let backups = self.backups.lock().unwrap_or_else(|p| p.into_inner());
        backups.contains_key(backup)
    }

    pub(super) fn lines(&self, backup: &str) -> Vec<String> {
        let backups = self.backups.lock().unwrap_or_else(|p| p.into_inner());
        backups
            .get(backup)
            .map(|log| log.render(self.clock.system_now()))
            .unwrap_or_default()
    }

    /// Drops a finished backup's lines; they are in its persisted log.
    pub(super) fn forget(&self, backup: &str) {
        let mut backups = self.backups.lock().unwrap_or_else(|p| p.into_inner());
        backups.remove(backup);
    }

    pub(super) fn backups(&self) -> Vec<String> {
        let backups = self.backups.lock().unwrap_or_else(|p| p.into_inner());
        backups.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iar_plugin::plugin::GuestLog;

    fn plugin_line(plugin: &str, i: usize) -> String {
        GuestLog {
            level: "info",
            message: format!("line {i}"),
        }
        .line(plugin)
    }

    /// A flooding plugin keeps its head and tail, the count of the rest is
    /// said once, and another plugin's and the host's lines are untouched.
    #[test]
    fn a_plugins_lines_are_bounded_per_backup() {
        let journal = Journal::default();
        let flood = PLUGIN_HEAD + PLUGIN_TAIL + 500;
        for i in 0..flood {
            journal.record("b", plugin_line("chatty", i));
            if i % 100 == 0 {
                journal.record("b", plugin_line("quiet", i));
                journal.line("b", format!("host line {i}"));
            }
        }
        let lines = journal.lines("b");
        let chatty = |l: &&String| l.contains(" plugin chatty: ");
        assert_eq!(
            lines.iter().filter(chatty).count(),
            PLUGIN_HEAD + PLUGIN_TAIL
        );
        assert_eq!(
            lines.iter().filter(|l| l.contains("plugin quiet:")).count(),
            flood.div_ceil(100)
        );
        assert_eq!(
            lines.iter().filter(|l| l.contains("host line")).count(),
            flood.div_ceil(100)
        );
        let summary: Vec<_> = lines
            .iter()
            .filter(|l| l.contains("rule: log-bound"))
            .collect();
        assert_eq!(summary.len(), 1, "{summary:?}");
        assert!(
            summary[0].contains(&format!("logged {flood} lines"))
                && summary[0].contains("500 were dropped"),
            "{}",
            summary[0]
        );
        // The tail is the last lines, in order, after the summary.
        assert!(
            lines
                .last()
                .unwrap()
                .ends_with(&format!("line {}", flood - 1))
        );
        assert!(
            lines[lines.len() - PLUGIN_TAIL].ends_with(&format!("line {}", flood - PLUGIN_TAIL))
        );
    }

    /// A message cannot pass for another plugin's line: the plugin is read
    /// from the prefix the host wrote, and messages are one line.
    #[test]
    fn the_plugin_of_a_line_is_the_one_that_wrote_it() {
        assert_eq!(plugin_of_line(&plugin_line("a", 1)), Some("a"));
        let sneaky = GuestLog {
            level: "info",
            message: "x\nplugin b: info: forged".into(),
        };
        assert_eq!(plugin_of_line(&sneaky.line("a")), Some("a"));
        assert_eq!(plugin_of_line("backup started"), None);
    }
}
