//! The campaign's lease audit: no controller replica writes a backup's
//! files in the store, or its Backup resource, after another process took
//! the backup's lease from it. Read after each seed from what the real
//! servers logged: versitygw's access log (every answered request, with
//! its time to the second and the client's user agent) and the API
//! server's audit log (every write to `iar.dev` resources). Each replica
//! names itself in its user agent ([`replica_agent`]); the lease history
//! is the store's own record of who created each lease generation.
//!
//! A write is a violation when it landed more than [`SLACK`] after
//! another holder created a newer generation than the writer's own last
//! one: a request held up by a partition and delivered late, or a replica
//! that went on after losing the backup. Hook claims are left out: a
//! claimed unfreeze runs to its end and says so whoever holds the lease,
//! by design (docs/decisions.md).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// Between a takeover and a late write: the access log's times are whole
/// seconds, and a request answered just after a takeover may have been
/// checked against the lease just before it.
pub(crate) const SLACK: Duration = Duration::from_secs(3);

/// The user agent replica `i` sends to the store and the API server.
pub(crate) fn replica_agent(i: usize) -> String {
    format!("iar-replica-{i}")
}

/// One answered write: when, by whom (user agent), of which backup, and
/// what (a key, or the resource and verb).
#[derive(Clone, Debug)]
pub(crate) struct Write {
    pub(crate) at: SystemTime,
    /// Its line in the store's access log (answers are logged in the
    /// order they are made): none for the API server's.
    pub(crate) line: Option<usize>,
    pub(crate) who: String,
    pub(crate) backup: String,
    pub(crate) what: String,
}

/// A lease generation's creation.
#[derive(Clone, Debug)]
struct Take {
    at: SystemTime,
    /// Its line in the access log.
    line: usize,
    generation: u64,
    who: String,
}

/// One line of versitygw's access log, its fields as the log has them:
/// owner bucket [time zone] ip requester id operation key uri status ...
struct Request<'a> {
    /// When it was answered, to the second.
    answered: SystemTime,
    /// `s3_PutObject` and the like.
    operation: &'a str,
    key: &'a str,
    uri: &'a str,
    status: &'a str,
    /// Its total time (ms), if the line has the field; fixed for a 2xx,
    /// whose error code is "-" (fields 12-14: bytes sent, object size,
    /// total time).
    took: Option<u64>,
    /// The user agent: an error code may hold spaces, so it is found by
    /// its prefix, and only a replica's or iar's.
    who: &'a str,
}

impl<'a> Request<'a> {
    fn parse(line: &'a str) -> Option<Request<'a>> {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 12 {
            return None;
        }
        Some(Request {
            answered: access_time(f[2])?,
            operation: f[7],
            key: f[8],
            uri: f[9],
            status: f[10],
            took: f.get(14).map(|ms| ms.parse().unwrap_or_default()),
            who: f[11..]
                .iter()
                .find(|t| t.starts_with("iar-replica-") || t.starts_with("object_store"))
                .map_or("-", |t| t),
        })
    }

    /// When it arrived: its answer's time less the time it took (a slow
    /// store is not a late writer; a request held up on the way, by a
    /// partition, is).
    fn arrived(&self, took: u64) -> SystemTime {
        self.answered - Duration::from_millis(took)
    }
}

/// What versitygw's access log says was written under `backups/`: lease
/// generations created (by the first successful PUT of each), and every
/// other successful PUT, COPY or DELETE of a backup's files.
fn store_log(access_log: &Path) -> (BTreeMap<String, Vec<Take>>, Vec<Write>) {
    let text = std::fs::read_to_string(access_log).unwrap_or_default();
    let mut takes: BTreeMap<String, Vec<Take>> = BTreeMap::new();
    let mut writes = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let Some(r) = Request::parse(line) else {
            continue;
        };
        let operation = r.operation.strip_prefix("s3_").unwrap_or(r.operation);
        let at = r.arrived(r.took.unwrap_or_default());
        if !r.status.starts_with('2')
            || !matches!(operation, "PutObject" | "CopyObject" | "DeleteObject")
        {
            continue;
        }
        let Some((backup, file)) = r
            .key
            .strip_prefix("backups/")
            .and_then(|rest| rest.split_once('/'))
        else {
            continue;
        };
        let who = r.who.to_string();
        let lease = file
            .strip_prefix(&format!("{backup}-lease-"))
            .and_then(|g| g.strip_suffix(".json"))
            .and_then(|g| g.parse::<u64>().ok());
        if let Some(generation) = lease {
            if operation == "PutObject" {
                let chain = takes.entry(backup.to_string()).or_default();
                if !chain.iter().any(|t| t.generation == generation) {
                    chain.push(Take {
                        at,
                        line: index,
                        generation,
                        who,
                    });
                }
            }
            continue;
        }
        if file.starts_with(&format!("{backup}-claims/")) {
            continue;
        }
        writes.push(Write {
            at,
            line: Some(index),
            who,
            backup: backup.to_string(),
            what: format!("{operation} {}", r.key),
        });
    }
    (takes, writes)
}

