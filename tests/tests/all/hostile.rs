//! Hostile plugins, built from source in tests/guests/hostile: each way a
//! plugin can misbehave ends in one exact typed error, and the same host then
//! processes the next item with a well-behaved plugin.

use crate::support::*;
use iar::plugin::{ActionError, Call, Target, Violation};
use iar::{BackupRef, CallError, Limits, NoCluster, Phase};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn execute_hostile(
    behavior: &str,
    limits: Limits,
    phase: Phase,
) -> (iar::Runtime, Result<iar::plugin::ExecuteResult, CallError>) {
    let runtime = runtime();
    let plugin = load_with(
        &runtime,
        artifacts::HOSTILE,
        &[("behavior", behavior)],
        limits,
    );
    let mut instance = plugin.instance(Arc::new(NoCluster));
    let result = instance.execute(&pod("web-0"), &backup(phase), &never_seen);
    (runtime, result)
}

/// Runs a behaviour that must fail, checks the error names the plugin, the
/// call and the item, and that the host still works afterwards.
fn violation_of(behavior: &str, limits: Limits) -> Violation {
    let (runtime, result) = execute_hostile(behavior, limits, Phase::Backup);
    let err = result.expect_err("the hostile call must fail");
    assert_eq!(err.plugin, "iar_guest_hostile");
    assert_eq!(err.call, Call::Execute);
    assert_eq!(err.target, Target::Item(pod("web-0").id));
    let message = err.to_string();
    assert!(
        message.starts_with("plugin \"iar_guest_hostile\": execute of pods shop/web-0: "),
        "{message}"
    );
    assert!(
        message.contains(&format!("(rule: {})", err.violation.rule()))
            || err.violation.rule() == "plugin-error",
        "{message}"
    );
    host_still_works(&runtime);
    err.violation
}

#[test]
fn endless_loop_is_stopped_at_its_deadline() {
    let deadline = Duration::from_millis(200);
    let limits = Limits {
        deadline,
        ..Limits::default()
    };
    let started = Instant::now();
    assert_eq!(violation_of("loop", limits), Violation::Deadline(deadline));
    // Stopped by the plugin's own short deadline, not the 10 s default.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn unbounded_allocation_hits_the_memory_cap() {
    let limits = Limits {
        memory_bytes: 16 << 20,
        ..Limits::default()
    };
    match violation_of("alloc", limits) {
        Violation::MemoryCap { limit, requested } => {
            assert_eq!(limit, 16 << 20);
            assert!(requested > limit);
        }
        other => panic!("expected the memory cap, got {other}"),
    }
}

#[test]
fn deep_recursion_overflows_the_stack() {
    assert_eq!(
        violation_of("recurse", Limits::default()),
        Violation::StackOverflow
    );
}

#[test]
fn a_panic_is_a_trap_with_the_panic_message() {
    match violation_of("panic", Limits::default()) {
        Violation::Trap { message } => {
            assert!(message.contains("unreachable"), "{message}");
            assert!(
                message.contains("hostile plugin panicked on purpose"),
                "{message}"
            );
        }
        other => panic!("expected a trap, got {other}"),
    }
}

#[test]
fn an_item_that_is_not_an_object_is_refused() {
    assert_eq!(
        violation_of("not-object", Limits::default()),
        Violation::ItemNotObject("an array")
    );
    assert!(matches!(
        violation_of("not-json", Limits::default()),
        Violation::ItemNotJson(_)
    ));
}

#[test]
fn renaming_the_item_is_refused() {
    assert_eq!(
        violation_of("rename", Limits::default()),
        Violation::IdentityChanged {
            field: "name",
            before: "web-0".into(),
            after: "web-0-renamed".into()
        }
    );
    assert_eq!(
        violation_of("change-kind", Limits::default()),
        Violation::IdentityChanged {
            field: "kind",
            before: "Pod".into(),
            after: "Secret".into()
        }
    );
    // A core-group item whose apiVersion became a number still reads as the
    // core group; it must be refused all the same (found by fuzzing).
    assert_eq!(
        violation_of("drop-api-version", Limits::default()),
        Violation::IdentityChanged {
            field: "apiVersion",
            before: "v1".into(),
            after: "1".into()
        }
    );
}

