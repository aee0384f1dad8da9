use super::*;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[derive(Default)]
struct Sel {
    inc_ns: &'static [&'static str],
    exc_ns: &'static [&'static str],
    inc_res: &'static [&'static str],
    exc_res: &'static [&'static str],
    labels: &'static str,
}

impl Sel {
    fn build(&self) -> ResourceSelector {
        ResourceSelector {
            included_namespaces: strings(self.inc_ns),
            excluded_namespaces: strings(self.exc_ns),
            included_resources: strings(self.inc_res),
            excluded_resources: strings(self.exc_res),
            label_selector: self.labels.to_string(),
        }
    }
}

/// An item: (group, resource, namespace, labels).
type Item = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const POD: Item = ("", "pods", "app", &[("app", "web")]);
const POD_KUBE: Item = ("", "pods", "kube-system", &[]);
const DEPLOY: Item = ("apps", "deployments", "app", &[("app", "web")]);
const STS: Item = ("apps", "statefulsets", "app", &[]);
const CRONJOB: Item = ("batch", "cronjobs", "app", &[]);
const PV: Item = ("", "persistentvolumes", "", &[]);
const NAMESPACE: Item = ("", "namespaces", "", &[("team", "a")]);
const SC: Item = ("storage.k8s.io", "storageclasses", "", &[]);
const VS: Item = ("snapshot.storage.k8s.io", "volumesnapshots", "app", &[]);
const VSC: Item = ("snapshot.storage.k8s.io", "volumesnapshotcontents", "", &[]);
const VSL: Item = ("velero.io", "volumesnapshotlocations", "velero", &[]);
const WIDGET: Item = ("example.com", "widgets", "app", &[]);
const CRD: Item = ("apiextensions.k8s.io", "customresourcedefinitions", "", &[]);

