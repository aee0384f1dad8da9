use super::*;
use iar_core::catalog::Catalog;
use serde_json::json;
use std::time::{Duration, Instant};

fn pod(ns: &str, name: &str, labels: Value, annotations: Value) -> Item {
    Item::from_value(
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations},
                "spec": {"containers": [{"name": "app"}, {"name": "sidecar"}],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "db-data"}},
                                {"name": "scratch-1", "emptyDir": {}}]}}),
            Catalog::builtin(),
        )
        .unwrap()
}

fn hook(command: &[&str], on_error: OnError, timeout: Duration) -> ResolvedHook {
    ResolvedHook {
        source: HookSource::Spec("test".into()),
        phase: HookPhase::Pre,
        hook: ExecHook {
            container: "app".into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            on_error,
            timeout,
        },
    }
}

/// Annotation hooks: a JSON array or a plain string command, on-error,
/// a Go duration timeout, the first container by default, Velero's
/// defaults (Fail, 30 s); a bad value names the annotation.
#[test]
fn annotation_hooks_parse() {
    let p = pod(
        "ns",
        "db",
        json!({}),
        json!({
            "pre.hook.backup.velero.io/command": "[\"/bin/sh\", \"-c\", \"sync\"]",
            "pre.hook.backup.velero.io/on-error": "Continue",
            "pre.hook.backup.velero.io/timeout": "1m30s",
            "pre.hook.backup.velero.io/container": "sidecar",
            "post.hook.backup.velero.io/command": "/unfreeze --all",
        }),
    );
    assert_eq!(
        annotation_hook(&p, HookPhase::Pre).unwrap(),
        Some(ExecHook {
            container: "sidecar".into(),
            command: vec!["/bin/sh".into(), "-c".into(), "sync".into()],
            on_error: OnError::Continue,
            timeout: Duration::from_secs(90),
        })
    );
    assert_eq!(
        annotation_hook(&p, HookPhase::Post).unwrap(),
        Some(ExecHook {
            container: "app".into(),
            command: vec!["/unfreeze --all".into()],
            on_error: OnError::Fail,
            timeout: DEFAULT_TIMEOUT,
        })
    );
    let none = pod(
        "ns",
        "db",
        json!({}),
        json!({"pre.hook.backup.velero.io/container": "app"}),
    );
    assert_eq!(annotation_hook(&none, HookPhase::Pre).unwrap(), None);
    for (key, value) in [
        ("pre.hook.backup.velero.io/on-error", "Abort"),
        ("pre.hook.backup.velero.io/timeout", "soon"),
        ("pre.hook.backup.velero.io/command", "[\"unterminated\""),
    ] {
        let mut a = json!({"pre.hook.backup.velero.io/command": "true"});
        a[key] = json!(value);
        let e = annotation_hook(&pod("ns", "db", json!({}), a), HookPhase::Pre).unwrap_err();
        assert_eq!(e.at, format!("pod ns/db: annotation {key}"), "{e}");
    }
}

fn spec() -> Value {
    json!({"hooks": {"resources": [
        {"name": "freeze-db", "includedNamespaces": ["prod"], "labelSelector": {"matchLabels": {"app": "db"}},
         "pre": [{"exec": {"command": ["fsfreeze", "--freeze"], "onError": "Continue", "timeout": "10s"}},
                 {"exec": {"container": "sidecar", "command": ["flush"]}}],
         "post": [{"exec": {"command": ["fsfreeze", "--unfreeze"]}}]},
        {"name": "everywhere-but-kube-system", "excludedNamespaces": ["kube-system"],
         "pre": [{"exec": {"command": ["echo", "hi"]}}]}
    ]}})
}

