use super::*;
use iar_core::cluster::{ClusterError, ClusterWriter, Created};
use serde_json::json;
use std::sync::Mutex;

/// The pod as the API server shows it on each read: the states in turn,
/// the last one for ever.
struct Scripted(Mutex<Vec<Option<Value>>>);

impl ClusterWriter for Scripted {
    fn create_within(&self, _: &ItemRef, _: Value, _: Duration) -> Result<Created, ClusterError> {
        unreachable!("hooks only read")
    }
}

#[async_trait::async_trait]
impl ClusterReader for Scripted {
    fn get(&self, id: &ItemRef) -> Result<Option<Value>, ClusterError> {
        assert_eq!(id.to_string(), "pods shop/db-0");
        let mut states = self.0.lock().unwrap();
        Ok(if states.len() > 1 {
            states.remove(0)
        } else {
            states[0].clone()
        })
    }
}

/// Records each exec; fails the commands named in `failing`.
#[derive(Default)]
struct Execs {
    ran: Mutex<Vec<String>>,
    failing: Vec<&'static str>,
}

impl PodExec for Execs {
    fn exec(&self, namespace: &str, pod: &str, hook: &ExecHook) -> Result<(), String> {
        let command = hook.command.join(" ");
        self.ran
            .lock()
            .unwrap()
            .push(format!("{namespace}/{pod} {}: {command}", hook.container));
        if self.failing.contains(&command.as_str()) {
            return Err("command terminated with exit code 2".into());
        }
        Ok(())
    }
}

/// The pod with its containers' states: `(name, running, ready)`.
fn state(phase: &str, containers: &[(&str, bool, bool)]) -> Option<Value> {
    let statuses: Vec<Value> = containers
        .iter()
        .map(|(name, running, ready)| {
            let state = if *running {
                json!({"running": {"startedAt": "2026-12-07T00:00:00Z"}})
            } else {
                json!({"waiting": {"reason": "PodInitializing"}})
            };
            json!({"name": name, "ready": ready, "state": state})
        })
        .collect();
    Some(json!({
        "metadata": {"name": "db-0", "namespace": "shop"},
        "spec": {"containers": [{"name": "db"}, {"name": "sidecar"}]},
        "status": {"phase": phase, "containerStatuses": statuses},
    }))
}

fn hook(container: &str, command: &str) -> ExecHook {
    ExecHook {
        name: "h".into(),
        container: container.into(),
        command: vec![command.into()],
        on_error: OnError::Continue,
        exec_timeout: Duration::ZERO,
        wait_timeout: Duration::ZERO,
        wait_for_ready: false,
    }
}

fn run_with(states: Vec<Option<Value>>, hooks: Vec<ExecHook>, execs: Arc<Execs>) -> Report {
    run(
        PodHooks {
            namespace: "shop".into(),
            pod: "db-0".into(),
            hooks,
        },
        Arc::new(Scripted(Mutex::new(states))),
        execs,
        None,
    )
}

/// Each container's hooks run in order once it runs; a container that
/// waits for ready waits past running.
#[test]
fn hooks_run_once_their_container_is_up() {
    let execs = Arc::new(Execs::default());
    let mut ready_hook = hook("sidecar", "notify");
    ready_hook.wait_for_ready = true;
    let report = run_with(
        vec![
            state(
                "Pending",
                &[("db", false, false), ("sidecar", false, false)],
            ),
            state("Running", &[("db", true, false), ("sidecar", true, false)]),
            state("Running", &[("db", true, true), ("sidecar", true, true)]),
        ],
        vec![hook("db", "first"), hook("db", "second"), ready_hook],
        execs.clone(),
    );
    assert_eq!(
        *execs.ran.lock().unwrap(),
        [
            "shop/db-0 db: first",
            "shop/db-0 db: second",
            "shop/db-0 sidecar: notify"
        ]
    );
    assert_eq!((report.attempted, report.failed), (3, 0));
    assert!(report.errors.is_empty(), "{:?}", report.errors);
}

