//! `iar test` as a plugin author runs it: every example plugin's test file
//! passes against the real component; each kind of mismatch fails its case
//! with an exact message; JSON and JUnit reports; `iar run --record` feeds
//! a `replay:` case.

use crate::support::{iar, repo, stdout_json, text};
use iar_tests::artifacts;
use std::process::Output;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn file(name: &str) -> String {
    format!("host/tests/iar-test-files/{name}.iar-test.yaml")
}

#[test]
fn every_example_plugins_test_file_passes() {
    for (plugin, dir) in [
        (artifacts::LABELS, "plugins/labels"),
        (artifacts::POD_VOLUMES, "plugins/pod-volumes"),
        (artifacts::PVC_SNAPSHOT, "plugins/pvc-snapshot"),
        (artifacts::CONFIG_BLOCK, "plugins/config-block"),
    ] {
        let out = iar(&["test", "--plugin", plugin, dir]);
        assert_eq!(out.status.code(), Some(0), "{dir}: {}", text(&out));
        let s = stdout(&out);
        assert!(!s.contains("FAIL"), "{s}");
        assert!(s.contains(" passed, 0 failed"), "{s}");
    }
}

/// A plugin path in the file is relative to the file, and a file may be
/// found by searching a directory.
#[test]
fn the_plugin_is_found_relative_to_the_test_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(artifacts::LABELS, dir.path().join("labels.wasm")).unwrap();
    std::fs::copy(
        repo().join(file("wrong-output")),
        dir.path().join("w.iar-test.yaml"),
    )
    .unwrap();
    let out = iar(&["test", dir.path().to_str().unwrap(), "--filter", "passes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stdout(&out).contains("1 cases: 1 passed, 0 failed"));
}

#[test]
fn a_wrong_output_fails_with_a_diff_and_the_pointer() {
    let out = iar(&["test", "--plugin", artifacts::LABELS, &file("wrong-output")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let f = file("wrong-output");
    let want = format!(
        "FAIL {f} › expects the wrong team
     - execute: output item differs from expected (- expected, + actual):
         ...
           \"metadata\": {{
             \"labels\": {{
       -       \"team\": \"platform\"
       +       \"team\": \"payments\"
             }},
             \"name\": \"settings\",
         ...
     plugin log:
       debug: labelled ConfigMap settings
FAIL {f} › expects the wrong pointer value
     - execute: output item at /metadata/labels/team: expected \"platform\", found \"payments\"
     plugin log:
       debug: labelled ConfigMap settings
ok   {f} › passes

3 cases: 1 passed, 2 failed
"
    );
    assert_eq!(stdout(&out), want);
}

#[test]
fn an_undeclared_host_call_fails_the_case_naming_the_object() {
    let out = iar(&[
        "test",
        "--plugin",
        artifacts::PVC_SNAPSHOT,
        &file("unexpected-get"),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stdout(&out).contains(
        "\n     - unexpected host call: cluster-get of persistentvolumes pv-data is not in the fixtures (declare it as a fixture, or as `absent:`)\n"
    ), "{}", text(&out));
}

#[test]
fn a_declared_read_never_made_fails_the_case() {
    let out = iar(&[
        "test",
        "--plugin",
        artifacts::LABELS,
        &file("unused-expectation"),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let s = stdout(&out);
    assert!(
        s.contains(
            "     - declared expectation never used: cluster-get of namespaces shop\n     - declared expectation never used: cluster-get of secrets shop/token\n"
        ),
        "{s}"
    );
}

/// Budgets are the plugin's own limits for the case, enforced by the
/// engine; the failure names the budget and the rule.
#[test]
fn budgets_exceeded_fail_naming_the_budget() {
    let out = iar(&["test", "--plugin", artifacts::HOSTILE, &file("budget")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let s = stdout(&out);
    assert!(s.contains(
        "     - budget maxDuration of 100ms exceeded: execute failed: plugin \"iar_guest_hostile\": execute of configmaps shop/settings: ran past its CPU deadline of 100ms and was stopped (rule: cpu-deadline)\n"
    ), "{s}");
    assert!(s.contains(
        "     - budget maxMemory of 16777216 bytes exceeded: execute failed: plugin \"iar_guest_hostile\": execute of configmaps shop/settings: tried to grow its memory to "
    ), "{s}");
    assert!(
        s.contains("over its cap of 16777216 (rule: memory-cap)\n"),
        "{s}"
    );
    assert!(s.contains("3 cases: 1 passed, 2 failed"), "{s}");
}

#[test]
fn filter_json_and_junit() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("junit.xml");
    let out = iar(&[
        "test",
        "--plugin",
        artifacts::LABELS,
        "--format",
        "json",
        "--filter",
        "wrong",
        "--junit",
        junit.to_str().unwrap(),
        &file("wrong-output"),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = stdout_json(&out);
    assert_eq!(
        (report["passed"].as_u64(), report["failed"].as_u64()),
        (Some(0), Some(2))
    );
    let cases = &report["files"][0]["cases"];
    assert_eq!(cases.as_array().unwrap().len(), 2, "the filter kept two");
    assert_eq!(cases[1]["name"], "expects the wrong pointer value");
    assert_eq!(
        cases[1]["failures"][0],
        "execute: output item at /metadata/labels/team: expected \"platform\", found \"payments\""
    );
    assert_eq!(cases[1]["logs"][0], "debug: labelled ConfigMap settings");

    // The JUnit file is well-formed XML with one failing testcase per case.
    let xml = std::fs::read_to_string(&junit).unwrap();
    let mut reader = quick_xml::Reader::from_str(&xml);
    let (mut testcases, mut failures, mut suites, mut outs) = (Vec::new(), Vec::new(), 0, 0);
    loop {
        match reader.read_event().expect("valid XML") {
            quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e) => {
                let attr = |name: &str| {
                    e.try_get_attribute(name).unwrap().map(|a| {
                        a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                            .unwrap()
                            .into_owned()
                    })
                };
                match e.name().as_ref() {
                    b"testsuites" => assert_eq!(attr("failures").as_deref(), Some("2")),
                    b"testsuite" => {
                        suites += 1;
                        assert_eq!(attr("tests").as_deref(), Some("2"));
                    }
                    b"testcase" => testcases.push(attr("name").unwrap()),
                    b"failure" => failures.push(attr("message").unwrap()),
                    b"system-out" => {
                        let text = reader
                            .read_text(e.name())
                            .unwrap()
                            .decode()
                            .unwrap()
                            .into_owned();
                        assert_eq!(text, "debug: labelled ConfigMap settings");
                        outs += 1;
                    }
                    _ => {}
                }
            }
            quick_xml::events::Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!((suites, outs), (1, 2));
    assert_eq!(
        testcases,
        ["expects the wrong team", "expects the wrong pointer value"]
    );
    assert_eq!(
        failures,
        [
            "execute: output item differs from expected (- expected, + actual):",
            "execute: output item at /metadata/labels/team: expected \"platform\", found \"payments\""
        ]
    );
}

#[test]
fn bad_input_exits_2_naming_the_file_and_case() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.iar-test.yaml");
    std::fs::write(
        &bad,
        "plugin: x.wasm\ncases:\n  - name: one\n    item: {kind: Pod}\n    expect: {unchnaged: true}\n",
    )
    .unwrap();
    let out = iar(&["test", "--plugin", artifacts::LABELS, bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.iar-test.yaml") && err.contains("unknown field `unchnaged`"),
        "{err}"
    );

    std::fs::write(
        &bad,
        "plugin: x.wasm\ncases:\n  - name: one\n    item: {kind: Pod}\n",
    )
    .unwrap();
    let out = iar(&["test", "--plugin", artifacts::LABELS, bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.iar-test.yaml: case \"one\": item: missing apiVersion"),
        "{err}"
    );

    let out = iar(&["test", "no/such/dir"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// `iar run --record` keeps what cluster-get answered (here the claim's
/// PersistentVolume, read by pvc-snapshot's execute); a case replays it as
/// fixtures and passes strict mode.
#[test]
fn a_recorded_run_replays_as_fixtures() {
    let dir = tempfile::tempdir().unwrap();
    let recording = dir.path().join("volume.recording.yaml");
    let overlay = dir.path().join("overlay");
    let out = iar(&[
        "run",
        "--plugin",
        artifacts::PVC_SNAPSHOT,
        "--item",
        "examples/items/pvc.yaml",
        "--cluster",
        "examples/cluster",
        "--overlay",
        overlay.to_str().unwrap(),
        "--allow-write",
        "volumesnapshots.snapshot.storage.k8s.io",
        "--allow-mutate",
        "persistentvolumeclaims",
        "--record",
        recording.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let recorded = std::fs::read_to_string(&recording).unwrap();
    assert!(
        recorded.contains("resource: persistentvolumes"),
        "{recorded}"
    );
    assert!(
        recorded.contains("driver: hostpath.csi.k8s.io"),
        "{recorded}"
    );

    let pvc = repo().join("examples/items/pvc.yaml");
    let class = repo().join("examples/cluster/volumesnapshotclass.yaml");
    let test = dir.path().join("replay.iar-test.yaml");
    std::fs::write(
        &test,
        format!(
            "plugin: none.wasm
backup: {{name: demo}}
settings: {{allowWrite: [volumesnapshots.snapshot.storage.k8s.io], allowMutate: [persistentvolumeclaims]}}
cases:
  - name: replays the recorded volume
    itemFile: {}
    replay: [volume.recording.yaml]
    fixtures:
      - file: {}
    expectedGets:
      - {{group: \"\", resource: persistentvolumes, namespace: \"\", name: pv-data-web-0}}
    expect:
      operationId: shop/data-web-0-demo
      created:
        - {{group: snapshot.storage.k8s.io, resource: volumesnapshots, namespace: shop, name: data-web-0-demo}}
",
            pvc.display(),
            class.display()
        ),
    )
    .unwrap();
    let out = iar(&[
        "test",
        "--plugin",
        artifacts::PVC_SNAPSHOT,
        test.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

/// A file may test several plugins; each case names the one it calls, and
/// `--plugin` refuses to guess which one to replace.
#[test]
fn a_file_with_several_plugins_names_one_per_case() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(artifacts::LABELS, dir.path().join("labels.wasm")).unwrap();
    std::fs::copy(artifacts::POD_VOLUMES, dir.path().join("pod-volumes.wasm")).unwrap();
    let pod = repo().join("examples/items/pod.yaml");
    let test = dir.path().join("both.iar-test.yaml");
    let cases = format!(
        "plugins: [labels.wasm, pod-volumes.wasm]
settings: {{allowMutate: ['*'], config: {{labels: team=a}}}}
cases:
  - name: labels
    plugin: labels
    itemFile: {pod}
    expect: {{pointers: {{/metadata/labels/team: a}}}}
  - name: volumes
    plugin: pod-volumes
    itemFile: {pod}
    expect: {{unchanged: true, additionalItems: [{{resource: persistentvolumeclaims, namespace: shop, name: data-web-0}}]}}
",
        pod = pod.display()
    );
    std::fs::write(&test, &cases).unwrap();
    let out = iar(&["test", test.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stdout(&out).contains("2 cases: 2 passed, 0 failed"));

    let out = iar(&[
        "test",
        "--plugin",
        artifacts::LABELS,
        test.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--plugin replaces the plugin of a single-plugin file; this one names 2"),
        "{}",
        text(&out)
    );

    std::fs::write(&test, cases.replace("    plugin: labels\n", "")).unwrap();
    let out = iar(&["test", test.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("case \"labels\": names several plugins; say which with `plugin:`"),
        "{}",
        text(&out)
    );
}

/// Expected errors at each stage of an operation's life: progress, cancel,
/// and a finalize pass that breaks no-operation-in-finalize.
#[test]
fn expected_errors_across_an_operations_life_pass() {
    let out = iar(&[
        "test",
        "--plugin",
        artifacts::HOSTILE,
        &file("hostile-life"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stdout(&out).contains("4 cases: 4 passed, 0 failed"));
}

#[test]
fn each_unmet_expectation_has_its_message() {
    let out = iar(&["test", "--plugin", artifacts::HOSTILE, &file("mismatches")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = stdout_json(&iar(&[
        "test",
        "--plugin",
        artifacts::HOSTILE,
        "--format",
        "json",
        &file("mismatches"),
    ]));
    let first_lines: Vec<String> = report["files"][0]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let f = c["failures"].as_array().unwrap();
            assert_eq!(f.len(), 1, "{c}");
            f[0].as_str()
                .unwrap()
                .split(": plugin ")
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        first_lines,
        [
            "expected execute to fail with rule no-trap, it succeeded",
            "execute: expected an operation id matching \"op-[0-9]+\", got \"op-settings\"",
            "appliesTo: expected the plugin to skip configmaps shop/settings, it selected it",
            "step 1 (poll): expected completed true, got false",
            "expected execute to fail with rule plugin-error, it failed with rule no-trap",
        ]
    );
}

/// Restore cases (contract 1.3.0) run the restore action on the item as
/// the restore creates it; an operation's life is polled through the
/// restore's own progress; an expectation the restore action does not
/// meet fails the case naming the field, and a rule it breaks the rule.
#[test]
fn restore_cases_run_the_restore_action_and_fail_by_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("restore.iar-test.yaml");
    std::fs::write(
        &path,
        format!(
            r#"plugin: {plugin}
settings: {{allowMutate: [configmaps]}}
cases:
  - name: an operation, polled to its end
    item: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: db, namespace: shop, annotations: {{restore-hostile: operation}}}}}}
    restore: {{}}
    expect: {{operationId: op-db}}
    steps:
      - poll: {{completed: true, description: restored}}
  - name: a skip and a wait
    item: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: app, namespace: shop, annotations: {{restore-hostile: wait}}}}}}
    restore: {{}}
    expect:
      waitForAdditionalItems: true
      additionalItems: [{{resource: configmaps, namespace: shop, name: dep}}]
  - name: wrongly expects a skip
    item: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: app, namespace: shop}}}}
    restore: {{}}
    expect: {{skipRestore: true}}
  - name: a rename is refused by rule
    item: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: app, namespace: shop, annotations: {{restore-hostile: rename}}}}}}
    restore: {{}}
    expect: {{error: {{rule: item-identity-unchanged}}}}
"#,
            plugin = artifacts::RESTORE_HOSTILE
        ),
    )
    .unwrap();
    let out = iar(&["test", "--format", "json", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = stdout_json(&out);
    let cases = report["files"][0]["cases"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"));
    let failures: Vec<(&str, usize)> = cases
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["failures"].as_array().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(
        failures,
        [
            ("an operation, polled to its end", 0),
            ("a skip and a wait", 0),
            ("wrongly expects a skip", 1),
            ("a rename is refused by rule", 0),
        ],
        "{report:#}"
    );
    let why = cases[2]["failures"][0].as_str().unwrap();
    assert!(
        why.contains("expected skipRestore true, got false"),
        "{why}"
    );
}