/// Spec hooks apply by namespace and label selector, in definition
/// order, with the first container by default; a pod's annotation hook
/// replaces them for that phase only.
#[test]
fn spec_hooks_resolve_per_pod_and_phase() {
    let hooks = BackupHooks::from_spec(&spec()).unwrap();
    let cmds = |p: &Item, phase| -> Vec<(String, String, String)> {
        hooks
            .for_pod(p, phase)
            .unwrap()
            .into_iter()
            .map(|h| {
                (
                    h.source.to_string(),
                    h.hook.container,
                    h.hook.command.join(" "),
                )
            })
            .collect()
    };
    let db = pod("prod", "db-0", json!({"app": "db"}), json!({}));
    assert_eq!(
        cmds(&db, HookPhase::Pre),
        vec![
            (
                "hook \"freeze-db\"".into(),
                "app".into(),
                "fsfreeze --freeze".into()
            ),
            (
                "hook \"freeze-db\"".into(),
                "sidecar".into(),
                "flush".into()
            ),
            (
                "hook \"everywhere-but-kube-system\"".into(),
                "app".into(),
                "echo hi".into()
            ),
        ]
    );
    assert_eq!(cmds(&db, HookPhase::Post).len(), 1);
    let web = pod("prod", "web", json!({"app": "web"}), json!({}));
    assert_eq!(cmds(&web, HookPhase::Pre).len(), 1);
    assert_eq!(cmds(&web, HookPhase::Post).len(), 0);
    let system = pod("kube-system", "dns", json!({"app": "db"}), json!({}));
    assert!(cmds(&system, HookPhase::Pre).is_empty());
    let annotated = pod(
        "prod",
        "db-1",
        json!({"app": "db"}),
        json!({"pre.hook.backup.velero.io/command": "[\"own\"]"}),
    );
    assert_eq!(
        cmds(&annotated, HookPhase::Pre),
        vec![("annotation hook".into(), "app".into(), "own".into())]
    );
    // Only the pre phase is annotated: post still comes from the spec.
    assert_eq!(
        cmds(&annotated, HookPhase::Post)[0].2,
        "fsfreeze --unfreeze"
    );
    let first = &hooks.for_pod(&db, HookPhase::Pre).unwrap()[0].hook;
    assert_eq!(
        (first.on_error, first.timeout),
        (OnError::Continue, Duration::from_secs(10))
    );
}

/// A bad spec hook names the resource hook and the field.
#[test]
fn bad_spec_hooks_name_the_field() {
    let cases = [
        (
            json!({"name": "h", "pre": [{"exec": {"command": []}}]}),
            "spec.hooks.resources[0] (h).pre[0].exec.command",
        ),
        (
            json!({"name": "h", "post": [{"exec": {"command": ["x"], "onError": "Retry"}}]}),
            "spec.hooks.resources[0] (h).post[0].exec.onError",
        ),
        (
            json!({"name": "h", "pre": [{"exec": {"command": ["x"], "timeout": "1 minute"}}]}),
            "spec.hooks.resources[0] (h).pre[0].exec.timeout",
        ),
        (
            json!({"name": "h", "pre": [{"http": {}}]}),
            "spec.hooks.resources[0] (h).pre[0].exec",
        ),
        (json!({"pre": []}), "spec.hooks.resources[0].name"),
    ];
    for (r, at) in cases {
        let e = BackupHooks::from_spec(&json!({"hooks": {"resources": [r]}})).unwrap_err();
        assert_eq!(e.at, at, "{e}");
    }
}

fn target(dir: &std::path::Path) -> HookTarget {
    HookTarget::for_pod(&pod("prod", "db-0", json!({}), json!({})), Some(dir))
}