#[test]
fn an_operation_id_during_finalize_is_refused_and_not_returned() {
    let (runtime, result) = execute_hostile("operation", Limits::default(), Phase::Finalize);
    let err = result.expect_err("finalize must refuse operations");
    assert_eq!(
        err.violation,
        Violation::OperationInFinalize("op-web-0".into())
    );
    assert!(
        err.to_string()
            .contains("it was not recorded (rule: no-operation-in-finalize)")
    );
    host_still_works(&runtime);

    // The same plugin in the backup phase may start it.
    let (_, result) = execute_hostile("operation", Limits::default(), Phase::Backup);
    let out = result.expect("operations are allowed in the backup phase");
    assert_eq!(out.operation_id.as_deref(), Some("op-web-0"));
    assert_eq!(out.post_operation_items, vec![pod("web-0").id]);
}

#[test]
fn lying_about_operations_is_refused() {
    assert_eq!(
        violation_of("empty-operation-id", Limits::default()),
        Violation::EmptyOperationId
    );
    assert_eq!(
        violation_of("post-items-without-operation", Limits::default()),
        Violation::PostItemsWithoutOperation
    );

    let runtime = runtime();
    let plugin = load(&runtime, artifacts::HOSTILE, &[("behavior", "operation")]);
    let mut instance = plugin.instance(Arc::new(NoCluster));
    let seen = |id: &str| id == "op-web-0";
    let err = instance
        .execute(&pod("web-0"), &backup(Phase::Backup), &seen)
        .unwrap_err();
    assert_eq!(
        err.violation,
        Violation::DuplicateOperationId("op-web-0".into())
    );
}

/// The guest tries a file, two directories, its environment and a TCP
/// connection to a port a real listener holds on loopback: all are denied,
/// and the listener saw no connection. (Before, the guest dialed port 80,
/// where nothing listens, so the test passed whether or not TCP was
/// allowed.)
#[test]
fn files_environment_and_network_are_out_of_reach() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let runtime = runtime();
    let plugin = load_with(
        &runtime,
        artifacts::HOSTILE,
        &[("behavior", "escape"), ("escape-port", &port)],
        Limits::default(),
    );
    let mut instance = plugin.instance(Arc::new(NoCluster));
    let err = instance
        .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
        .expect_err("escape fails, saying what it reached");
    assert_eq!(
        err.violation,
        Violation::Action(ActionError::Failed(
            "sandbox: file=denied; dir=denied; env=empty; socket=denied".into()
        ))
    );
    // A connect the kernel completed would be waiting in the backlog.
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Err(e) => panic!("accept: {e}"),
        Ok((_, from)) => panic!("the guest connected to the listener from {from}"),
    }
    // And the listener does take connections: the probe is real.
    std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
    iar_tests::blocking::wait_for(
        "the listener to accept a connection from outside the sandbox",
        Duration::from_secs(10),
        || listener.accept().map(drop).map_err(|e| e.to_string()),
    );
}

#[test]
fn oversized_outputs_are_refused() {
    // Room for the guest to build its 20 MiB answer, so the output limit,
    // not the memory cap, is what stops it.
    let limits = Limits {
        memory_bytes: 256 << 20,
        ..Limits::default()
    };
    match violation_of("oversized", limits) {
        Violation::OutputTooLarge { what, size, limit } => {
            assert_eq!(what, "an item (bytes)");
            assert_eq!(limit, Limits::default().max_item_bytes);
            assert!(size > 20 << 20);
        }
        other => panic!("expected output-size, got {other}"),
    }
    assert_eq!(
        violation_of("many-additional", Limits::default()),
        Violation::OutputTooLarge {
            what: "additional and post-operation items",
            size: 100_000,
            limit: 10_000
        }
    );
}

#[test]
fn a_plugin_error_is_reported_as_its_own() {
    assert_eq!(
        violation_of("fail", Limits::default()),
        Violation::Action(ActionError::Failed("refused on purpose".into()))
    );
    let (_, result) = execute_hostile("retryable", Limits::default(), Phase::Backup);
    assert!(result.unwrap_err().is_retryable());
}

