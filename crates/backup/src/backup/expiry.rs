//! When a backup expires: Velero's `spec.ttl` (a default when unset or
//! zero) gives `status.expiration`, creation + ttl, written once when the
//! backup is created. Garbage collection reads only the expiration.

use super::object::{BackupObject, BackupStatus, rfc3339};
use super::spec::{self, format_go_duration};
use serde_json::Value;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Velero's server default (`--default-backup-ttl`): 30 days.
pub const DEFAULT_TTL: Duration = Duration::from_secs(720 * 3600);

/// The first second RFC 3339 (four-digit years) cannot write.
const YEAR_10000: Duration = Duration::from_secs(253_402_300_800);

/// Why a ttl or an expiration cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExpiryError {
    /// `spec.ttl` does not parse (the duration parser's message).
    #[error("{0}")]
    Ttl(String),
    #[error("ttl {ttl} puts the expiration past the year 9999 (rule: timestamp-range)")]
    PastYear9999 { ttl: String },
    #[error("status.expiration {value:?} is not an RFC 3339 time: {source}")]
    NotRfc3339 {
        value: String,
        #[source]
        source: humantime::TimestampError,
    },
}

/// The ttl a backup gets from its spec, `default` when unset or zero.
pub fn effective_ttl(spec: &Value, default: Duration) -> Result<Duration, ExpiryError> {
    Ok(spec::ttl(spec)
        .map_err(ExpiryError::Ttl)?
        .unwrap_or(default))
}

/// Sets the ttl that applies on the stored spec, as Velero does (so the
/// stored backup says how long it is kept), and the expiration on the
/// status. A ttl that would put the expiration past 9999 is refused.
pub fn stamp(object: &mut BackupObject, ttl: Duration, now: SystemTime) -> Result<(), ExpiryError> {
    let expires = now
        .checked_add(ttl)
        .filter(|t| t.duration_since(UNIX_EPOCH).is_ok_and(|d| d < YEAR_10000))
        .ok_or_else(|| ExpiryError::PastYear9999 {
            ttl: format_go_duration(ttl),
        })?;
    if !object.spec.is_object() {
        object.spec = Value::Object(Default::default());
    }
    object.spec["ttl"] = Value::String(format_go_duration(ttl));
    object.status.expiration = Some(rfc3339(expires));
    Ok(())
}

/// When the backup expires; `None` for one stored without an expiration
/// (before iar had expiry), which never expires.
pub fn expires_at(status: &BackupStatus) -> Result<Option<SystemTime>, ExpiryError> {
    status
        .expiration
        .as_deref()
        .map(|e| {
            humantime::parse_rfc3339_weak(e).map_err(|source| ExpiryError::NotRfc3339 {
                value: e.to_string(),
                source,
            })
        })
        .transpose()
}

/// Whether the expiration has passed by `now`.
pub fn expired(status: &BackupStatus, now: SystemTime) -> Result<bool, ExpiryError> {
    Ok(expires_at(status)?.is_some_and(|t| t <= now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(spec: Value) -> BackupObject {
        BackupObject::new("b", "ns", "u", spec)
    }

    #[test]
    fn the_default_applies_when_the_ttl_is_unset_or_zero() {
        let hour = Duration::from_secs(3600);
        assert_eq!(effective_ttl(&json!({}), DEFAULT_TTL), Ok(DEFAULT_TTL));
        assert_eq!(effective_ttl(&json!(null), hour), Ok(hour));
        assert_eq!(effective_ttl(&json!({"ttl": "0s"}), hour), Ok(hour));
        assert_eq!(
            effective_ttl(&json!({"ttl": "90m"}), hour),
            Ok(Duration::from_secs(5400))
        );
    }

    #[test]
    fn stamping_writes_the_ttl_and_the_expiration() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut o = object(json!({"includedNamespaces": ["a"]}));
        stamp(&mut o, DEFAULT_TTL, now).unwrap();
        assert_eq!(o.spec["ttl"], "720h0m0s");
        assert_eq!(o.spec["includedNamespaces"], json!(["a"]));
        assert_eq!(o.status.expiration.as_deref(), Some("2027-02-14T08:00:00Z"));
        assert_eq!(expires_at(&o.status), Ok(Some(now + DEFAULT_TTL)));
        assert_eq!(expired(&o.status, now), Ok(false));
        assert_eq!(expired(&o.status, now + DEFAULT_TTL), Ok(true));

        let mut bare = object(Value::Null);
        stamp(&mut bare, Duration::from_secs(60), now).unwrap();
        assert_eq!(bare.spec, json!({"ttl": "1m0s"}));

        let err = stamp(&mut o, Duration::from_secs(u64::MAX / 4), now).unwrap_err();
        assert!(matches!(err, ExpiryError::PastYear9999 { .. }), "{err:?}");
        assert!(err.to_string().contains("past the year 9999"), "{err}");
    }

    /// A backup stored before expiry existed has no expiration, and never
    /// expires; a malformed one is an error naming the field.
    #[test]
    fn no_expiration_never_expires() {
        // Any time at all: there is nothing to compare it with.
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let o = object(json!({}));
        assert_eq!(expired(&o.status, now), Ok(false));
        let mut bad = o.status.clone();
        bad.expiration = Some("tomorrow".into());
        let err = expired(&bad, now).unwrap_err();
        assert!(matches!(err, ExpiryError::NotRfc3339 { .. }), "{err:?}");
        assert!(err.to_string().contains("status.expiration"), "{err}");
    }
}