/// A local hook runs as a real process with the pod's volume
/// directories in its environment: it writes a marker into one.
#[tokio::test]
async fn local_hook_finds_its_volume_directories() {
    let dir = tempfile::tempdir().unwrap();
    let t = target(dir.path());
    assert_eq!(t.volume_dirs["data"], dir.path().join("prod/db-data"));
    assert_eq!(
        t.volume_dirs["scratch-1"],
        dir.path().join("prod/.pods/db-0/scratch-1")
    );
    std::fs::create_dir_all(&t.volume_dirs["data"]).unwrap();
    let runner = LocalProcessRunner {
        volume_data: dir.path().into(),
    };
    let h = hook(
        &[
            "sh",
            "-c",
            "echo \"$IAR_POD_NAMESPACE/$IAR_POD_NAME $IAR_HOOK_PHASE $IAR_CONTAINER\" > \"$IAR_VOLUME_DIR_DATA/marker\"; test -n \"$IAR_VOLUME_DIR_SCRATCH_1\"",
        ],
        OnError::Fail,
        Duration::from_secs(10),
    );
    assert_eq!(runner.run(&t, &h).await.status, HookStatus::Succeeded);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("prod/db-data/marker")).unwrap(),
        "prod/db-0 pre app\n"
    );
}

/// What a hook prints is kept for the backup's log, the last
/// [`STDERR_TAIL`] bytes of each stream, on success as on failure.
#[tokio::test]
async fn local_hook_output_is_kept_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let runner = LocalProcessRunner {
        volume_data: dir.path().into(),
    };
    let h = hook(
        &[
            "sh",
            "-c",
            "echo flushed; for i in $(seq 1 3000); do echo out-$i; done; echo warn >&2",
        ],
        OnError::Fail,
        Duration::from_secs(10),
    );
    let run = runner.run(&target(dir.path()), &h).await;
    assert_eq!(run.status, HookStatus::Succeeded);
    assert!(run.output.stdout.len() <= STDERR_TAIL);
    assert!(
        run.output.stdout.ends_with("out-3000\n"),
        "{}",
        run.output.stdout
    );
    assert!(!run.output.stdout.contains("flushed"));
    assert_eq!(run.output.stderr, "warn\n");
}

/// A hook's environment is cleared: it sees `PATH`, `LANG` and its
/// `IAR_*` variables, and none of iar's own (this test process's
/// `CARGO_*` variables, which cargo sets for it, stand for the store's
/// credentials). Before, the hook inherited everything.
#[tokio::test]
async fn local_hook_sees_only_its_own_environment() {
    let dir = tempfile::tempdir().unwrap();
    // What the shell itself sets (its working directory, its level).
    let shell = ["PWD", "SHLVL", "_", "OLDPWD"];
    let inherited: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| {
            !HOOK_ENV.contains(&k.as_str())
                && !k.starts_with("IAR_")
                && !shell.contains(&k.as_str())
        })
        .collect();
    assert!(
        inherited.iter().any(|k| k.starts_with("CARGO_")),
        "cargo sets CARGO_* for tests: {inherited:?}"
    );
    let runner = LocalProcessRunner {
        volume_data: dir.path().into(),
    };
    let h = hook(
        &["sh", "-c", "env > \"$IAR_VOLUME_DATA/env\""],
        OnError::Fail,
        Duration::from_secs(10),
    );
    assert_eq!(
        runner.run(&target(dir.path()), &h).await.status,
        HookStatus::Succeeded
    );
    let env = std::fs::read_to_string(dir.path().join("env")).unwrap();
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, _)| k)
        .collect();
    for name in &names {
        assert!(
            HOOK_ENV.contains(name) || name.starts_with("IAR_") || shell.contains(name),
            "{name} reached the hook: {env}"
        );
    }
    for name in &inherited {
        assert!(!names.contains(&name.as_str()), "{name} leaked: {env}");
    }
    assert!(env.contains("LANG=C.UTF-8"), "{env}");
    assert!(env.lines().any(|l| l.starts_with("PATH=/")), "{env}");
    assert!(env.contains("IAR_POD_NAME=db-0"), "{env}");
}