/// A plugin failing every item with 60 KB of text cannot fill a backup's results (inside Velero, the server's memory):
/// past `maxErrorBytesPerRun` each item still fails, naming plugin and
/// item, with its text withheld (rule run-budget). Another backup has its
/// own budget.
#[test]
fn error_text_is_bounded_across_a_backups_calls() {
    let runtime = runtime();
    let limits = Limits {
        max_error_bytes_per_run: 100_000,
        ..Limits::default()
    };
    let plugin = load_with(
        &runtime,
        artifacts::HOSTILE,
        &[("behavior", "fail-loud")],
        limits,
    );
    let mut instance = plugin.instance(Arc::new(NoCluster));
    let run = |instance: &mut iar::plugin::PluginInstance, uid: &str, name: &str| {
        let backup = BackupRef {
            object: None,
            uid: uid.into(),
            ..backup(Phase::Backup)
        };
        instance
            .execute(&pod(name), &backup, &never_seen)
            .expect_err("fail-loud fails")
    };
    // 60 KB a call: the first fits, the second would pass 100 KB.
    let first = run(&mut instance, "u-loud-1", "web-0");
    assert_eq!(first.violation.rule(), "plugin-error");
    assert!(first.to_string().contains(&"x".repeat(60_000)));
    for name in ["web-1", "web-2"] {
        let later = run(&mut instance, "u-loud-1", name);
        let text = later.to_string();
        assert!(
            text.starts_with(&format!(
                "plugin \"iar_guest_hostile\": execute of pods shop/{name}: "
            )),
            "{text}"
        );
        assert!(
            text.contains("maxErrorBytesPerRun; rule: run-budget"),
            "{text}"
        );
        assert!(!text.contains("xxxx"), "the text is withheld");
        assert!(later.stderr.is_empty());
    }
    let other = run(&mut instance, "u-loud-2", "web-0");
    assert!(other.to_string().contains(&"x".repeat(60_000)));
    host_still_works(&runtime);
}

/// A guest writing 1 MiB to each of stdout and stderr keeps running, and
/// exactly the bound (64 KiB per stream) is kept; the rest is counted as
/// dropped, not buffered.
#[test]
fn chatty_output_is_bounded_and_does_not_break_the_plugin() {
    let runtime = runtime();
    let plugin = load(&runtime, artifacts::HOSTILE, &[("behavior", "stdout")]);
    let mut instance = plugin.instance(Arc::new(NoCluster));
    let out = instance
        .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
        .expect("writing 2 MiB of output is allowed; only 64 KiB is kept");
    assert_eq!(out.item, None);
    let bound = Limits::default().max_stdio_bytes;
    assert_eq!(bound, 64 << 10);
    let written = 1 << 20;
    assert_eq!(
        instance.last_stdio(),
        iar::plugin::StdioCounts {
            stdout_kept: bound,
            stdout_dropped: written - bound,
            stderr_kept: bound,
            stderr_dropped: written - bound,
        }
    );
}

/// A guest that opens WASI resources (stdout streams) in a loop without
/// dropping them hits the per-store resource table cap: a typed error with
/// the rule, not a host that grows a table until it runs out of memory.
#[test]
fn opening_wasi_resources_in_a_loop_hits_the_table_cap() {
    let limits = Limits {
        max_resources: 200,
        ..Limits::default()
    };
    assert_eq!(
        violation_of("resources", limits),
        Violation::ResourceTable { limit: 200 }
    );
    assert_eq!(
        violation_of("resources", Limits::default()),
        Violation::ResourceTable { limit: 1000 },
        "capped by default, at wasmtime's own test figure"
    );
}

/// `cluster-get` calls per call are bounded by `maxHostCalls`: one over
/// the limit stops the call with a typed error naming the rule; the limit
/// itself is allowed.
#[test]
fn too_many_cluster_gets_in_one_call_are_stopped() {
    let runtime = runtime();
    let limits = Limits {
        max_host_calls: 50,
        ..Limits::default()
    };
    for (calls, allowed) in [("50", true), ("51", false)] {
        let plugin = load_with(
            &runtime,
            artifacts::HOSTILE,
            &[("behavior", "cluster-get"), ("cluster-gets", calls)],
            limits.clone(),
        );
        let mut instance = plugin.instance(Arc::new(NoCluster));
        let result = instance.execute(&pod("web-0"), &backup(Phase::Backup), &never_seen);
        if allowed {
            result.expect("the limit itself is allowed");
        } else {
            let err = result.unwrap_err();
            assert_eq!(err.violation, Violation::HostCalls { limit: 50 });
            assert!(
                err.to_string()
                    .ends_with("made more than 50 host calls in one call and was stopped (rule: host-call-limit)"),
                "{err}"
            );
            // The count is per call: the next call on a fresh instance runs.
        }
    }
    host_still_works(&runtime);
}

