//! Runs a test file's cases through the real engine: the same `Plugin`,
//! `PluginInstance`, limits and boundary checks as a backup, against a
//! [`StrictCluster`] of the case's fixtures.

use super::expect::{
    Budget, check_error, check_execute, compare_refs, compile_pattern, describe_error,
};
use super::restore_case;
use super::steps::Life;
use super::stubs::StrictCluster;
use super::testfile::{BackupSpec, Case, Fixture, Recording, RestoreSpec, TestFile};
use anyhow::{Context, anyhow, bail};
use iar_core::catalog::Catalog;
use iar_core::item::{Item, ItemRef};
use iar_plugin::Runtime;
use iar_plugin::plugin::{BackupRef, Interface, Phase, Plugin, RestoreRef};
use serde_json::json;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The outcome of one case: no failures means it passed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseReport {
    pub name: String,
    pub failures: Vec<String>,
    /// What the plugin logged during the case (`level: message`).
    pub logs: Vec<String>,
    #[serde(rename = "durationMs")]
    pub duration_ms: f64,
}

/// The outcome of one file's cases (only those the filter kept).
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileReport {
    pub file: String,
    pub plugins: Vec<String>,
    pub cases: Vec<CaseReport>,
}

#[derive(Default)]
pub struct Options {
    /// Only cases whose name contains this.
    pub filter: Option<String>,
    /// Replaces the plugin of a single-plugin file (a port of it to another
    /// language, a locally built copy).
    pub plugin: Option<PathBuf>,
}