/// A failing hook reports its exit code and the tail of its stderr; a
/// command that cannot start fails naming it.
#[tokio::test]
async fn local_hook_failure_keeps_exit_code_and_stderr_tail() {
    let dir = tempfile::tempdir().unwrap();
    let runner = LocalProcessRunner {
        volume_data: dir.path().into(),
    };
    let h = hook(
        &[
            "sh",
            "-c",
            "for i in $(seq 1 2000); do echo line-$i >&2; done; exit 3",
        ],
        OnError::Fail,
        Duration::from_secs(10),
    );
    let HookStatus::Failed {
        exit_code,
        stderr_tail,
    } = runner.run(&target(dir.path()), &h).await.status
    else {
        panic!("not failed");
    };
    assert_eq!(exit_code, Some(3));
    assert!(stderr_tail.len() <= STDERR_TAIL);
    assert!(stderr_tail.ends_with("line-2000\n"), "{stderr_tail}");
    let missing = hook(&["/no/such/hook"], OnError::Fail, Duration::from_secs(1));
    let HookStatus::Failed {
        exit_code: None,
        stderr_tail,
    } = runner.run(&target(dir.path()), &missing).await.status
    else {
        panic!("started a missing command");
    };
    assert!(stderr_tail.contains("/no/such/hook"), "{stderr_tail}");
}

/// A hook that outlives its timeout is reported TimedOut at the timeout,
/// and everything it started is killed: a child that would write a
/// marker later is gone, so it never does.
#[tokio::test]
async fn local_hook_timeout_kills_the_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let runner = LocalProcessRunner {
        volume_data: dir.path().into(),
    };
    let h = hook(
        &["sh", "-c", "(sleep 1; touch late) & sleep 30"],
        OnError::Fail,
        Duration::from_millis(200),
    );
    let start = Instant::now();
    assert_eq!(
        runner.run(&target(dir.path()), &h).await.status,
        HookStatus::TimedOut
    );
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // Every process the hook started works in the volume data. None is
    // left there, so none can write the marker later: that, not a sleep
    // past the child's second, bounds the claim.
    iar_tests::wait_for(
        "the hook's processes killed",
        Duration::from_secs(10),
        || {
            let left = processes_in(dir.path());
            std::future::ready(if left.is_empty() {
                Ok(())
            } else {
                Err(format!("pids {left:?}"))
            })
        },
    )
    .await;
    assert!(
        !dir.path().join("late").exists(),
        "a hook's child outlived its timeout"
    );
}

/// The live processes whose working directory is `dir` (a zombie has
/// none).
fn processes_in(dir: &std::path::Path) -> Vec<u32> {
    let dir = dir.canonicalize().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|pid: &u32| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c == dir))
        .collect()
}

/// [`processes_in`] sees a process working in a directory, and not once
/// it is gone: the hook timeout test's check is not vacuous.
#[test]
fn processes_in_a_directory_are_seen() {
    let dir = tempfile::tempdir().unwrap();
    assert!(processes_in(dir.path()).is_empty());
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .current_dir(dir.path())
        .spawn()
        .unwrap();
    assert_eq!(processes_in(dir.path()), [sleeper.id()]);
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(processes_in(dir.path()).is_empty());
}

fn record(status: HookStatus, on_error: OnError) -> HookRecord {
    HookRecord {
        pod: ItemRef::new("", "pods", "ns", "p"),
        hook: hook(&["x"], on_error, Duration::from_secs(1)),
        status,
        output: HookOutput::default(),
        started: None,
        ended: None,
    }
}