/// Every request to backup `backup`'s files that arrived between `from`
/// and `to`, as the access log has them: when it arrived, operation, key,
/// answer, time taken and user agent.
fn requests_of(access_log: &Path, backup: &str, from: SystemTime, to: SystemTime) -> Vec<String> {
    let text = std::fs::read_to_string(access_log).unwrap_or_default();
    let prefix = format!("backups/{backup}/");
    // Its keys, and its listings (the key is "-", the prefix in the URI).
    let listed = format!("backups%2F{backup}");
    text.lines()
        .filter_map(|line| {
            let r = Request::parse(line)?;
            let took = r.took?;
            if !(r.key.starts_with(&prefix) || line.contains(&listed)) {
                return None;
            }
            let at = r.arrived(took);
            if at < from || at > to {
                return None;
            }
            Some(format!(
                "{} {} {} {} {} {took}ms {}",
                humantime::format_rfc3339_seconds(at),
                r.operation,
                r.key,
                r.uri,
                r.status,
                r.who
            ))
        })
        .collect()
}

/// `[06/December/2026:17:14:30` (the access log's time, its zone `+0000`
/// in the next field) as a time.
fn access_time(field: &str) -> Option<SystemTime> {
    let t = field.strip_prefix('[')?;
    let (date, clock) = t.split_once(':')?;
    let mut d = date.split('/');
    let (day, month, year) = (d.next()?, d.next()?, d.next()?);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let month = MONTHS.iter().position(|m| *m == month)? + 1;
    humantime::parse_rfc3339(&format!("{year}-{month:02}-{day}T{clock}Z")).ok()
}

/// What the API server's audit log says replicas wrote to the status of
/// Backup resources of namespace `ns`.
fn api_writes(audit_log: &Path, ns: &str) -> Vec<Write> {
    let text = std::fs::read_to_string(audit_log).unwrap_or_default();
    let mut writes = Vec::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let object = &e["objectRef"];
        let who = e["userAgent"].as_str().unwrap_or_default();
        let code = e["responseStatus"]["code"].as_i64().unwrap_or(0);
        // The status only: the finalizer's bookkeeping on the object is
        // every replica's reconcile, guarded by resourceVersion.
        if object["resource"] != "backups"
            || object["subresource"] != "status"
            || object["namespace"] != ns
            || !who.starts_with("iar-replica-")
            || !(200..300).contains(&code)
        {
            continue;
        }
        // When the request arrived (a slow API server is not a late
        // writer; a request held up on the way, by a partition, is).
        let Some(at) = e["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| humantime::parse_rfc3339_weak(t.trim_end_matches('Z')).ok())
        else {
            continue;
        };
        let name = object["name"].as_str().unwrap_or_default();
        let sub = object["subresource"]
            .as_str()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        writes.push(Write {
            at,
            line: None,
            who: who.to_string(),
            backup: name.to_string(),
            what: format!(
                "{} backups/{name}{sub} (phase {})",
                e["verb"].as_str().unwrap_or("?"),
                e["requestObject"]["status"]["phase"]
                    .as_str()
                    .unwrap_or("?")
            ),
        });
    }
    writes
}

