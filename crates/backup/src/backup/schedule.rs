//! When a schedule's next backup is due, and what it is named: Velero's
//! schedule controller (v1.18, `pkg/controller/schedule_controller.go`)
//! in iar's terms, shared by `iar controller` (Schedule resources) and
//! `iar schedule` (the manifest mode, for a CronJob or a timer).
//!
//! - Cron expressions are Velero's (robfig/cron `ParseStandard`): five
//!   fields, a descriptor (`@daily`, `@hourly`, …) or `@every <duration>`.
//! - The next run is the first after the last backup, or after the
//!   schedule's creation when it has none, or after its last skip if that
//!   is later; a run is due once that time has passed. Missed runs are not
//!   caught up: one backup, now.
//! - A backup is named `<schedule>-<UTC yyyyMMddHHmmss>` of when it was
//!   made.

use std::str::FromStr;
use std::time::{Duration, SystemTime};

/// A parsed `spec.schedule`.
#[derive(Clone, Debug)]
pub enum Cron {
    Pattern(Box<croner::Cron>),
    /// `@every <duration>`: runs that far apart, from the last.
    Every(Duration),
}

/// Why a schedule is not one Velero's controller would run (the
/// Schedule's `FailedValidation`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("Schedule must be a non-empty valid Cron expression")]
    Empty,
    #[error("invalid schedule: {0}")]
    Invalid(String),
}

impl Cron {
    pub fn parse(expr: &str) -> Result<Cron, CronError> {
        let expr = expr.trim();
        if expr.is_empty() {
            return Err(CronError::Empty);
        }
        if let Some(every) = expr.strip_prefix("@every ") {
            let nanos = iar_core::duration::parse(every.trim())
                .map_err(|e| CronError::Invalid(format!("@every {every}: {e}")))?;
            if nanos <= 0 {
                return Err(CronError::Invalid(format!(
                    "@every {every}: not a positive duration"
                )));
            }
            return Ok(Cron::Every(Duration::from_nanos(nanos as u64)));
        }
        // robfig's standard parser takes five fields, or a descriptor; a
        // sixth (seconds) or seventh (years) field it refuses, as here.
        if !expr.starts_with('@') && expr.split_whitespace().count() != 5 {
            return Err(CronError::Invalid(format!(
                "expected exactly 5 fields (minute hour day-of-month month day-of-week), found {}: {expr}",
                expr.split_whitespace().count()
            )));
        }
        let pattern =
            croner::Cron::from_str(expr).map_err(|e| CronError::Invalid(format!("{expr}: {e}")))?;
        Ok(Cron::Pattern(Box::new(pattern)))
    }

    /// The first run after `t`, to the second; `None` for a pattern that
    /// never matches (`0 0 31 2 *`).
    pub fn next_after(&self, t: SystemTime) -> Option<SystemTime> {
        match self {
            Cron::Every(d) => {
                let secs = t.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs();
                Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + *d)
            }
            Cron::Pattern(p) => {
                let at = chrono::DateTime::<chrono::Utc>::from(t);
                let next = p.find_next_occurrence(&at, false).ok()?;
                Some(SystemTime::from(next))
            }
        }
    }
}

/// What the next run is counted from: Velero's `getNextRunTime`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Runs {
    pub created: Option<SystemTime>,
    pub last_backup: Option<SystemTime>,
    pub last_skipped: Option<SystemTime>,
}

impl Runs {
    /// When the next backup is due; `None` when the pattern never matches.
    pub fn next(&self, cron: &Cron) -> Option<SystemTime> {
        let mut from = self
            .last_backup
            .or(self.created)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        if let Some(skipped) = self.last_skipped
            && skipped > from
        {
            from = skipped;
        }
        cron.next_after(from)
    }

    /// Whether a backup is due at `now` (strictly after the next run, as
    /// Velero's `asOf.After(nextRunTime)`).
    pub fn due(&self, cron: &Cron, now: SystemTime) -> bool {
        self.next(cron).is_some_and(|next| now > next)
    }
}

/// The backup a schedule makes at `at`: `<schedule>-<yyyyMMddHHmmss>`, UTC.
pub fn backup_name(schedule: &str, at: SystemTime) -> String {
    let at = chrono::DateTime::<chrono::Utc>::from(at);
    format!("{schedule}-{}", at.format("%Y%m%d%H%M%S"))
}

/// The label every backup of a schedule carries, Velero's.
pub const SCHEDULE_NAME_LABEL: &str = "velero.io/schedule-name";

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rfc3339: &str) -> SystemTime {
        humantime::parse_rfc3339(rfc3339).unwrap()
    }

    #[test]
    fn velero_s_expressions_parse_and_others_are_refused() {
        for ok in [
            "0 1 * * *",
            "@daily",
            "@every 1h30m",
            "*/5 * * * 1-5",
            "0 0 * * 7",
        ] {
            Cron::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        assert_eq!(Cron::parse("  ").unwrap_err(), CronError::Empty);
        for bad in [
            "0 0 1 * * *",
            "nonsense",
            "@every soon",
            "@every -1m",
            "61 * * * *",
        ] {
            let e = Cron::parse(bad).unwrap_err();
            assert!(e.to_string().starts_with("invalid schedule"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_next_run_counts_from_the_last_backup_creation_or_skip() {
        let daily = Cron::parse("0 1 * * *").unwrap();
        let created = at("2026-12-06T10:00:00Z");
        let mut runs = Runs {
            created: Some(created),
            ..Runs::default()
        };
        assert_eq!(runs.next(&daily), Some(at("2026-12-07T01:00:00Z")));
        assert!(!runs.due(&daily, at("2026-12-07T01:00:00Z")));
        assert!(runs.due(&daily, at("2026-12-07T01:00:01Z")));
        // Three days down: one backup, now, not three.
        runs.last_backup = Some(at("2026-12-07T01:00:05Z"));
        assert!(runs.due(&daily, at("2026-12-10T09:00:00Z")));
        // Skipped later than the last backup: counted from the skip.
        runs.last_skipped = Some(at("2026-12-09T02:00:00Z"));
        assert_eq!(runs.next(&daily), Some(at("2026-12-10T01:00:00Z")));
        let every = Cron::parse("@every 90s").unwrap();
        assert_eq!(
            every.next_after(at("2026-12-06T10:00:00.700Z")),
            Some(at("2026-12-06T10:01:30Z"))
        );
        assert_eq!(Cron::parse("0 0 31 2 *").unwrap().next_after(created), None);
    }

    #[test]
    fn backups_are_named_as_velero_names_them() {
        assert_eq!(
            backup_name("nightly", at("2026-12-06T01:02:03.456Z")),
            "nightly-20261206010203"
        );
    }
}
