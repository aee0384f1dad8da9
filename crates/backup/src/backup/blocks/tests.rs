use super::*;
use iar_core::catalog::Catalog;
use iar_plugin::plugin::FnRelation;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A cluster holding these objects: the ClusterReader contract in full
/// (lookups by identity), without files.
struct Objects(HashMap<ItemRef, Value>);

impl iar_core::cluster::ClusterWriter for Objects {}

impl ClusterReader for Objects {
    fn get(&self, id: &ItemRef) -> Result<Option<Value>, iar_core::cluster::ClusterError> {
        if id.name == "unreadable" {
            return Err(iar_core::cluster::ClusterError::Refused(
                "connection refused".into(),
            ));
        }
        Ok(self.0.get(id).cloned())
    }
}

fn item(v: Value) -> Item {
    Item::from_value(v, Catalog::builtin()).unwrap()
}

fn pod(ns: &str, name: &str, claims: &[&str], sa: Option<&str>) -> Item {
    let volumes: Vec<Value> = claims
        .iter()
        .map(|c| json!({"name": format!("v-{c}"), "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    let mut spec = json!({"volumes": volumes, "containers": [{"name": "app"}]});
    if let Some(sa) = sa {
        spec["serviceAccountName"] = json!(sa);
    }
    item(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}))
}

fn pvc(ns: &str, name: &str, pv: Option<&str>) -> Item {
    let spec = pv.map(|pv| json!({"volumeName": pv})).unwrap_or(json!({}));
    item(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}))
}

fn pv(name: &str, claim: Option<(&str, &str)>) -> Item {
    let spec = claim
        .map(|(ns, n)| json!({"claimRef": {"namespace": ns, "name": n}}))
        .unwrap_or(json!({}));
    item(json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name}, "spec": spec}))
}