/// Progress timestamps the operations file cannot hold (RFC 3339 covers
/// 1970 through 9999 here) are refused at the boundary with the rule, so
/// they never reach the file, where they would fail the whole upload.
#[test]
fn progress_times_the_operations_file_cannot_hold_are_refused() {
    let runtime = runtime();
    let item = pod("web-0").id;
    for (mode, expected) in [
        (
            "negative-time",
            Violation::TimestampOutOfRange {
                field: "started",
                seconds: -1,
            },
        ),
        (
            "year-10000",
            Violation::TimestampOutOfRange {
                field: "updated",
                seconds: 253_402_300_800,
            },
        ),
        (
            "bad-nanos",
            Violation::InvalidTimestamp {
                field: "started",
                nanos: 1_000_000_000,
            },
        ),
    ] {
        let plugin = load(&runtime, artifacts::HOSTILE, &[("progress", mode)]);
        let err = plugin
            .instance(Arc::new(NoCluster))
            .progress("op-1", &item, &backup(Phase::Backup))
            .unwrap_err();
        assert_eq!(err.violation, expected, "progress={mode}");
        assert!(err.to_string().ends_with("(rule: progress-sane)"), "{err}");
    }
    // An ordinary time passes.
    let plugin = load(&runtime, artifacts::HOSTILE, &[]);
    plugin
        .instance(Arc::new(NoCluster))
        .progress("op-1", &item, &backup(Phase::Backup))
        .expect("an in-range time passes");
}

/// An output the boundary refuses does not use up its operation id: the
/// id is claimed only after the whole output passed. A refused output with
/// id `op-fixed`, then a valid one with the same id from the same plugin,
/// succeeds; a third is a duplicate, so the claim is real.
#[test]
fn a_refused_output_does_not_use_up_its_operation_id() {
    let runtime = runtime();
    let plugin = load(
        &runtime,
        artifacts::HOSTILE,
        &[("behavior", "operation-fixed")],
    );
    let mut instance = plugin.instance(Arc::new(NoCluster));
    let claimed = std::sync::Mutex::new(std::collections::HashSet::new());
    let claim = |id: &str| !claimed.lock().unwrap().insert(id.to_string());
    let err = instance
        .execute(&pod("web-bad"), &backup(Phase::Backup), &claim)
        .unwrap_err();
    assert_eq!(err.violation, Violation::ItemNotObject("an array"));
    let out = instance
        .execute(&pod("web-0"), &backup(Phase::Backup), &claim)
        .expect("the id of the refused output is still free");
    assert_eq!(out.operation_id.as_deref(), Some("op-fixed"));
    let err = instance
        .execute(&pod("web-1"), &backup(Phase::Backup), &claim)
        .unwrap_err();
    assert_eq!(
        err.violation,
        Violation::DuplicateOperationId("op-fixed".into())
    );
}

#[test]
fn log_lines_reach_the_host_tagged_with_their_level() {
    let runtime = runtime();
    let plugin = load(&runtime, artifacts::HOSTILE, &[("behavior", "log")]);
    let mut instance = plugin.instance(Arc::new(NoCluster));
    instance
        .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
        .unwrap();
    let logs: Vec<_> = instance
        .take_logs()
        .into_iter()
        .map(|l| (l.level, l.message))
        .collect();
    let expected: Vec<_> = ["trace", "debug", "info", "warn", "error"]
        .into_iter()
        .map(|level| (level, "hello from hostile".to_string()))
        .collect();
    assert_eq!(logs, expected);
}

#[test]
fn a_trapped_instance_is_replaced_by_a_fresh_one() {
    let runtime = runtime();
    let plugin = load(&runtime, artifacts::HOSTILE, &[("behavior", "panic")]);
    let mut instance = plugin.instance(Arc::new(NoCluster));
    for _ in 0..3 {
        let err = instance
            .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
            .unwrap_err();
        assert!(matches!(err.violation, Violation::Trap { .. }));
    }
    assert_eq!(
        instance.instantiations(),
        3,
        "each call after a trap gets a fresh instance"
    );

    // A plugin that does not trap keeps its one instance across items.
    let plugin = load(&runtime, artifacts::HOSTILE, &[("behavior", "ok")]);
    let mut instance = plugin.instance(Arc::new(NoCluster));
    for i in 0..5 {
        instance
            .execute(
                &pod(&format!("web-{i}")),
                &backup(Phase::Backup),
                &never_seen,
            )
            .unwrap();
    }
    assert_eq!(instance.instantiations(), 1);
}