/// onError as a pure function: Fail fails the block, Continue warns,
/// skipped warns, success is fine; messages name the pod and the hook.
#[test]
fn verdicts() {
    let failed = HookStatus::Failed {
        exit_code: Some(1),
        stderr_tail: "no space".into(),
    };
    assert_eq!(
        verdict(&record(HookStatus::Succeeded, OnError::Fail)),
        Verdict::Ok
    );
    let Verdict::BlockFailed(m) = verdict(&record(failed.clone(), OnError::Fail)) else {
        panic!()
    };
    assert!(
        m.contains("ns/p")
            && m.contains("exit code 1")
            && m.contains("no space")
            && m.contains("hook \"test\""),
        "{m}"
    );
    assert!(matches!(
        verdict(&record(failed, OnError::Continue)),
        Verdict::Warning(_)
    ));
    let Verdict::Warning(m) = verdict(&record(HookStatus::TimedOut, OnError::Continue)) else {
        panic!()
    };
    assert!(m.contains("timed out after 1s"), "{m}");
    assert!(matches!(
        verdict(&record(HookStatus::TimedOut, OnError::Fail)),
        Verdict::BlockFailed(_)
    ));
    assert!(matches!(
        verdict(&record(
            HookStatus::Skipped { reason: "r".into() },
            OnError::Fail
        )),
        Verdict::Warning(_)
    ));
}

/// As in Velero: a pod whose pre hook failed or timed out with
/// `onError: Continue` still gets its post hooks (a freeze that overran
/// its timeout is still a freeze); one whose pre hook failed the block
/// (`onError: Fail`) or was skipped does not; one whose pre hooks all
/// succeeded (or had none) does.
#[test]
fn post_hooks_run_unless_a_pre_hook_failed_the_block() {
    let ok = record(HookStatus::Succeeded, OnError::Fail);
    let failed = |on_error| {
        record(
            HookStatus::Failed {
                exit_code: Some(1),
                stderr_tail: String::new(),
            },
            on_error,
        )
    };
    assert!(post_hooks_allowed(&[]));
    assert!(post_hooks_allowed(std::slice::from_ref(&ok)));
    assert!(post_hooks_allowed(&[ok.clone(), failed(OnError::Continue)]));
    assert!(post_hooks_allowed(&[record(
        HookStatus::TimedOut,
        OnError::Continue
    )]));
    assert!(!post_hooks_allowed(&[ok.clone(), failed(OnError::Fail)]));
    assert!(!post_hooks_allowed(&[
        failed(OnError::Continue),
        record(HookStatus::TimedOut, OnError::Fail)
    ]));
    assert!(!post_hooks_allowed(&[record(
        HookStatus::Skipped { reason: "r".into() },
        OnError::Fail
    )]));
    assert!(!post_hooks_allowed(&[record(
        HookStatus::Skipped { reason: "r".into() },
        OnError::Continue
    )]));
}

/// Hooks of one phase run in order with real processes; a Continue
/// failure does not stop the next hook, a Fail failure does.
#[tokio::test]
async fn run_hooks_stops_at_the_first_failing_fail_hook() {
    let dir = tempfile::tempdir().unwrap();
    let runner = LocalProcessRunner {
        volume_data: dir.path().into(),
    };
    let hooks = vec![
        hook(
            &["sh", "-c", "echo 1 >> order; exit 1"],
            OnError::Continue,
            Duration::from_secs(10),
        ),
        hook(
            &["sh", "-c", "echo 2 >> order; exit 1"],
            OnError::Fail,
            Duration::from_secs(10),
        ),
        hook(
            &["sh", "-c", "echo 3 >> order"],
            OnError::Fail,
            Duration::from_secs(10),
        ),
    ];
    // Each run is stamped by the clock it is given.
    let clock = iar_core::clock::ManualClock::new();
    let records = run_hooks(&runner, &target(dir.path()), &hooks, &clock).await;
    assert_eq!(records.len(), 2);
    let at = Some(iar_core::clock::Clock::system_now(&clock));
    assert!(
        records.iter().all(|r| r.started == at && r.ended == at),
        "{records:?}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("order")).unwrap(),
        "1\n2\n"
    );
    assert!(records.iter().all(|r| r.started <= r.ended));
    // Without --exec-hooks-locally nothing runs: every hook is skipped.
    let skipped = run_hooks(&SkippingRunner, &target(dir.path()), &hooks, &clock).await;
    assert_eq!(skipped.len(), 3);
    assert!(
        skipped
            .iter()
            .all(|r| matches!(r.status, HookStatus::Skipped { .. }))
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("order")).unwrap(),
        "1\n2\n"
    );
    // Records serialize for results and logs.
    let json = serde_json::to_value(&records[1]).unwrap();
    assert_eq!(json["status"], "failed");
    assert_eq!(json["exitCode"], 1);
    assert_eq!(json["phase"], "pre");
    assert_eq!(json["hook"]["onError"], "Fail");
}