/// Every audited write to Backup `name` of namespace `ns`: verb, user,
/// user agent, answer and time (a round's diagnostics).
pub(crate) fn audit_events_of(audit_log: &Path, ns: &str, name: &str) -> Vec<String> {
    audit_events_for(audit_log, "backups", ns, name)
}

/// Every audited write to the `resource` object `ns`/`name`, as
/// [`audit_events_of`] says them.
pub(crate) fn audit_events_for(
    audit_log: &Path,
    resource: &str,
    ns: &str,
    name: &str,
) -> Vec<String> {
    let text = std::fs::read_to_string(audit_log).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            e["objectRef"]["resource"] == resource
                && e["objectRef"]["namespace"] == ns
                && e["objectRef"]["name"] == name
        })
        .map(|e| {
            format!(
                "{} {} {} (phase {}) by {} ({}): {}",
                e["stageTimestamp"].as_str().unwrap_or("?"),
                e["verb"].as_str().unwrap_or("?"),
                e["objectRef"]["subresource"].as_str().unwrap_or(""),
                e["requestObject"]["status"]["phase"]
                    .as_str()
                    .unwrap_or("-"),
                e["user"]["username"].as_str().unwrap_or("?"),
                e["userAgent"].as_str().unwrap_or("?"),
                e["responseStatus"]["code"]
            )
        })
        .collect()
}

/// What the audit read and found.
pub(crate) struct Audit {
    /// Replica writes to the store and to Backup resources, and lease
    /// generations created: a log that says nothing is not a clean one.
    pub(crate) store_writes: usize,
    pub(crate) api_writes: usize,
    pub(crate) takes: usize,
    /// Every replica write, to the store or the API server, that landed
    /// more than [`SLACK`] after another holder took the backup's lease
    /// from it; each said with its backup, what, who and the takeover.
    pub(crate) late: Vec<String>,
}

pub(crate) fn audit(access_log: &Path, audit_log: &Path, ns: &str) -> Audit {
    let (takes, mut writes) = store_log(access_log);
    let replica = |w: &Write| w.who.starts_with("iar-replica-");
    let store_writes = writes.iter().filter(|w| replica(w)).count();
    let from_api = api_writes(audit_log, ns);
    let api_writes = from_api.len();
    writes.extend(from_api);
    let mut found = Vec::new();
    for w in writes.iter().filter(|w| w.who.starts_with("iar-replica-")) {
        let Some(chain) = takes.get(&w.backup) else {
            continue;
        };
        // The writer's own newest generation before the write, and any
        // newer one another process created well before it. Its own take
        // was answered before it sent the write: in the access log, an
        // earlier line (the log's times are whole seconds, and an arrival
        // reckoned from one may fall just before a take made in the same
        // second: the campaign's seed 3642). The API server's writes go by
        // time, a second's leeway given.
        let own = chain
            .iter()
            .filter(|t| {
                t.who == w.who
                    && match w.line {
                        Some(line) => t.line < line,
                        None => t.at <= w.at + Duration::from_secs(1),
                    }
            })
            .map(|t| t.generation)
            .max();
        let Some(own) = own else { continue };
        let taken = chain
            .iter()
            .filter(|t| t.generation > own && t.who != w.who && t.at + SLACK < w.at)
            .min_by_key(|t| t.generation);
        if let Some(t) = taken {
            let late = w.at.duration_since(t.at).unwrap_or_default();
            // The backup's requests from well before the takeover to the
            // write, every answer included: a finding that does not
            // replay still shows who renewed, checked and wrote when.
            let story = requests_of(
                access_log,
                &w.backup,
                t.at - Duration::from_secs(20),
                w.at + Duration::from_secs(2),
            );
            found.push(format!(
                "backup {}: {} wrote {} {}s after {} took generation {} (its own was {own}); its requests: {story:#?}",
                w.backup,
                w.who,
                w.what,
                late.as_secs(),
                t.who,
                t.generation
            ));
        }
    }
    Audit {
        store_writes,
        api_writes,
        takes: takes.values().map(Vec::len).sum(),
        late: found,
    }
}

