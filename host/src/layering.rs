//! Keeps the crate's shape: data flows one way, so a module imports only
//! from modules below it ([`LAYERS`], lowest first), and no two sibling
//! modules anywhere import each other, directly or round a loop. Read from
//! the `crate::`/`super::` paths of the sources, comments left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules, lowest first: each may import only from those
/// before it. `cli` and `main` (the binary) sit above all of them.
const LAYERS: &[&str] = &[
    "limits",
    "catalog",
    "names",
    "item_scan",
    "spool",
    "item",
    "identifier",
    "select",
    "manifests",
    "metrics",
    "tls",
    "store",
    "operations",
    "cluster",
    "contract",
    "sandbox",
    "runtime",
    "plugin",
    "backup",
    "phases",
    "authoring",
    "k8s",
    "velero_plugin",
];

/// A module path from the crate root, `["k8s", "plugins", "watcher"]`.
type Module = Vec<String>;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("src is readable").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/k8s/plugins/watcher.rs` → `k8s::plugins::watcher`; `mod.rs` and
/// `lib.rs` name their directory.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut parts: Module = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The text without comments (doc links name modules without importing)
/// and without an inline unit-test module (tests may reach anywhere; by
/// this crate's convention it is the last item of its file).
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(at) => &l[..at],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module path a file names: `crate::a::b` and `super::a`, with the
/// groups of a `use x::{a, b::c}` expanded one level.
fn named_paths(module: &Module, is_dir_module: bool, text: &str) -> Vec<Module> {
    let mut found = Vec::new();
    // `super` of `a/b.rs` (module a::b) is `a`; of `a/b/mod.rs` also `a`.
    let parent: Module = module[..module.len().saturating_sub(1)].to_vec();
    let _ = is_dir_module;
    let bytes = text.as_bytes();
    for (prefix, base) in [("crate::", Module::new()), ("super::", parent)] {
        let mut at = 0;
        while let Some(i) = text[at..].find(prefix) {
            let start = at + i;
            at = start + prefix.len();
            // `self::super::` or `foo_crate::` are not ours.
            if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
                continue;
            }
            let rest = &text[at..];
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for part in group[..end].split(',') {
                    let mut path = base.clone();
                    path.extend(segments(part.trim()));
                    found.push(path);
                }
            } else {
                let mut path = base.clone();
                path.extend(segments(rest));
                found.push(path);
            }
        }
    }
    found
}

/// The leading `a::b::c` of a path, up to the first thing that is not a
/// lower-case segment (a type, a glob, a group).
fn segments(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    for seg in path.split("::") {
        let name: String = seg
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
            break;
        }
        let whole = name.len() == seg.len();
        out.push(name);
        if !whole {
            break;
        }
    }
    out
}

/// Edges between modules: `from` names something in `to`, with `to` the
/// longest named prefix that is a module of the crate.
fn edges(src: &Path) -> BTreeSet<(Module, Module)> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let modules: BTreeSet<Module> = files.iter().map(|f| module_of(src, f)).collect();
    let mut edges = BTreeSet::new();
    for file in &files {
        let from = module_of(src, file);
        // Unit tests may reach anywhere.
        if from.last().is_some_and(|m| m == "tests") {
            continue;
        }
        let is_dir = file.file_name().is_some_and(|n| n == "mod.rs");
        let text = code(&std::fs::read_to_string(file).expect("readable"));
        for mut to in named_paths(&from, is_dir, &text) {
            while !to.is_empty() && !modules.contains(&to) {
                to.pop();
            }
            if to != from {
                edges.insert((from.clone(), to));
            }
        }
    }
    edges
}

/// Two modules as the children of their nearest common ancestor they sit
/// under; `None` when one contains the other (a parent and its child may
/// use each other's items).
fn as_siblings(a: &Module, b: &Module) -> Option<(Module, String, String)> {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    if common == a.len() || common == b.len() {
        return None;
    }
    Some((a[..common].to_vec(), a[common].clone(), b[common].clone()))
}

/// A loop among siblings, as `a → b → a`, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_imports_from_a_layer_above_it() {
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
    let mut upward = Vec::new();
    for (from, to) in edges(&src()) {
        let (Some(f), Some(t)) = (from.first(), to.first()) else {
            continue;
        };
        if f == t || matches!(f.as_str(), "cli" | "main" | "layering") {
            continue;
        }
        match (rank(f), rank(t)) {
            (Some(a), Some(b)) if b < a => {}
            (a, b) => upward.push(format!(
                "{} → {} ({f} is layer {a:?}, {t} layer {b:?})",
                from.join("::"),
                to.join("::")
            )),
        }
    }
    assert!(upward.is_empty(), "imports that climb: {upward:#?}");
}

#[test]
fn no_sibling_modules_import_each_other_round_a_loop() {
    let mut graphs: BTreeMap<Module, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (from, to) in edges(&src()) {
        if let Some((parent, a, b)) = as_siblings(&from, &to) {
            graphs
                .entry(parent)
                .or_default()
                .entry(a)
                .or_default()
                .insert(b);
        }
    }
    let loops: Vec<String> = graphs
        .iter()
        .filter_map(|(parent, g)| {
            cycle(g).map(|c| format!("in crate::{}: {}", parent.join("::"), c.join(" → ")))
        })
        .collect();
    assert!(loops.is_empty(), "import cycles: {loops:#?}");
}

/// The checks see what they claim to: the cycle this crate once had
/// (k8s::gc ↔ k8s::reconcile) is found, and a `use super::{a, b::c}`
/// names both modules.
#[test]
fn the_checks_find_a_known_cycle_and_grouped_imports() {
    let m = |s: &str| s.split("::").map(String::from).collect::<Module>();
    let named = named_paths(
        &m("k8s::gc"),
        false,
        "use super::{reconcile::Context, crd::Backup};\nuse crate::phases::gc::Outcome;",
    );
    assert!(named.contains(&m("k8s::reconcile::Context")) || named.contains(&m("k8s::reconcile")));
    assert!(named.contains(&m("k8s::crd")));
    assert!(named.contains(&m("phases::gc")));
    let mut g = BTreeMap::new();
    g.insert("gc".to_string(), BTreeSet::from(["reconcile".to_string()]));
    g.insert("reconcile".to_string(), BTreeSet::from(["gc".to_string()]));
    assert_eq!(
        cycle(&g),
        Some(vec!["gc".into(), "reconcile".into(), "gc".into()])
    );
    g.remove("reconcile");
    assert_eq!(cycle(&g), None);
    assert_eq!(
        as_siblings(&m("k8s::gc"), &m("k8s::reconcile")).unwrap().0,
        m("k8s")
    );
    assert_eq!(as_siblings(&m("k8s"), &m("k8s::crd")), None);
}