struct Case {
    name: &'static str,
    sel: Sel,
    yes: &'static [Item],
    no: &'static [Item],
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "empty selector matches everything",
            sel: Sel::default(),
            yes: &[POD, DEPLOY, PV, NAMESPACE, WIDGET, CRD],
            no: &[],
        },
        Case {
            name: "star includes everything",
            sel: Sel {
                inc_ns: &["*"],
                inc_res: &["*"],
                ..Sel::default()
            },
            yes: &[POD, DEPLOY, PV, WIDGET],
            no: &[],
        },
        Case {
            name: "star among other includes still means all",
            sel: Sel {
                inc_ns: &["app", "*"],
                inc_res: &["pods", "*"],
                ..Sel::default()
            },
            yes: &[POD_KUBE, DEPLOY, PV],
            no: &[],
        },
        Case {
            name: "plural core resource",
            sel: Sel {
                inc_res: &["pods"],
                ..Sel::default()
            },
            yes: &[POD, POD_KUBE],
            no: &[DEPLOY, PV],
        },
        Case {
            name: "singular name",
            sel: Sel {
                inc_res: &["pod"],
                ..Sel::default()
            },
            yes: &[POD],
            no: &[DEPLOY],
        },
        Case {
            name: "short name",
            sel: Sel {
                inc_res: &["po", "deploy"],
                ..Sel::default()
            },
            yes: &[POD, DEPLOY],
            no: &[STS, PV],
        },
        Case {
            name: "kind name case-insensitive",
            sel: Sel {
                inc_res: &["Deployment", "PERSISTENTVOLUME"],
                ..Sel::default()
            },
            yes: &[DEPLOY, PV],
            no: &[POD, STS],
        },
        Case {
            name: "plural without group resolves to its group",
            sel: Sel {
                inc_res: &["deployments"],
                ..Sel::default()
            },
            yes: &[DEPLOY],
            no: &[STS, POD],
        },
        Case {
            name: "resource.group",
            sel: Sel {
                inc_res: &[
                    "deployments.apps",
                    "volumesnapshots.snapshot.storage.k8s.io",
                ],
                ..Sel::default()
            },
            yes: &[DEPLOY, VS],
            no: &[STS, VSC],
        },
        Case {
            name: "short name with group",
            sel: Sel {
                inc_res: &["sts.apps", "cj.batch"],
                ..Sel::default()
            },
            yes: &[STS, CRONJOB],
            no: &[DEPLOY],
        },
        Case {
            name: "resource with the wrong group is kept as typed",
            sel: Sel {
                inc_res: &["deployments.batch"],
                ..Sel::default()
            },
            yes: &[],
            no: &[DEPLOY, CRONJOB],
        },
        Case {
            name: "glob on group",
            sel: Sel {
                inc_res: &["*.apps"],
                ..Sel::default()
            },
            yes: &[DEPLOY, STS],
            no: &[POD, CRONJOB, PV],
        },
        Case {
            name: "glob prefix spans groups",
            sel: Sel {
                inc_res: &["volumesnapshot*"],
                ..Sel::default()
            },
            yes: &[VS, VSC, VSL],
            no: &[PV, POD],
        },
        Case {
            name: "glob is matched on resource.group, not bare resource",
            sel: Sel {
                inc_res: &["deployment?"],
                ..Sel::default()
            },
            yes: &[],
            no: &[DEPLOY],
        },
        Case {
            name: "glob with class and question mark",
            sel: Sel {
                inc_res: &["[ps]ersistentvolume?", "storageclasses.storage.k8s.i?"],
                ..Sel::default()
            },
            yes: &[PV, SC],
            no: &[POD],
        },
        Case {
            name: "uppercase glob is lowercased",
            sel: Sel {
                inc_res: &["*.APPS"],
                ..Sel::default()
            },
            yes: &[DEPLOY],
            no: &[POD],
        },
        Case {
            name: "exclude wins over include",
            sel: Sel {
                inc_res: &["pods", "deployments"],
                exc_res: &["pods"],
                ..Sel::default()
            },
            yes: &[DEPLOY],
            no: &[POD],
        },
        Case {
            name: "exclude wins over star",
            sel: Sel {
                inc_res: &["*"],
                exc_res: &["po"],
                ..Sel::default()
            },
            yes: &[DEPLOY, PV],
            no: &[POD],
        },
        Case {
            name: "exclude glob over empty include",
            sel: Sel {
                exc_res: &["*.apps"],
                ..Sel::default()
            },
            yes: &[POD, CRONJOB, PV],
            no: &[DEPLOY, STS],
        },
        Case {
            name: "exclude by short name with group",
            sel: Sel {
                exc_res: &["vs.snapshot.storage.k8s.io"],
                ..Sel::default()
            },
            yes: &[VSC, POD],
            no: &[VS],
        },
        Case {
            name: "unknown CRD plural kept as typed",
            sel: Sel {
                inc_res: &["widgets.example.com"],
                ..Sel::default()
            },
            yes: &[WIDGET],
            no: &[POD, DEPLOY],
        },
        Case {
            name: "unknown name without group matches only a core resource of that name",
            sel: Sel {
                inc_res: &["widgets"],
                ..Sel::default()
            },
            yes: &[],
            no: &[WIDGET, POD],
        },
        Case {
            name: "unknown CRD kind is not widened",
            sel: Sel {
                inc_res: &["Widget"],
                ..Sel::default()
            },
            yes: &[],
            no: &[WIDGET, POD, DEPLOY],
        },
        Case {
            name: "unknown name lowercased",
            sel: Sel {
                inc_res: &["Widgets.Example.COM"],
                ..Sel::default()
            },
            yes: &[WIDGET],
            no: &[],
        },
        Case {
            name: "namespace include",
            sel: Sel {
                inc_ns: &["app"],
                ..Sel::default()
            },
            yes: &[POD, DEPLOY],
            no: &[POD_KUBE, VSL],
        },
        Case {
            name: "namespace glob",
            sel: Sel {
                inc_ns: &["kube-*"],
                ..Sel::default()
            },
            yes: &[POD_KUBE],
            no: &[POD],
        },
        Case {
            name: "namespace exclude wins",
            sel: Sel {
                inc_ns: &["*"],
                exc_ns: &["kube-system"],
                ..Sel::default()
            },
            yes: &[POD],
            no: &[POD_KUBE],
        },
        Case {
            name: "namespace exclude glob wins over include",
            sel: Sel {
                inc_ns: &["app", "kube-system"],
                exc_ns: &["kube-?ystem"],
                ..Sel::default()
            },
            yes: &[POD],
            no: &[POD_KUBE],
        },
        Case {
            name: "namespaces are case-sensitive",
            sel: Sel {
                inc_ns: &["App"],
                ..Sel::default()
            },
            yes: &[],
            no: &[POD],
        },
        Case {
            name: "cluster-scoped item with no namespace filter",
            sel: Sel {
                inc_res: &["pv", "namespaces", "sc"],
                ..Sel::default()
            },
            yes: &[PV, NAMESPACE, SC],
            no: &[POD],
        },
        Case {
            name: "cluster-scoped item with namespace star",
            sel: Sel {
                inc_ns: &["*"],
                ..Sel::default()
            },
            yes: &[PV, CRD, POD],
            no: &[],
        },
        Case {
            name: "cluster-scoped item excluded by a namespace include",
            sel: Sel {
                inc_ns: &["app"],
                ..Sel::default()
            },
            yes: &[POD],
            no: &[PV, NAMESPACE, SC, VSC, CRD],
        },
        Case {
            name: "cluster-scoped item excluded by any namespace exclude",
            sel: Sel {
                exc_ns: &["kube-system"],
                ..Sel::default()
            },
            yes: &[POD],
            no: &[PV, NAMESPACE, POD_KUBE],
        },
        Case {
            name: "cluster-scoped item excluded by a namespace glob include",
            sel: Sel {
                inc_ns: &["*a*"],
                inc_res: &["pv"],
                ..Sel::default()
            },
            yes: &[],
            no: &[PV],
        },
        Case {
            name: "label selector",
            sel: Sel {
                labels: "app=web",
                ..Sel::default()
            },
            yes: &[POD, DEPLOY],
            no: &[STS, POD_KUBE, PV],
        },
        Case {
            name: "label selector on cluster-scoped item",
            sel: Sel {
                inc_res: &["namespaces"],
                labels: "team in (a,b)",
                ..Sel::default()
            },
            yes: &[NAMESPACE],
            no: &[PV],
        },
        Case {
            name: "notin matches items without the label",
            sel: Sel {
                labels: "app notin (web)",
                ..Sel::default()
            },
            yes: &[STS, PV, POD_KUBE],
            no: &[POD, DEPLOY],
        },
        Case {
            name: "all parts must hold",
            sel: Sel {
                inc_ns: &["app"],
                inc_res: &["deploy", "pods"],
                exc_res: &["pods"],
                labels: "app",
                ..Sel::default()
            },
            yes: &[DEPLOY],
            no: &[POD, STS, POD_KUBE, PV],
        },
        Case {
            name: "blank entries around names are trimmed",
            sel: Sel {
                inc_ns: &[" app "],
                inc_res: &[" pods"],
                ..Sel::default()
            },
            yes: &[POD],
            no: &[POD_KUBE, DEPLOY],
        },
        Case {
            name: "crd short name",
            sel: Sel {
                inc_res: &["crds"],
                ..Sel::default()
            },
            yes: &[CRD],
            no: &[WIDGET],
        },
    ]
}