/// A failed hook is an error whatever its mode; after one whose mode is
/// Fail, the pod's other hooks are not run, each an error saying why.
#[test]
fn after_a_failed_fail_hook_the_pods_other_hooks_are_not_run() {
    let execs = Arc::new(Execs {
        failing: vec!["soft", "hard"],
        ..Execs::default()
    });
    let mut hard = hook("db", "hard");
    hard.on_error = OnError::Fail;
    let report = run_with(
        vec![
            state("Running", &[("db", true, true), ("sidecar", false, false)]),
            state("Running", &[("db", true, true), ("sidecar", true, true)]),
        ],
        vec![
            hook("db", "soft"),
            hard,
            hook("db", "never"),
            hook("sidecar", "later"),
        ],
        execs.clone(),
    );
    assert_eq!(
        *execs.ran.lock().unwrap(),
        ["shop/db-0 db: soft", "shop/db-0 db: hard"]
    );
    assert_eq!((report.attempted, report.failed), (4, 4));
    assert!(
        report.errors[0].contains("failed to execute, err: command terminated with exit code 2")
    );
    let not_run: Vec<_> = report
        .errors
        .iter()
        .filter(|e| e.contains("not executed"))
        .collect();
    assert_eq!(not_run.len(), 2, "{:?}", report.errors);
    assert!(
        not_run.iter().all(|e| e.contains("whose onError is Fail")),
        "{not_run:?}"
    );
}

/// A pod that ends, or goes, before its containers run its hooks; a
/// container it does not have.
#[test]
fn a_pod_that_ends_or_goes_runs_no_more_hooks() {
    let execs = Arc::new(Execs::default());
    let report = run_with(
        vec![state("Failed", &[("db", false, false)])],
        vec![hook("db", "x"), hook("missing", "y")],
        execs.clone(),
    );
    assert!(execs.ran.lock().unwrap().is_empty());
    assert_eq!((report.attempted, report.failed), (1, 1));
    assert!(
        report.errors[0].contains("pod entered phase Failed"),
        "{:?}",
        report.errors
    );
    assert!(
        report.warnings[0].contains("does not have container missing"),
        "{:?}",
        report.warnings
    );

    let report = run_with(
        vec![state("Pending", &[("db", false, false)]), None],
        vec![hook("db", "x")],
        execs,
    );
    assert!(
        report.errors[0].contains("deleted before all hooks were executed"),
        "{:?}",
        report.errors
    );
}

/// A hook whose own wait timeout passed before its container ran is not
/// started; a hook without one still runs.
#[test]
fn a_hook_past_its_wait_timeout_is_not_started() {
    let execs = Arc::new(Execs::default());
    let mut hasty = hook("db", "hasty");
    hasty.wait_timeout = Duration::from_millis(500);
    let report = run_with(
        vec![
            state("Pending", &[("db", false, false)]),
            state("Running", &[("db", true, true)]),
        ],
        vec![hasty, hook("db", "patient")],
        execs.clone(),
    );
    assert_eq!(*execs.ran.lock().unwrap(), ["shop/db-0 db: patient"]);
    assert_eq!((report.attempted, report.failed), (2, 1));
    assert!(
        report.errors[0].contains("hook h in container db expired before executing"),
        "{:?}",
        report.errors
    );
}

/// Told to stop (the restore's leader lost its term), the wait ends at
/// once and the hooks are failures saying so.
#[test]
fn a_stopped_restore_stops_waiting() {
    let execs = Arc::new(Execs::default());
    let report = run(
        PodHooks {
            namespace: "shop".into(),
            pod: "db-0".into(),
            hooks: vec![hook("db", "x")],
        },
        Arc::new(Scripted(Mutex::new(vec![state(
            "Pending",
            &[("db", false, false)],
        )]))),
        execs.clone(),
        Some(Arc::new(AtomicBool::new(true))),
    );
    assert!(execs.ran.lock().unwrap().is_empty());
    assert!(
        report.errors[0].contains("the restore was stopped"),
        "{:?}",
        report.errors
    );
}