#[test]
fn volume_env_names() {
    assert_eq!(volume_env_name("data"), "IAR_VOLUME_DIR_DATA");
    assert_eq!(volume_env_name("scratch-1.x"), "IAR_VOLUME_DIR_SCRATCH_1_X");
}

/// What a hook prints cannot forge a line of the backup's log or reach a
/// terminal as an escape: a real hook's stdout and stderr with newlines,
/// a carriage return and an ANSI colour come out as one line each, with
/// those written as escapes, in its log lines and in the record's text
/// (the results' message). The JSON record keeps the bytes as printed.
#[tokio::test]
async fn hook_output_is_escaped_as_plugin_logs_are() {
    let dir = tempfile::tempdir().unwrap();
    let runner = LocalProcessRunner {
        volume_data: dir.path().into(),
    };
    let forged = r"printf 'ok\n2026-01-01T00:00:00Z backup=b error: forged\r\033[31mred\n'";
    let script = format!("{forged}; {forged} >&2; exit 1");
    let records = run_hooks(
        &runner,
        &target(dir.path()),
        &[hook(
            &["sh", "-c", &script],
            OnError::Continue,
            Duration::from_secs(10),
        )],
        &iar_core::clock::RealClock,
    )
    .await;
    let record = &records[0];
    assert!(record.output.stdout.contains('\u{1b}'), "{record:?}");
    let lines: Vec<_> = record.output.log_lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (stream, text) in &lines {
        assert!(!text.chars().any(char::is_control), "{stream}: {text}");
        assert_eq!(
            text, "ok\\n2026-01-01T00:00:00Z backup=b error: forged\\r\\u{1b}[31mred",
            "{stream}"
        );
    }
    let shown = record.to_string();
    assert!(!shown.chars().any(char::is_control), "{shown}");
    assert!(shown.contains("forged\\r\\u{1b}[31mred"), "{shown}");
    let Verdict::Warning(m) = verdict(record) else {
        panic!("Continue warns")
    };
    assert!(!m.chars().any(char::is_control), "{m}");
    // A container name from an annotation is the pod's too.
    let mut named = record.clone();
    named.hook.hook.container = "db\n2026-01-01T00:00:00Z forged".into();
    assert!(!named.to_string().contains('\n'), "{named}");
}

/// Timeouts over the cap are clamped to it, one warning each naming the
/// pod, the hook and the rule; at or under it they are left alone.
#[test]
fn timeouts_over_the_cap_are_clamped() {
    let cap = Duration::from_secs(600);
    let mut hooks = vec![
        hook(&["a"], OnError::Fail, Duration::from_secs(3600)),
        hook(&["b"], OnError::Fail, cap),
        hook(&["c"], OnError::Fail, Duration::from_secs(5)),
    ];
    let warnings = cap_timeouts(&ItemRef::new("", "pods", "ns", "p"), &mut hooks, cap);
    let timeouts: Vec<_> = hooks.iter().map(|h| h.hook.timeout).collect();
    assert_eq!(timeouts, [cap, cap, Duration::from_secs(5)]);
    assert_eq!(
        warnings,
        [
            "pre hook \"test\" of pod ns/p: timeout 1h is over --max-hook-timeout 10m; it runs with 10m (rule: hook-timeout-cap)"
        ]
    );
}