#[test]
fn selector_table() {
    let catalog = Catalog::builtin();
    let cases = cases();
    assert!(cases.len() >= 30);
    for case in cases {
        let compiled = CompiledSelector::compile(&case.sel.build(), catalog)
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        for (items, want) in [(case.yes, true), (case.no, false)] {
            for (group, resource, ns, ls) in items {
                assert_eq!(
                    compiled.matches(group, resource, ns, || labels(ls)),
                    want,
                    "{}: {resource}.{group} in {ns:?} with {ls:?}",
                    case.name
                );
            }
        }
    }
}

#[test]
fn compile_errors() {
    let catalog = Catalog::builtin();
    let glob = |field: &'static str, pattern: &str| SelectorError::Glob {
        field,
        pattern: pattern.to_string(),
        reason: String::new(),
    };
    let cases: Vec<(&str, Sel, SelectorError)> = vec![
        (
            "unclosed class in included resources",
            Sel {
                inc_res: &["pods", "[abc"],
                ..Sel::default()
            },
            glob("includedResources", "[abc"),
        ),
        (
            "bad recursive wildcard in excluded resources",
            Sel {
                exc_res: &["a**"],
                ..Sel::default()
            },
            glob("excludedResources", "a**"),
        ),
        (
            "invalid glob in included namespaces",
            Sel {
                inc_ns: &["ns-["],
                ..Sel::default()
            },
            glob("includedNamespaces", "ns-["),
        ),
        (
            "invalid glob in excluded namespaces",
            Sel {
                exc_ns: &["[]"],
                ..Sel::default()
            },
            glob("excludedNamespaces", "[]"),
        ),
        (
            "empty included namespace",
            Sel {
                inc_ns: &["app", ""],
                ..Sel::default()
            },
            SelectorError::Empty {
                field: "includedNamespaces",
            },
        ),
        (
            "blank excluded resource",
            Sel {
                exc_res: &["  "],
                ..Sel::default()
            },
            SelectorError::Empty {
                field: "excludedResources",
            },
        ),
        (
            "empty included resource",
            Sel {
                inc_res: &[""],
                ..Sel::default()
            },
            SelectorError::Empty {
                field: "includedResources",
            },
        ),
        (
            "empty excluded namespace",
            Sel {
                exc_ns: &[""],
                ..Sel::default()
            },
            SelectorError::Empty {
                field: "excludedNamespaces",
            },
        ),
    ];
    for (name, sel, want) in cases {
        let got = CompiledSelector::compile(&sel.build(), catalog).err();
        match (&got, &want) {
            (
                Some(SelectorError::Glob {
                    field,
                    pattern,
                    reason,
                }),
                SelectorError::Glob {
                    field: wf,
                    pattern: wp,
                    ..
                },
            ) => {
                assert_eq!((field, pattern), (wf, wp), "{name}");
                assert!(reason.contains("at position"), "{name}: {reason}");
            }
            _ => assert_eq!(got.as_ref(), Some(&want), "{name}"),
        }
    }
}

#[test]
fn invalid_label_selector_is_an_error() {
    let catalog = Catalog::builtin();
    for bad in ["app in web", "=x", "a=b,", "a=b c", "Bad_Prefix/a=b"] {
        let sel = Sel {
            labels: bad,
            ..Sel::default()
        }
        .build();
        match CompiledSelector::compile(&sel, catalog) {
            Err(SelectorError::Labels(e)) => assert_eq!(e.input, bad),
            other => panic!("{bad:?}: expected a label selector error, got {other:?}"),
        }
    }
}

#[test]
fn error_messages() {
    let catalog = Catalog::builtin();
    let err = |sel: Sel| {
        CompiledSelector::compile(&sel.build(), catalog)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    assert_eq!(
        err(Sel {
            inc_res: &["[abc"],
            ..Sel::default()
        }),
        "invalid glob \"[abc\" in includedResources: invalid range pattern at position 0"
    );
    assert_eq!(
        err(Sel {
            exc_ns: &[""],
            ..Sel::default()
        }),
        "excludedNamespaces: empty entry"
    );
    assert_eq!(
        err(Sel {
            labels: "a in b",
            ..Sel::default()
        }),
        "invalid label selector \"a in b\": expected \"(\" after \"in\", found \"b\""
    );
}
