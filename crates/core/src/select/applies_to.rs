//! Which items a plugin's `AppliesTo` selects, with Velero's semantics
//! (`pkg/util/collections/includes_excludes.go`,
//! `pkg/plugin/framework/action_resolver.go`).

use std::borrow::Cow;
use std::collections::BTreeMap;

use glob::Pattern;

use crate::catalog::Catalog;
use crate::select::labels::{LabelSelector, LabelSelectorError};

/// A plugin's `AppliesTo` answer as written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceSelector {
    pub included_namespaces: Vec<String>,
    pub excluded_namespaces: Vec<String>,
    pub included_resources: Vec<String>,
    pub excluded_resources: Vec<String>,
    pub label_selector: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    #[error("invalid glob {pattern:?} in {field}: {reason}")]
    Glob {
        field: &'static str,
        pattern: String,
        reason: String,
    },
    #[error(transparent)]
    Labels(#[from] LabelSelectorError),
    #[error("{field}: empty entry")]
    Empty { field: &'static str },
}

/// A selector with names resolved, globs compiled and the label selector
/// parsed, so matching does no parsing and cannot fail.
#[derive(Clone, Debug)]
pub struct CompiledSelector {
    namespaces: IncludesExcludes,
    resources: IncludesExcludes,
    labels: LabelSelector,
}

impl CompiledSelector {
    pub fn compile(sel: &ResourceSelector, catalog: &Catalog) -> Result<Self, SelectorError> {
        let namespace = |name: &str| name.to_string();
        // Names resolve to the GroupResource string items are matched
        // against; an unresolved name is kept (lowercased) so it can only
        // ever match that exact resource, never widen to everything.
        let resource = |name: &str| match catalog.resolve(name) {
            Some(info) => info.group_resource().to_string(),
            None => name.to_ascii_lowercase(),
        };
        Ok(Self {
            namespaces: IncludesExcludes::new(
                ("includedNamespaces", &sel.included_namespaces),
                ("excludedNamespaces", &sel.excluded_namespaces),
                false,
                &namespace,
            )?,
            resources: IncludesExcludes::new(
                ("includedResources", &sel.included_resources),
                ("excludedResources", &sel.excluded_resources),
                true,
                &resource,
            )?,
            labels: sel.label_selector.parse()?,
        })
    }

    /// The selector with `labels` for its label selector, in place of the
    /// one `compile` parsed: for a Backup's structured `labelSelector`,
    /// which is never text to parse.
    pub(crate) fn with_labels(self, labels: LabelSelector) -> Self {
        Self { labels, ..self }
    }

    /// `group` "" = core; `resource` plural; `namespace` "" = cluster-scoped.
    /// `labels` is called only when the label selector has requirements:
    /// reading an item's labels may mean parsing the text a plugin returned.
    pub fn matches(
        &self,
        group: &str,
        resource: &str,
        namespace: &str,
        labels: impl FnOnce() -> BTreeMap<String, String>,
    ) -> bool {
        let group_resource: Cow<'_, str> = if group.is_empty() {
            Cow::Borrowed(resource)
        } else {
            Cow::Owned(format!("{resource}.{group}"))
        };
        if !self.resources.should_include(&group_resource) {
            return false;
        }
        // A cluster-scoped item has no namespace to test, so any namespace
        // filter at all keeps it out (Velero's IncludeEverything check).
        let namespace_ok = if namespace.is_empty() {
            self.namespaces.include_everything()
        } else {
            self.namespaces.should_include(namespace)
        };
        namespace_ok && self.labels.matches_with(labels)
    }
}

impl CompiledSelector {
    /// Whether any object of this resource could match (namespaces and
    /// labels aside): a lister skips the resources this rules out.
    pub fn includes_resource(&self, group: &str, resource: &str) -> bool {
        let group_resource: Cow<'_, str> = if group.is_empty() {
            Cow::Borrowed(resource)
        } else {
            Cow::Owned(format!("{resource}.{group}"))
        };
        self.resources.should_include(&group_resource)
    }

    /// Whether the namespace filters admit `namespace` (a namespaced
    /// object's; labels and resources aside).
    pub fn includes_namespace(&self, namespace: &str) -> bool {
        self.namespaces.should_include(namespace)
    }

    /// Whether cluster-scoped objects can match at all.
    pub fn includes_cluster_scope(&self) -> bool {
        self.namespaces.include_everything()
    }

    /// The namespaces objects can be in, when the selector names them
    /// exactly (no globs, no "*"): a lister lists only those.
    pub fn exact_namespaces(&self) -> Option<Vec<String>> {
        let n = &self.namespaces;
        if n.include_all {
            return None;
        }
        n.includes
            .iter()
            .map(|m| match m {
                Matcher::Exact(e) => Some(e.clone()),
                Matcher::Glob(_) => None,
            })
            .collect()
    }
}

#[derive(Clone, Debug)]
enum Matcher {
    Exact(String),
    Glob(Pattern),
}

impl Matcher {
    fn matches(&self, s: &str) -> bool {
        match self {
            Matcher::Exact(e) => e == s,
            Matcher::Glob(p) => p.matches(s),
        }
    }
}

#[derive(Clone, Debug)]
struct IncludesExcludes {
    /// The include list was empty or contained "*".
    include_all: bool,
    includes: Vec<Matcher>,
    excludes: Vec<Matcher>,
}

impl IncludesExcludes {
    fn new(
        includes: (&'static str, &[String]),
        excludes: (&'static str, &[String]),
        lowercase: bool,
        resolve: &dyn Fn(&str) -> String,
    ) -> Result<Self, SelectorError> {
        let include_all = includes.1.is_empty() || includes.1.iter().any(|e| e.trim() == "*");
        Ok(Self {
            include_all,
            includes: compile_list(includes.0, includes.1, lowercase, resolve)?,
            excludes: compile_list(excludes.0, excludes.1, lowercase, resolve)?,
        })
    }

    fn should_include(&self, s: &str) -> bool {
        if self.excludes.iter().any(|m| m.matches(s)) {
            return false;
        }
        self.include_all || self.includes.iter().any(|m| m.matches(s))
    }

    fn include_everything(&self) -> bool {
        self.include_all && self.excludes.is_empty()
    }
}

fn compile_list(
    field: &'static str,
    entries: &[String],
    lowercase: bool,
    resolve: &dyn Fn(&str) -> String,
) -> Result<Vec<Matcher>, SelectorError> {
    entries
        .iter()
        .map(|entry| {
            // Surrounding blanks come from comma-separated CLI lists; they are
            // never part of a Kubernetes name.
            let entry = entry.trim();
            if entry.is_empty() {
                return Err(SelectorError::Empty { field });
            }
            if !entry.contains(['*', '?', '[']) {
                return Ok(Matcher::Exact(resolve(entry)));
            }
            // Globs are not resolved: they may name many resources.
            let pattern = if lowercase {
                entry.to_ascii_lowercase()
            } else {
                entry.to_string()
            };
            Pattern::new(&pattern)
                .map(Matcher::Glob)
                .map_err(|e| SelectorError::Glob {
                    field,
                    pattern: entry.to_string(),
                    reason: format!("{} at position {}", e.msg, e.pos),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests;