#[test]
fn progress_errors_and_loops_are_contained() {
    let runtime = runtime();
    let item = pod("web-0").id;
    let limits = Limits {
        deadline: Duration::from_millis(200),
        ..Limits::default()
    };
    for (mode, expected) in [
        (
            "fail",
            Violation::Action(ActionError::Failed("progress failed on purpose".into())),
        ),
        (
            "retryable",
            Violation::Action(ActionError::Retryable("not yet".into())),
        ),
        ("loop", Violation::Deadline(Duration::from_millis(200))),
    ] {
        let plugin = load_with(
            &runtime,
            artifacts::HOSTILE,
            &[("progress", mode)],
            limits.clone(),
        );
        let mut instance = plugin.instance(Arc::new(NoCluster));
        let err = instance
            .progress("op-1", &item, &backup(Phase::Backup))
            .unwrap_err();
        assert_eq!(err.call, Call::Progress);
        assert_eq!(
            err.target,
            Target::Operation {
                id: "op-1".into(),
                item: item.clone()
            }
        );
        assert_eq!(err.violation, expected, "progress={mode}");
    }
    let plugin = load(&runtime, artifacts::HOSTILE, &[("progress", "error")]);
    let p = plugin
        .instance(Arc::new(NoCluster))
        .progress("op-1", &item, &backup(Phase::Backup))
        .unwrap();
    assert!(p.completed);
    assert_eq!(p.error.as_deref(), Some("operation failed on purpose"));
}

#[test]
fn a_broken_applies_to_fails_the_load_naming_the_plugin() {
    let runtime = runtime();
    for (mode, rule) in [
        ("fail", "plugin-error"),
        ("invalid-labels", "valid-selector"),
        ("panic", "no-trap"),
    ] {
        let err = iar::Plugin::from_file(
            &runtime,
            artifacts::HOSTILE.as_ref(),
            settings(&[("applies-to", mode)], Limits::default()),
        )
        .unwrap_err();
        let iar::LoadError::AppliesTo(call) = &err else {
            panic!("expected an applies-to error, got {err}")
        };
        assert_eq!(call.call, Call::AppliesTo);
        assert_eq!(call.violation.rule(), rule, "{err}");
        assert!(
            err.to_string()
                .starts_with("plugin \"iar_guest_hostile\": applies-to: "),
            "{err}"
        );
    }
    host_still_works(&runtime);
}

/// Limits whose CPU deadline is far below the wall-clock ceiling, so a
/// test can tell which of the two stopped a call.
fn ceiling_limits() -> Limits {
    Limits {
        deadline: Duration::from_millis(100),
        wall_clock: Some(Duration::from_millis(600)),
        ..Limits::default()
    }
}

/// `std::thread::sleep(Duration::MAX)` is one WASI clock wait: no wasm
/// runs, so epoch interruption alone never reaches it and the call would
/// wait for ever. The wait is cut at the wall-clock ceiling and the call
/// stopped there, with its own rule; the host serves the next call.
#[test]
fn a_sleep_in_wasi_is_stopped_at_the_wall_clock_ceiling() {
    let started = Instant::now();
    assert_eq!(
        violation_of("sleep", ceiling_limits()),
        Violation::WallClock(Duration::from_millis(600))
    );
    // Not for ever (the bound is a hang check, not a speed claim).
    assert!(started.elapsed() < Duration::from_secs(30));
    // Unset, the ceiling is ten deadlines.
    let limits = Limits {
        deadline: Duration::from_millis(50),
        ..Limits::default()
    };
    assert_eq!(
        violation_of("sleep", limits),
        Violation::WallClock(Duration::from_millis(500))
    );
}

/// Many short clock waits, each under every bound and none of them CPU
/// time, add up past the ceiling: the epoch check between them stops the
/// call.
#[test]
fn a_busy_poll_on_the_clock_is_stopped_at_the_wall_clock_ceiling() {
    assert_eq!(
        violation_of("clock-poll", ceiling_limits()),
        Violation::WallClock(Duration::from_millis(600))
    );
}