#[test]
fn the_access_logs_time_is_read() {
    let at = access_time("[06/December/2026:17:14:30").unwrap();
    assert_eq!(
        humantime::format_rfc3339(at).to_string(),
        "2026-12-06T17:14:30Z"
    );
}

/// The audit on logs written here: replica 0 takes backup b's lease,
/// replica 1 takes the next generation at :10; replica 0's writes at :11
/// (within the slack) pass, its PUT at :20 and its status patch at :21
/// are late; replica 1's own writes and a hook claim pass, and so does a
/// write logged after its writer's own take in the same second.
#[test]
fn a_write_after_another_took_the_lease_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let line = |time: &str, op: &str, key: &str, agent: &str| {
        format!(
            "- bucket [06/December/2026:17:00:{time} +0000] 127.0.0.1 - ID s3_{op} {key} /bucket/{key} 200 - 0 0 1 1 - {agent} - host SigV4 - AuthHeader h - arn Yes\n"
        )
    };
    let lease_of = |b: &str, g: u32| format!("backups/{b}/{b}-lease-{g:020}.json");
    let lease = |g: u32| lease_of("b", g);
    let access = [
        line("01", "PutObject", &lease(1), "iar-replica-0"),
        line(
            "02",
            "PutObject",
            "backups/b/velero-backup.json",
            "iar-replica-0",
        ),
        line("10", "PutObject", &lease(2), "iar-replica-1"),
        line("11", "PutObject", "backups/b/b-results.gz", "iar-replica-0"),
        // Backup c: replica 2 takes it back (generation 3) and writes in
        // the same second, the write logged after the take; its arrival,
        // reckoned from the whole second less the 900 ms it took, falls
        // before the take's (the campaign's seed 3642). Its own.
        line("01", "PutObject", &lease_of("c", 1), "iar-replica-2"),
        line("05", "PutObject", &lease_of("c", 2), "iar-replica-1"),
        line("13", "PutObject", &lease_of("c", 3), "iar-replica-2"),
        "- bucket [06/December/2026:17:00:13 +0000] 127.0.0.1 - ID s3_PutObject backups/c/c-logs.gz /backups/c/c-logs.gz 200 - 0 0 900 1 - iar-replica-2 - host SigV4 - AuthHeader h - arn Yes\n".to_string(),
        line(
            "12",
            "PutObject",
            "backups/b/velero-backup.json",
            "iar-replica-1",
        ),
        line(
            "20",
            "PutObject",
            "backups/b/velero-backup.json",
            "iar-replica-0",
        ),
        line(
            "20",
            "PutObject",
            "backups/b/b-claims/post/shop/db-0",
            "iar-replica-0",
        ),
        line(
            "20",
            "PutObject",
            "backups/b/velero-backup.json",
            "iar-replica-9",
        ),
    ]
    .concat();
    std::fs::write(dir.path().join("access.log"), access).unwrap();
    let event = |time: &str, agent: &str| {
        serde_json::json!({"verb": "patch", "userAgent": agent,
            "objectRef": {"resource": "backups", "namespace": "ns", "name": "b", "subresource": "status"},
            "responseStatus": {"code": 200},
            "requestReceivedTimestamp": format!("2026-12-06T17:00:{time}.500000Z")})
        .to_string()
    };
    let audit_log = [event("03", "iar-replica-0"), event("21", "iar-replica-0")].join("\n");
    std::fs::write(dir.path().join("audit.log"), audit_log).unwrap();

    let found = audit(
        &dir.path().join("access.log"),
        &dir.path().join("audit.log"),
        "ns",
    );
    assert_eq!(found.takes, 5);
    assert_eq!(found.late.len(), 2, "{:#?}", found.late);
    assert!(
        found.late[0].contains("PutObject backups/b/velero-backup.json 10s after iar-replica-1")
    );
    assert!(found.late[1].contains("patch backups/b/status (phase ?) 11s after iar-replica-1"));
}