fn other(kind: &str, ns: &str, name: &str) -> Item {
    item(json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": ns}}))
}

fn names(blocks: &Blocks) -> Vec<Vec<String>> {
    blocks
        .blocks
        .iter()
        .map(|b| {
            b.items
                .iter()
                .map(|i| format!("{}/{}", i.id.resource, i.id.name))
                .collect()
        })
        .collect()
}

fn cluster(items: &[Item]) -> Objects {
    Objects(
        items
            .iter()
            .map(|i| (i.id.clone(), i.value().clone()))
            .collect(),
    )
}

/// Table of block formations: each case lists the collected items, the
/// objects the cluster has besides them, and the blocks expected (in
/// order, each in growth order), and the number of warnings.
#[test]
fn blocks_group_related_items() {
    type Case = (
        &'static str,
        Vec<Item>,
        Vec<Item>,
        Vec<Vec<&'static str>>,
        usize,
    );
    let cases: Vec<Case> = vec![
        (
            "pod gathers its pvcs, their pvs and its service account",
            vec![
                pod("ns", "web", &["data", "logs"], Some("runner")),
                pvc("ns", "data", Some("pv-data")),
                pvc("ns", "logs", None),
                pv("pv-data", Some(("ns", "data"))),
                other("ServiceAccount", "ns", "runner"),
                other("ConfigMap", "ns", "settings"),
            ],
            vec![],
            vec![
                vec!["configmaps/settings"],
                // The PVC sorts first, so the block grows from it.
                vec![
                    "persistentvolumeclaims/data",
                    "persistentvolumes/pv-data",
                    "pods/web",
                    "persistentvolumeclaims/logs",
                    "serviceaccounts/runner",
                ],
            ],
            0,
        ),
        (
            "a pvc mounted by two pods joins both pods into one block",
            vec![
                pod("ns", "a", &["shared"], None),
                pod("ns", "b", &["shared"], None),
                pod("ns", "c", &[], None),
                pvc("ns", "shared", None),
            ],
            vec![],
            vec![
                vec!["persistentvolumeclaims/shared", "pods/a", "pods/b"],
                vec!["pods/c"],
            ],
            0,
        ),
        (
            "related items not collected are read from the cluster",
            vec![pod("ns", "web", &["data"], Some("runner"))],
            vec![
                pvc("ns", "data", Some("pv-data")),
                pv("pv-data", None),
                other("ServiceAccount", "ns", "runner"),
            ],
            vec![vec![
                "pods/web",
                "persistentvolumeclaims/data",
                "serviceaccounts/runner",
                "persistentvolumes/pv-data",
            ]],
            0,
        ),
        (
            "a related item that does not exist is skipped with a warning",
            vec![pod("ns", "web", &["gone"], Some("nobody"))],
            vec![],
            vec![vec!["pods/web"]],
            2,
        ),
        (
            "same names in another namespace are not related",
            vec![pod("a", "web", &["data"], None), pvc("b", "data", None)],
            vec![pvc("a", "data", None)],
            vec![
                vec!["persistentvolumeclaims/data"],
                vec!["pods/web", "persistentvolumeclaims/data"],
            ],
            0,
        ),
        (
            "a pv collected alone joins its claim's block",
            vec![pv("pv-x", Some(("ns", "x"))), pvc("ns", "x", None)],
            vec![],
            vec![vec!["persistentvolumeclaims/x", "persistentvolumes/pv-x"]],
            0,
        ),
    ];
    for (name, items, extra, want, warnings) in cases {
        let mut all = items.clone();
        all.extend(extra);
        let got = form_blocks(items, &cluster(&all), &[]);
        let want: Vec<Vec<String>> = want
            .into_iter()
            .map(|b| b.into_iter().map(String::from).collect())
            .collect();
        assert_eq!(names(&got), want, "{name}");
        assert_eq!(got.warnings.len(), warnings, "{name}: {:?}", got.warnings);
        assert!(got.errors.is_empty(), "{name}: {:?}", got.errors);
    }
}

/// The warning for a missing related item names the block, the missing
/// item and who named it; a cluster read error is an error, not a warning.
#[test]
fn missing_and_unreadable_related_items_are_reported() {
    let items = vec![pod("ns", "web", &["gone", "unreadable"], None)];
    let got = form_blocks(items, &cluster(&[]), &[]);
    assert_eq!(names(&got), vec![vec!["pods/web".to_string()]]);
    assert_eq!(
        got.warnings,
        vec![
            "item block of pods ns/web: related item persistentvolumeclaims ns/gone \
                 (named by pods ns/web) was not found; skipped"
        ]
    );
    assert_eq!(got.errors.len(), 1);
    assert!(got.errors[0].contains("unreadable") && got.errors[0].contains("connection refused"));
}

/// A plugin-provided relation joins items the built-in ones would not;
/// its failure is an error naming the relation and the item.
#[test]
fn relations_extend_blocks() {
    let items = vec![
        other("ConfigMap", "ns", "a"),
        other("ConfigMap", "ns", "b"),
        other("Secret", "ns", "c"),
    ];
    let pairs = FnRelation {
        name: "pair-plugin".into(),
        f: |i: &Item| -> Result<Vec<ItemRef>, String> {
            match i.id.name.as_str() {
                "a" => Ok(vec![core("secrets", "ns", "c")]),
                "b" => Err("boom".into()),
                _ => Ok(vec![]),
            }
        },
    };
    let got = form_blocks(items.clone(), &cluster(&items), &[&pairs as &dyn Relation]);
    assert_eq!(
        names(&got),
        vec![
            vec!["configmaps/a".to_string(), "secrets/c".to_string()],
            vec!["configmaps/b".to_string()]
        ]
    );
    assert_eq!(
        got.errors,
        vec!["item block relation pair-plugin: related items of configmaps ns/b: boom"]
    );
}

/// A plugin relation from an item to one that sorts before it (a Pod
/// naming a ConfigMap) still joins them: before, the ConfigMap formed
/// its own block first and the Pod's relation to it was skipped.
#[test]
fn a_plugin_relation_to_an_earlier_item_joins_its_block() {
    let items = vec![
        other("ConfigMap", "ns", "settings"),
        other("ConfigMap", "ns", "unrelated"),
        pod("ns", "app", &[], None),
    ];
    let uses = FnRelation {
        name: "uses-config".into(),
        f: |i: &Item| -> Result<Vec<ItemRef>, String> {
            Ok(if i.id.resource == "pods" {
                vec![core("configmaps", "ns", "settings")]
            } else {
                vec![]
            })
        },
    };
    let got = form_blocks(items.clone(), &cluster(&items), &[&uses as &dyn Relation]);
    assert_eq!(
        names(&got),
        vec![
            vec!["configmaps/settings".to_string(), "pods/app".to_string()],
            vec!["configmaps/unrelated".to_string()]
        ]
    );
    assert!(got.errors.is_empty() && got.warnings.is_empty());
}

/// Forming blocks twice, from the items in two different orders, gives
/// the same blocks: no item lands in two blocks and none is lost.
#[test]
fn blocks_are_deterministic_and_partition_the_items() {
    let mut items = Vec::new();
    for i in 0..30 {
        let claim = format!("c{}", i % 7);
        items.push(pod("ns", &format!("p{i}"), &[&claim], Some("sa")));
    }
    for i in 0..7 {
        items.push(pvc("ns", &format!("c{i}"), Some(&format!("pv{i}"))));
        items.push(pv(&format!("pv{i}"), Some(("ns", &format!("c{i}")))));
    }
    items.push(other("ServiceAccount", "ns", "sa"));
    let c = cluster(&items);
    let a = form_blocks(items.clone(), &c, &[]);
    items.reverse();
    let b = form_blocks(items.clone(), &c, &[]);
    assert_eq!(names(&a), names(&b));
    let all: Vec<ItemRef> = a.blocks.iter().flat_map(|b| b.ids()).collect();
    let unique: HashSet<&ItemRef> = all.iter().collect();
    assert_eq!(all.len(), unique.len(), "an item in two blocks");
    assert_eq!(all.len(), items.len(), "an item lost");
    // One block per claim and the pods mounting it; the shared service
    // account lands in the first block and does not join the others
    // (there is no ServiceAccount → Pod relation, as in Velero).
    assert_eq!(a.blocks.len(), 7);
    assert_eq!(
        all.iter()
            .filter(|i| i.resource == "serviceaccounts")
            .count(),
        1
    );
}

fn id(n: usize) -> ItemRef {
    core("configmaps", "ns", &format!("cm{n}"))
}

/// Many threads claim overlapping item lists (as workers whose blocks and
/// plugins' additional items name the same items): every item is
/// claimed by exactly one thread, none lost, none twice.
#[test]
fn claims_from_many_threads_are_exactly_once() {
    claim_stress(16, 2_000, 20);
}

/// The same, long enough to catch rare interleavings.
#[test]
#[ignore = "long: run with --ignored"]
fn claims_from_many_threads_are_exactly_once_long() {
    claim_stress(32, 10_000, 20);
}

fn claim_stress(threads: usize, items: usize, rounds: usize) {
    for round in 0..rounds {
        let set = Arc::new(ClaimSet::new());
        let won: Vec<Vec<ItemRef>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let set = set.clone();
                    s.spawn(move || {
                        // Each thread walks every item from its own
                        // offset and stride, so the lists overlap fully.
                        let stride = [1, 3, 7, 11][t % 4];
                        (0..items)
                            .map(|k| id((k * stride + t * 97 + round) % items))
                            .filter(|i| set.claim(i))
                            .collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let total: usize = won.iter().map(Vec::len).sum();
        let unique: HashSet<ItemRef> = won.into_iter().flatten().collect();
        assert_eq!(total, items, "round {round}: duplicated claims");
        assert_eq!(unique.len(), items, "round {round}: lost items");
        assert_eq!(set.len(), items);
    }
}

proptest::proptest! {
    /// Blocks formed from any mix of pods, PVCs and PVs partition the
    /// collected items: every collected item in exactly one block.
    #[test]
    fn any_items_partition_into_blocks(
        pods in proptest::collection::vec((0usize..6, proptest::collection::vec(0usize..6, 0..3)), 0..12),
        claims in proptest::collection::vec((0usize..6, proptest::option::of(0usize..6)), 0..8),
    ) {
        let mut items: BTreeMap<ItemRef, Item> = BTreeMap::new();
        for (i, (_, cs)) in pods.iter().enumerate() {
            let cs: Vec<String> = cs.iter().map(|c| format!("c{c}")).collect();
            let refs: Vec<&str> = cs.iter().map(String::as_str).collect();
            let p = pod("ns", &format!("p{i}"), &refs, None);
            items.insert(p.id.clone(), p);
        }
        for (c, v) in &claims {
            let pvname = v.map(|v| format!("pv{v}"));
            let p = pvc("ns", &format!("c{c}"), pvname.as_deref());
            items.insert(p.id.clone(), p);
        }
        let items: Vec<Item> = items.into_values().collect();
        let got = form_blocks(items.clone(), &cluster(&items), &[]);
        let ids: Vec<ItemRef> = got.blocks.iter().flat_map(|b| b.ids()).collect();
        let unique: HashSet<&ItemRef> = ids.iter().collect();
        proptest::prop_assert_eq!(ids.len(), unique.len());
        for i in &items {
            proptest::prop_assert!(unique.contains(&i.id));
        }
    }
}
