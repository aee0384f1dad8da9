//! A plugin's applies-to answer (`iar::select::CompiledSelector::compile`
//! against the builtin resource catalog, then `matches`).
//!
//! Input is text, one field per line so seeds stay readable:
//! included namespaces, excluded namespaces, included resources, excluded
//! resources (each comma-separated; an empty line is an empty list), the
//! label selector, then one item per line as
//! `group|resource|namespace|key=value;key=value`.
//!
//! Properties (Velero's include/exclude semantics): a selector whose label
//! selector does not parse does not compile; an item that matches satisfies
//! the label selector, is not in an exactly excluded namespace or resource,
//! is in an included resource when the include list names resources
//! exactly, and is cluster-scoped only when no namespace filter is set; the
//! empty selector matches every item.

#![no_main]

use std::collections::BTreeMap;

use iar::catalog::Catalog;
use iar::select::LabelSelector;
use iar::select::{CompiledSelector, ResourceSelector};
use libfuzzer_sys::fuzz_target;

fn list(line: &str) -> Vec<String> {
    if line.is_empty() {
        Vec::new()
    } else {
        line.split(',').map(str::to_string).collect()
    }
}

fn is_glob(entry: &str) -> bool {
    entry.contains(['*', '?', '['])
}

/// What an exact (non-glob) resource entry means, as the selector resolves it.
fn resolved(entry: &str) -> String {
    match Catalog::builtin().resolve(entry) {
        Some(info) => info.group_resource().to_string(),
        None => entry.to_ascii_lowercase(),
    }
}

struct TestItem<'a> {
    group: &'a str,
    resource: &'a str,
    namespace: &'a str,
    labels: BTreeMap<String, String>,
}

fn item(line: &str) -> Option<TestItem<'_>> {
    let mut fields = line.splitn(4, '|');
    let group = fields.next()?;
    let resource = fields.next()?;
    let namespace = fields.next()?;
    let labels = fields
        .next()
        .unwrap_or("")
        .split(';')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Some(TestItem {
        group,
        resource,
        namespace,
        labels,
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.split('\n');
    let mut next = || lines.next().unwrap_or("");
    let sel = ResourceSelector {
        included_namespaces: list(next()),
        excluded_namespaces: list(next()),
        included_resources: list(next()),
        excluded_resources: list(next()),
        label_selector: next().to_string(),
    };
    let items: Vec<TestItem> = lines.filter_map(item).collect();

    let labels = sel.label_selector.parse::<LabelSelector>();
    let compiled = match CompiledSelector::compile(&sel, Catalog::builtin()) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let labels = labels
        .unwrap_or_else(|e| panic!("compiled although its label selector does not parse: {e}"));

    let trimmed = |v: &[String]| v.iter().map(|e| e.trim().to_string()).collect::<Vec<_>>();
    let inc_ns = trimmed(&sel.included_namespaces);
    let exc_ns = trimmed(&sel.excluded_namespaces);
    let inc_res = trimmed(&sel.included_resources);
    let exc_res = trimmed(&sel.excluded_resources);
    let everything = inc_ns.is_empty()
        && exc_ns.is_empty()
        && inc_res.is_empty()
        && exc_res.is_empty()
        && labels.is_empty();

    for it in &items {
        // The labels are read only when the selector has requirements: a
        // plugin-changed item is parsed on the host just to read them.
        let read = std::cell::Cell::new(false);
        let m = compiled.matches(it.group, it.resource, it.namespace, || {
            read.set(true);
            it.labels.clone()
        });
        assert!(
            !read.get() || !labels.is_empty(),
            "read the labels of {}/{} for a selector with no label requirements",
            it.resource,
            it.namespace
        );
        let group_resource = if it.group.is_empty() {
            it.resource.to_string()
        } else {
            format!("{}.{}", it.resource, it.group)
        };
        let what = format!(
            "{group_resource} in {:?} with {:?} against {sel:?}",
            it.namespace, it.labels
        );
        if everything {
            assert!(m, "the empty selector must match {what}");
        }
        if !m {
            continue;
        }
        assert!(
            labels.matches(&it.labels),
            "matched {what} but not its labels"
        );
        if it.namespace.is_empty() {
            assert!(
                exc_ns.is_empty() && (inc_ns.is_empty() || inc_ns.iter().any(|e| e == "*")),
                "matched cluster-scoped {what} despite a namespace filter"
            );
        } else {
            assert!(
                !exc_ns.iter().any(|e| !is_glob(e) && e == it.namespace),
                "matched {what} in an excluded namespace"
            );
        }
        assert!(
            !exc_res
                .iter()
                .any(|e| !is_glob(e) && resolved(e) == group_resource),
            "matched {what}, an excluded resource"
        );
        let exact_includes = !inc_res.is_empty() && !inc_res.iter().any(|e| is_glob(e));
        if exact_includes {
            assert!(
                inc_res.iter().any(|e| resolved(e) == group_resource),
                "matched {what}, which no included resource names"
            );
        }
    }
});
