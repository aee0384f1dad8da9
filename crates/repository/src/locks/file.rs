//! restic's lock file (`internal/restic/lock.go` of restic 0.18): its JSON,
//! who this process is in it, and when a lock is stale.

use rustic_core::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};

/// A lock file's content, field for field as restic writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockFile {
    /// RFC 3339 with nanoseconds (Go's `time.Time` in JSON).
    pub time: String,
    pub exclusive: bool,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub pid: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub uid: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gid: u32,
    /// iar's own: the holder refreshes this lock well within this many
    /// seconds and stops its work before they pass unrefreshed, so iar
    /// may judge the lock stale after them rather than restic's 30
    /// minutes. restic ignores the field (Go's JSON skips unknown keys)
    /// and keeps its own rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iar_stale_after_seconds: Option<u64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl LockFile {
    /// This process's lock, made now. The host name and pid are the real
    /// ones, so restic's same-host check (is the pid alive?) is right;
    /// `username` says which iar holds it. It declares no window of its
    /// own ([`Self::declaring`] adds one).
    pub fn this_process(exclusive: bool, username: &str) -> Self {
        // The effective ids: /proc/self belongs to them.
        let (uid, gid) = std::fs::metadata("/proc/self")
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                (m.uid(), m.gid())
            })
            .unwrap_or_default();
        LockFile {
            time: Timestamp::now().to_string(),
            exclusive,
            hostname: hostname(),
            username: username.to_string(),
            pid: i64::from(std::process::id()),
            uid,
            gid,
            iar_stale_after_seconds: None,
        }
    }

    /// This lock, telling iar's readers it is stale after `window`
    /// unrefreshed.
    pub fn declaring(self, window: Duration) -> Self {
        LockFile {
            iar_stale_after_seconds: Some(window.as_secs().max(1)),
            ..self
        }
    }

    /// When the lock was made; `None` if its time is not RFC 3339.
    pub fn made(&self) -> Option<SystemTime> {
        let t: Timestamp = self.time.parse().ok()?;
        Some(SystemTime::from(t))
    }

    /// restic's rule: older than `stale_after` (30 minutes), or made on
    /// this host by a process that no longer exists. (restic probes the
    /// pid with SIGHUP; a look at /proc answers the same without a signal.)
    /// A lock that declares a window of its own (iar's) is also stale once
    /// older than that: a controller killed mid-prune in another pod, whose
    /// process no reader can probe, holds the repository minutes, not half
    /// an hour.
    pub fn is_stale(&self, stale_after: Duration) -> bool {
        let window = match self.iar_stale_after_seconds {
            Some(s) => stale_after.min(Duration::from_secs(s)),
            None => stale_after,
        };
        let old = self
            .made()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age > window);
        old || (self.hostname == hostname() && !process_exists(self.pid))
    }

    /// The holder, for a refusal: who, where, since when.
    pub fn describe(&self) -> String {
        format!(
            "{} lock of PID {} on {} by {} made at {}",
            if self.exclusive {
                "an exclusive"
            } else {
                "a shared"
            },
            self.pid,
            self.hostname,
            self.username,
            self.time
        )
    }
}

/// This host's name as restic reads it (Go's `os.Hostname` on Linux).
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

fn process_exists(pid: i64) -> bool {
    pid > 0 && std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_restics_json_and_writes_its_fields() {
        let restic = r#"{"time":"2025-06-01T12:00:00.123456789+02:00","exclusive":true,"hostname":"node-1","username":"root","pid":42}"#;
        let lock: LockFile = serde_json::from_str(restic).unwrap();
        assert!(lock.exclusive);
        assert_eq!((lock.pid, lock.uid), (42, 0));
        assert!(lock.made().is_some());
        // Long ago, so stale whatever the host.
        assert!(lock.is_stale(Duration::from_secs(30 * 60)));

        let mine = LockFile::this_process(false, "iar test");
        let json: serde_json::Value = serde_json::to_value(&mine).unwrap();
        for field in ["time", "exclusive", "hostname", "username", "pid"] {
            assert!(json.get(field).is_some(), "{field} in {json}");
        }
        assert_eq!(mine.hostname, hostname());
        assert!(!mine.hostname.is_empty());
        // Fresh and this process is alive.
        assert!(!mine.is_stale(Duration::from_secs(30 * 60)));
        let gone = LockFile {
            pid: i64::from(u32::MAX),
            ..mine.clone()
        };
        assert!(gone.is_stale(Duration::from_secs(30 * 60)));
        let elsewhere = LockFile {
            hostname: "another-host".into(),
            ..gone
        };
        assert!(!elsewhere.is_stale(Duration::from_secs(30 * 60)));

        // iar's own window: 11 minutes old is stale when the lock says 10,
        // not when it says nothing (restic's 30 minutes).
        let eleven_ago = Timestamp::now() - rustic_core::jiff::SignedDuration::from_mins(11);
        let older = LockFile {
            time: eleven_ago.to_string(),
            ..elsewhere
        };
        assert!(!older.is_stale(Duration::from_secs(30 * 60)));
        let declared = older.clone().declaring(Duration::from_secs(10 * 60));
        assert!(declared.is_stale(Duration::from_secs(30 * 60)));
        let json = serde_json::to_value(&declared).unwrap();
        assert_eq!(json["iar_stale_after_seconds"], 600);
        assert!(
            serde_json::to_value(&older)
                .unwrap()
                .get("iar_stale_after_seconds")
                .is_none()
        );
        let fresh = LockFile::this_process(true, "iar").declaring(Duration::from_secs(600));
        assert!(
            !LockFile {
                hostname: "another-host".into(),
                ..fresh
            }
            .is_stale(Duration::from_secs(30 * 60))
        );
    }
}