/// The ceiling holds in every call of the contract, not only execute.
#[test]
fn sleeps_in_progress_cancel_and_applies_to_are_stopped_too() {
    let runtime = runtime();
    let item = pod("web-0").id;
    let ceiling = Violation::WallClock(Duration::from_millis(600));
    let plugin = load_with(
        &runtime,
        artifacts::HOSTILE,
        &[("progress", "sleep"), ("cancel", "sleep")],
        ceiling_limits(),
    );
    let mut instance = plugin.instance(Arc::new(NoCluster));
    let err = instance
        .progress("op-1", &item, &backup(Phase::Backup))
        .unwrap_err();
    assert_eq!((err.call, &err.violation), (Call::Progress, &ceiling));
    let err = instance
        .cancel("op-1", &item, &backup(Phase::Backup))
        .unwrap_err();
    assert_eq!((err.call, &err.violation), (Call::Cancel, &ceiling));
    assert!(err.to_string().contains("(rule: wall-clock)"), "{err}");

    let err = iar::Plugin::from_file(
        &runtime,
        artifacts::HOSTILE.as_ref(),
        settings(&[("applies-to", "sleep")], ceiling_limits()),
    )
    .unwrap_err();
    let iar::LoadError::AppliesTo(call) = &err else {
        panic!("expected an applies-to error, got {err}")
    };
    assert_eq!(call.violation, ceiling, "{err}");
    host_still_works(&runtime);
}

/// Peak resident set of this process so far, in bytes.
fn peak_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kb| kb << 10)
}

/// 500 additional items whose names all point at one 4 MiB buffer in the
/// guest: 2 GB if the host copied each. Lifting draws on a per-call budget
/// (`iar::plugin::lift_budget`: the memory cap plus the output limits,
/// 78 MiB with the defaults) before it copies, so the call is refused with
/// output-size and the host's peak memory stays far below what the aliases
/// add up to.
#[test]
fn aliased_outputs_cannot_make_the_host_allocate_more_than_the_budget() {
    let before = peak_rss();
    let violation = violation_of("alias", Limits::default());
    let budget = iar::plugin::lift_budget(&Limits::default());
    assert_eq!(violation, Violation::LiftBudget { limit: budget });
    let grew = peak_rss().saturating_sub(before);
    eprintln!(
        "aliased output: peak RSS grew by {} MiB (budget {} MiB; the aliases add up to 2000 MiB)",
        grew >> 20,
        budget >> 20
    );
    // The guest's own 64 MiB memory and the budget, with room for the rest
    // of the test process; nowhere near 2 GB.
    assert!(grew < 512 << 20, "peak RSS grew by {} MiB", grew >> 20);
}

/// A plugin whose settings file says `allowRead: ['*']` (or any other glob)
/// cannot read a Secret through `cluster-get`: only the exact entry
/// `secrets` grants them, for file plugins as for ConfigMap ones.
#[test]
fn a_glob_grant_does_not_read_secrets() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("secret.yaml"),
        "apiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: shop}\ndata: {password: aHVudGVyMg==}\n",
    )
    .unwrap();
    let cluster: Arc<dyn iar::ClusterReader> =
        Arc::new(iar::ManifestCluster::new(vec![dir.path().to_path_buf()]));
    let secret = item(
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "shop"}}),
    );
    let run = |allow_read: &str| {
        let doc = format!(
            // It annotates the Secret with what it found: a change granted
            // by exact name.
            "config: {{behavior: cluster-get, cluster-gets: '1'}}\nallowRead: {allow_read}\nallowMutate: [secrets]\n"
        );
        let settings = iar::plugin::SettingsFile::parse(&doc)
            .unwrap()
            .into_settings([])
            .unwrap();
        let plugin =
            iar::Plugin::from_file(&runtime, artifacts::HOSTILE.as_ref(), settings).unwrap();
        plugin
            .instance(cluster.clone())
            .execute(&secret, &backup(Phase::Backup), &never_seen)
            .map_err(|e| e.to_string())
    };
    for glob in ["['*']", "['secret*']", "['*s', '*.k8s.io']"] {
        let err = run(glob).expect_err("a glob must not grant Secrets");
        assert!(
            err.contains("cluster-get: reading secrets is not granted to this plugin"),
            "{glob}: {err}"
        );
    }
    let out = run("[secrets]").expect("the exact entry grants Secrets");
    let item = out.item.expect("annotated");
    assert_eq!(
        item.value()["metadata"]["annotations"]["hostile.iar.test/found"],
        "1"
    );
}