/// The `*.iar-test.yaml` files among `paths` (files are taken as given,
/// directories are searched recursively), sorted.
pub fn discover(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                // Build output and VCS data hold no test files worth running.
                if !matches!(name, "target" | ".git" | "node_modules") {
                    walk(&path, out)?;
                }
            } else if name.ends_with(".iar-test.yaml") {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, &mut out)?;
        } else if p.exists() {
            out.push(p.clone());
        } else {
            bail!("{}: no such file or directory", p.display());
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// A plugin of the file: its bytes, read once, and its name.
struct PluginSource {
    name: String,
    path: PathBuf,
    bytes: Vec<u8>,
}

/// Runs one file. `Err` is a file that cannot be run at all (bad YAML, a
/// plugin that does not load, a case naming a missing item file): the
/// caller exits 2. Case failures are in the report.
pub fn run_file(runtime: &Runtime, path: &Path, opts: &Options) -> anyhow::Result<FileReport> {
    let file = TestFile::read(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut plugin_paths: Vec<PathBuf> = file.plugin.iter().chain(&file.plugins).cloned().collect();
    if let Some(over) = &opts.plugin {
        if plugin_paths.len() > 1 {
            bail!(
                "{}: --plugin replaces the plugin of a single-plugin file; this one names {}",
                path.display(),
                plugin_paths.len()
            );
        }
        plugin_paths = vec![over.clone()];
    } else {
        plugin_paths = plugin_paths.iter().map(|p| dir.join(p)).collect();
    }
    if plugin_paths.is_empty() {
        bail!(
            "{}: names no plugin (`plugin:` or `plugins:`)",
            path.display()
        );
    }
    let mut sources = Vec::new();
    for p in &plugin_paths {
        let bytes = std::fs::read(p)
            .with_context(|| format!("{}: reading plugin {}", path.display(), p.display()))?;
        let name = iar_plugin::plugin::name_from_path(p);
        // Loaded once with the file's settings so a plugin that cannot load
        // is a load error, not a failure of every case.
        let settings = file
            .settings
            .clone()
            .into_settings(std::collections::BTreeMap::new())
            .map_err(|e| anyhow!("{}: settings: {e}", path.display()))?;
        Plugin::from_bytes(runtime, &name, &bytes, settings)
            .with_context(|| format!("{}: loading plugin {}", path.display(), p.display()))?;
        sources.push(PluginSource {
            name,
            path: p.clone(),
            bytes,
        });
    }
    let mut cases = Vec::new();
    for case in &file.cases {
        if let Some(f) = &opts.filter
            && !case.name.contains(f.as_str())
        {
            continue;
        }
        let ctx = || format!("{}: case {:?}", path.display(), case.name);
        let source = match (&case.plugin, sources.len()) {
            (None, 1) => &sources[0],
            (None, _) => bail!("{}: names several plugins; say which with `plugin:`", ctx()),
            (Some(name), _) => sources
                .iter()
                .find(|s| &s.name == name)
                .with_context(|| format!("{}: no plugin named {name:?} in this file", ctx()))?,
        };
        let started = Instant::now();
        let (failures, logs) = run_case(runtime, &file, dir, case, source).with_context(ctx)?;
        cases.push(CaseReport {
            name: case.name.clone(),
            failures,
            logs,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        });
    }
    Ok(FileReport {
        file: path.display().to_string(),
        plugins: sources
            .iter()
            .map(|s| s.path.display().to_string())
            .collect(),
        cases,
    })
}

fn backup_ref(file: Option<&BackupSpec>, case: Option<&BackupSpec>, phase: Phase) -> BackupRef {
    let pick = |f: fn(&BackupSpec) -> Option<String>, default: &str| {
        case.and_then(f)
            .or_else(|| file.and_then(f))
            .unwrap_or_else(|| default.to_string())
    };
    BackupRef {
        object: None,
        name: pick(|b| b.name.clone(), "iar-test"),
        namespace: pick(|b| b.namespace.clone(), "velero"),
        uid: pick(|b| b.uid.clone(), "00000000-0000-0000-0000-000000000000"),
        spec: case
            .and_then(|b| b.spec.clone())
            .or_else(|| file.and_then(|b| b.spec.clone()))
            .unwrap_or_else(|| json!({})),
        phase,
    }
}

fn restore_ref(spec: &RestoreSpec) -> RestoreRef {
    RestoreRef {
        object: None,
        name: spec
            .name
            .clone()
            .unwrap_or_else(|| "iar-test-restore".into()),
        namespace: spec.namespace.clone().unwrap_or_else(|| "velero".into()),
        uid: spec
            .uid
            .clone()
            .unwrap_or_else(|| "00000000-0000-0000-0000-000000000001".into()),
        spec: spec
            .spec
            .clone()
            .unwrap_or_else(|| json!({"backupName": "iar-test"})),
    }
}

fn read_item(dir: &Path, case: &Case) -> anyhow::Result<Item> {
    let value = match (&case.item, &case.item_file) {
        (Some(v), None) => v.clone(),
        (None, Some(f)) => {
            let p = dir.join(f);
            let text =
                std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
            let mut docs = iar_core::manifests::parse_documents(&p, &text)?;
            if docs.len() != 1 {
                bail!("{}: expected one object, found {}", p.display(), docs.len());
            }
            docs.remove(0)
        }
        _ => bail!("give the item as exactly one of `item:` or `itemFile:`"),
    };
    Item::from_value(value, Catalog::builtin()).map_err(|e| anyhow!("item: {e}"))
}

/// Loads fixtures into the cluster; returns the ones a read is expected of.
fn load_fixtures(
    cluster: &StrictCluster,
    dir: &Path,
    fixtures: &[Fixture],
) -> anyhow::Result<Vec<ItemRef>> {
    let mut expected = Vec::new();
    for (i, f) in fixtures.iter().enumerate() {
        let mut ids = Vec::new();
        match (&f.object, &f.file, &f.absent) {
            (Some(obj), None, None) => ids.push(
                cluster
                    .set(obj.clone())
                    .map_err(|e| anyhow!("fixture {i}: {e}"))?,
            ),
            (None, Some(file), None) => {
                let p = dir.join(file);
                let text = std::fs::read_to_string(&p)
                    .with_context(|| format!("fixture {i}: reading {}", p.display()))?;
                for obj in iar_core::manifests::parse_documents(&p, &text)? {
                    ids.push(
                        cluster
                            .set(obj)
                            .map_err(|e| anyhow!("{}: {e}", p.display()))?,
                    );
                }
            }
            (None, None, Some(r)) => {
                let id = ItemRef::from(r.clone());
                cluster.remove(id.clone());
                ids.push(id);
            }
            _ => bail!("fixture {i}: give exactly one of `object:`, `file:` or `absent:`"),
        }
        if f.expect_get {
            expected.extend(ids);
        }
    }
    Ok(expected)
}

fn load_replay(cluster: &StrictCluster, dir: &Path, files: &[PathBuf]) -> anyhow::Result<()> {
    for f in files {
        let p = dir.join(f);
        let text = std::fs::read_to_string(&p)
            .with_context(|| format!("replay: reading {}", p.display()))?;
        let rec: Recording =
            iar_core::yaml::from_str(&text).with_context(|| format!("replay {}", p.display()))?;
        for g in rec.gets {
            match g.object {
                Some(obj) => {
                    cluster
                        .set(obj)
                        .map_err(|e| anyhow!("replay {}: {e}", p.display()))?;
                }
                None => cluster.remove(g.id.into()),
            }
        }
    }
    Ok(())
}

/// Failures of one case and the plugin's log lines; `Err` is a case that
/// cannot run (bad input).
fn run_case(
    runtime: &Runtime,
    file: &TestFile,
    dir: &Path,
    case: &Case,
    source: &PluginSource,
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let mut settings = file
        .settings
        .clone()
        .into_settings(case.config.clone())
        .map_err(|e| anyhow!("settings: {e}"))?;
    if let Some(d) = case.max_duration {
        settings.limits.deadline = d;
    }
    if let Some(m) = case.max_memory {
        settings.limits.memory_bytes = m;
    }
    let item = read_item(dir, case)?;
    let cluster = Arc::new(StrictCluster::default());
    let mut expected_gets = load_fixtures(&cluster, dir, &file.fixtures)?;
    load_replay(&cluster, dir, &case.replay)?;
    expected_gets.extend(load_fixtures(&cluster, dir, &case.fixtures)?);
    expected_gets.extend(case.expected_gets.iter().cloned().map(ItemRef::from));
    for p in case.expect.pointers.keys() {
        if !p.is_empty() && !p.starts_with('/') {
            bail!("pointer {p:?} is not a JSON pointer (it must start with '/')");
        }
    }
    let pattern = compile_pattern(&case.expect)?;
    let budget = Budget::of(case);
    let mut failures = Vec::new();

    let plugin = match Plugin::from_bytes(runtime, &source.name, &source.bytes, settings) {
        Ok(p) => p,
        Err(e) => {
            failures.push(budget.explain(&format!("plugin did not load: {e}"), None));
            return Ok((failures, Vec::new()));
        }
    };
    let backup = backup_ref(file.backup.as_ref(), case.backup.as_ref(), case.phase);
    let restore = case.restore.as_ref().map(restore_ref);
    // A restore case's item is the backed-up one as Velero hands it to its
    // restore actions (in its backed-up namespace).
    let (from_backup, item) = match &restore {
        Some(r) => {
            let restored = r
                .as_restored(&item)
                .map_err(|e| anyhow!("the item as restored: {e}"))?;
            (Some(item), restored)
        }
        None => (None, item),
    };
    let related = restore.is_none()
        && (case.expect.related_items.is_some() || !plugin.exports(Interface::ItemAction));
    let applies = match (&restore, related) {
        // Velero picks restore actions by the item's target namespace.
        (Some(r), _) => plugin.restore_applies(
            &r.mapped(&item)
                .map_err(|e| anyhow!("the item as restored: {e}"))?,
        ),
        (None, true) => plugin.block_applies(&item),
        (None, false) => plugin.applies(&item),
    };
    let want_applies = case.expect.applies_to.unwrap_or(true);
    let mut instance = plugin.instance(cluster.clone());
    let claimed = RefCell::new(BTreeSet::new());
    let seen = |id: &str| !claimed.borrow_mut().insert(id.to_string());
    if applies != want_applies {
        failures.push(format!(
            "appliesTo: expected the plugin to {} {}, it {} it",
            if want_applies { "select" } else { "skip" },
            item.id,
            if applies { "selected" } else { "skipped" },
        ));
    } else if applies && related {
        let got = instance.get_related_items(&item, &backup);
        match (got, &case.expect.error) {
            (Ok(ids), None) => {
                let want = case.expect.related_items.clone().unwrap_or_default();
                compare_refs("relatedItems", &want, &ids, &mut failures);
            }
            (Ok(_), Some(e)) => failures.push(format!(
                "expected get-related-items to fail{}, it succeeded",
                describe_error(e)
            )),
            (Err(e), want) => check_error("get-related-items", &e, want, &budget, &mut failures),
        }
    } else if let (true, Some(r), Some(from_backup)) = (applies, &restore, &from_backup) {
        let out = instance.restore_execute(&item, from_backup, r, &seen);
        // Expectations are on the item as the restore creates it: in its
        // mapped namespace, as Velero maps it after its actions.
        let as_created = |i: &Item| {
            r.mapped(i)
                .map_err(|e| anyhow!("the item as restored: {e}"))
        };
        let out = match out {
            Ok(mut o) => {
                o.item = o.item.as_ref().map(as_created).transpose()?;
                Ok(o)
            }
            Err(e) => Err(e),
        };
        let shown = as_created(&item)?;
        let out = restore_case::check(&shown, out, &case.expect, &pattern, &budget, &mut failures);
        let mut life = Life {
            instance: &mut instance,
            cluster: &cluster,
            item: &item,
            backup: &backup,
            restore: Some(r),
            budget: &budget,
            seen: &seen,
            failures: &mut failures,
        };
        life.run(out.as_ref(), &case.steps)?;
    } else if applies {
        let out = instance.execute(&item, &backup, &seen);
        let out = check_execute(
            "execute",
            &item,
            out,
            &case.expect,
            &pattern,
            &budget,
            &mut failures,
        );
        let mut life = Life {
            instance: &mut instance,
            cluster: &cluster,
            item: &item,
            backup: &backup,
            restore: None,
            budget: &budget,
            seen: &seen,
            failures: &mut failures,
        };
        life.run(out.as_ref(), &case.steps)?;
    }
    if let Some(want) = &case.expect.created {
        compare_refs("created", want, &cluster.created(), &mut failures);
    }
    if let Some(want) = &case.expect.deleted {
        compare_refs("deleted", want, &cluster.deleted(), &mut failures);
    }
    for miss in cluster.misses() {
        failures.push(format!(
            "unexpected host call: cluster-get of {miss} is not in the fixtures (declare it as a fixture, or as `absent:`)"
        ));
    }
    for id in expected_gets {
        if !cluster.was_read(&id) {
            failures.push(format!(
                "declared expectation never used: cluster-get of {id}"
            ));
        }
    }
    let logs = instance
        .take_logs()
        .into_iter()
        .map(|l| format!("{}: {}", l.level, l.message))
        .collect();
    Ok((failures, logs))
}
