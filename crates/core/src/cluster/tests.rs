use super::*;
use crate::clock::ManualClock;
use std::time::Duration;

/// Lookups of names that do not exist, as fast as a plugin can make
/// them, re-check every file at most once per MISS_RESCAN; an object
/// added in place to a file is still found once that has passed, and a
/// new file at once. The period is measured by a clock the test steps,
/// so every claim holds however fast the machine is.
#[test]
fn misses_rescan_the_files_at_most_once_per_period() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..50 {
        std::fs::write(
            dir.path().join(format!("cm-{i}.yaml")),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: shop}}\n"
            ),
        )
        .unwrap();
    }
    let clock = Arc::new(ManualClock::new());
    let cluster = ManifestCluster::new(vec![dir.path().to_path_buf()]).with_clock(clock.clone());
    let id = |name: &str| ItemRef::new("", "configmaps", "shop", name);
    // Within one period: the first miss scans, the other 1999 do not.
    for i in 0..2000 {
        assert_eq!(cluster.get(&id(&format!("missing-{i}"))).unwrap(), None);
    }
    assert_eq!(cluster.full_scans(), 1, "one full scan in one period");
    clock.advance(MISS_RESCAN - Duration::from_millis(1));
    assert_eq!(cluster.get(&id("missing")).unwrap(), None);
    assert_eq!(cluster.full_scans(), 1, "still within the period");
    clock.advance(Duration::from_millis(1));
    assert_eq!(cluster.get(&id("missing")).unwrap(), None);
    assert_eq!(cluster.full_scans(), 2, "the next period's first miss");
    // Appended in place: the directory's listing does not change, so the
    // object waits for the next period's scan...
    let file = dir.path().join("cm-0.yaml");
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: late, namespace: shop}\n",
    );
    std::fs::write(&file, text).unwrap();
    assert_eq!(
        cluster.get(&id("late")).unwrap(),
        None,
        "seen before the period ended"
    );
    // ...and is found by it.
    clock.advance(MISS_RESCAN);
    assert!(cluster.get(&id("late")).unwrap().is_some());
    let scans = cluster.full_scans();
    assert_eq!(scans, 3);
    // A new file changes the listing: found at once, by reading that file
    // alone when the last full scan is recent (an overlay gains a file per
    // object a plugin creates, each create a miss first).
    std::fs::write(
        dir.path().join("new.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: new, namespace: shop}\n",
    )
    .unwrap();
    assert!(cluster.get(&id("new")).unwrap().is_some());
    assert_eq!(cluster.full_scans(), scans, "the new file was read alone");
}

fn gr(group: &str, resource: &str) -> GroupResource {
    GroupResource {
        group: group.into(),
        resource: resource.into(),
    }
}

#[test]
fn secrets_need_an_explicit_grant() {
    let default = ReadGrants::default();
    assert!(default.allows(&gr("", "pods")));
    assert!(default.allows(&gr("snapshot.storage.k8s.io", "volumesnapshots")));
    assert!(!default.allows(&gr("", "secrets")));
    let only = ReadGrants::only(&["secrets", "*.snapshot.storage.k8s.io"]).unwrap();
    assert!(only.allows(&gr("", "secrets")));
    assert!(only.allows(&gr("snapshot.storage.k8s.io", "volumesnapshots")));
    assert!(!only.allows(&gr("", "pods")));
    assert!(!ReadGrants::none().allows(&gr("", "pods")));
    assert!(
        ReadGrants::only(&["secrets"])
            .unwrap()
            .allows(&gr("", "secrets"))
    );
    assert!(
        ReadGrants::only(&["[oops"])
            .unwrap_err()
            .to_string()
            .contains("invalid read grant")
    );
}

/// No glob reaches Secrets, in a file plugin's grants as in any other:
/// only the exact entry `secrets` does.
#[test]
fn no_glob_grants_secrets() {
    for glob in [
        "*",
        "secret*",
        "*s",
        "s*s",
        "[s]ecrets",
        "secret?",
        "*.k8s.io",
        "?ecrets",
    ] {
        let grants = ReadGrants::only(&[glob]).unwrap();
        assert!(
            !grants.allows(&gr("", "secrets")),
            "{glob} must not grant Secrets"
        );
    }
    assert!(ReadGrants::only(&["*"]).unwrap().allows(&gr("", "pods")));
    assert!(
        ReadGrants::only(&["secret*"])
            .unwrap()
            .allows(&gr("", "secretstores"))
    );
    // A resource named secrets in another group is not core Secrets.
    assert!(
        ReadGrants::only(&["*"])
            .unwrap()
            .allows(&gr("example.io", "secrets"))
    );
    assert!(
        ReadGrants::only(&["pods", "secrets"])
            .unwrap()
            .allows(&gr("", "secrets"))
    );
    assert_eq!(ReadGrants::default().patterns().collect::<Vec<_>>(), ["*"]);
}

#[test]
fn manifest_cluster_sees_edits() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vs.yaml");
    let write = |ready: bool| {
        let doc = format!(
            "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata: {{name: s, namespace: ns}}\nstatus: {{readyToUse: {ready}}}\n"
        );
        std::fs::write(&file, doc).unwrap();
    };
    write(false);
    let cluster = ManifestCluster::new(vec![dir.path().to_path_buf()]);
    let id = ItemRef::new("snapshot.storage.k8s.io", "volumesnapshots", "ns", "s");
    let ready = |c: &ManifestCluster| c.get(&id).unwrap().unwrap()["status"]["readyToUse"].clone();
    assert_eq!(ready(&cluster), Value::Bool(false));
    // "true" is shorter than "false": the length alone shows the change
    // even when both writes land within one mtime tick.
    write(true);
    assert_eq!(ready(&cluster), Value::Bool(true));
    // A file added later is found; a file removed is forgotten.
    let other = dir.path().join("sub");
    std::fs::create_dir(&other).unwrap();
    let cm = ItemRef::new("", "configmaps", "ns", "late");
    assert_eq!(cluster.get(&cm).unwrap(), None);
    std::fs::write(
        other.join("late.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late, namespace: ns}\n",
    )
    .unwrap();
    assert!(cluster.get(&cm).unwrap().is_some());
    std::fs::remove_file(other.join("late.yaml")).unwrap();
    assert_eq!(cluster.get(&cm).unwrap(), None);
    let missing = ItemRef::from(crate::ItemRefFields {
        name: "other".into(),
        ..(*id).clone()
    });
    assert_eq!(cluster.get(&missing).unwrap(), None);
    // The object moves to another file (its old file rewritten without
    // it): found where it is now. Its file renamed away: gone.
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stays, namespace: ns}\n",
    )
    .unwrap();
    let moved = other.join("moved.yaml");
    std::fs::write(
            &moved,
            "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata: {name: s, namespace: ns}\nstatus: {readyToUse: moved}\n",
        )
        .unwrap();
    assert_eq!(ready(&cluster), Value::String("moved".into()));
    std::fs::rename(&moved, other.join("moved.yaml.bak")).unwrap();
    assert_eq!(cluster.get(&id).unwrap(), None);
}

/// A backup of the manifests the cluster is made of lists them through
/// the cluster's parse cache: a later lookup answers from the same parse,
/// kept in the spool (a second parse would spool the file again). Other
/// manifests are the caller's to read.
#[tokio::test]
async fn listing_its_own_manifests_shares_the_parse_with_lookups() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
            dir.path().join("cms.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ns}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: other}\n",
        )
        .unwrap();
    let paths = vec![dir.path().to_path_buf()];
    let cluster = ManifestCluster::new(paths.clone());
    let filter =
        BackupFilter::from_spec(&serde_json::json!({"includedNamespaces": ["ns"]})).unwrap();
    let elsewhere = vec![dir.path().join("cms.yaml")];
    assert!(cluster.list_sources(&elsewhere, &filter).await.is_none());
    let listed = cluster
        .list_sources(&paths, &filter)
        .await
        .unwrap()
        .unwrap();
    let names: Vec<_> = listed.iter().map(|i| i.id.name.as_str()).collect();
    assert_eq!(names, ["a"], "the filter applies");
    let spooled = || {
        let cache = cluster.cache.read().unwrap();
        cache.spool.clone().flatten().map(|s| s.len())
    };
    let before = spooled();
    assert!(before.is_some_and(|len| len > 0));
    let found = cluster.get_item(&listed[0].id).unwrap().unwrap();
    assert_eq!(found.json(), listed[0].json());
    assert_eq!(spooled(), before, "the lookup parsed the file again");
}

/// The cache holds listed objects as spool positions: listing, lookups,
/// filters and cluster-list answers read the texts back and leave the
/// cache's own items without a body; what they answer is the object as
/// written, and an edit made after the listing is what a lookup sees.
#[test]
fn the_cache_holds_positions_not_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let items: Vec<Value> = (0..200)
        .map(|i| {
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}"), "namespace": "shop",
                             "labels": {"n": i.to_string()}},
                "data": {"k": "x".repeat(500)}})
        })
        .collect();
    let file = dir.path().join("list.json");
    std::fs::write(
        &file,
        serde_json::to_string(
            &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}),
        )
        .unwrap(),
    )
    .unwrap();
    let cluster = ManifestCluster::new(vec![dir.path().to_path_buf()]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let selector: crate::select::LabelSelector = "n in (7, 8)".parse().unwrap();
    let filter = BackupFilter::from_spec(&serde_json::json!({})).unwrap();
    let listed = rt.block_on(cluster.list(&filter)).unwrap();
    assert_eq!(listed.len(), 200);
    assert!(listed.iter().all(Item::is_spooled_only));
    let id = |name: &str| ItemRef::new("", "configmaps", "shop", name);
    assert_eq!(cluster.get(&id("cm-3")).unwrap().unwrap(), items[3]);
    let text = cluster.get_json(&id("cm-4")).unwrap().unwrap();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), items[4]);
    let answered = cluster
        .list_within(
            &gr("", "configmaps"),
            "shop",
            &selector,
            10,
            std::time::Duration::from_secs(1),
        )
        .unwrap();
    assert_eq!(answered.len(), 2);
    // A listed item reads its own text back, as listed.
    assert_eq!(listed[5].value()["metadata"]["name"], "cm-5");
    let cache = cluster.cache.read().unwrap();
    assert!(
        cache
            .files
            .values()
            .flat_map(|f| &f.items)
            .all(Item::is_spooled_only),
        "the cache's items hold no body after every kind of read"
    );
    assert!(cache.spool.as_ref().unwrap().as_ref().unwrap().len() > 200 * 500);
}

/// File times come from a coarse clock: a file added within the tick of
/// the directory's mtime the cache saw leaves that mtime as it was (played
/// here by setting it back). A listing taken while the mtime was that
/// recent does not vouch for the directory, so the file is found.
#[test]
fn a_file_added_within_the_listings_mtime_tick_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str| {
        std::fs::write(
            dir.path().join(format!("{name}.yaml")),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: shop}}\n"
            ),
        )
        .unwrap();
    };
    write("first");
    let cluster = ManifestCluster::new(vec![dir.path().to_path_buf()]);
    let id = |name: &str| ItemRef::new("", "configmaps", "shop", name);
    assert!(cluster.get(&id("first")).unwrap().is_some());
    let seen = std::fs::metadata(dir.path()).unwrap().modified().unwrap();
    write("second");
    std::fs::File::open(dir.path())
        .unwrap()
        .set_modified(seen)
        .unwrap();
    assert_eq!(
        std::fs::metadata(dir.path()).unwrap().modified().unwrap(),
        seen
    );
    assert!(cluster.get(&id("second")).unwrap().is_some());
}

/// A list reads the objects of its kind and namespace only, as the files
/// are: a new file's objects at once, a removed file's gone, an object
/// that moved to another file listed once.
#[test]
fn a_list_answers_its_scope_as_the_files_are() {
    let dir = tempfile::tempdir().unwrap();
    let doc = |kind: &str, ns: &str, name: &str| {
        format!("apiVersion: v1\nkind: {kind}\nmetadata: {{name: {name}, namespace: {ns}}}\n")
    };
    std::fs::write(
        dir.path().join("a.yaml"),
        [
            doc("Pod", "shop", "web-1"),
            doc("Pod", "bank", "teller"),
            doc("ConfigMap", "shop", "web-1"),
        ]
        .join("---\n"),
    )
    .unwrap();
    let clock = Arc::new(ManualClock::new());
    let cluster = ManifestCluster::new(vec![dir.path().to_path_buf()]).with_clock(clock.clone());
    let everything: crate::select::LabelSelector = "".parse().unwrap();
    let names = |ns: &str| -> Vec<String> {
        cluster
            .list_within(
                &gr("", "pods"),
                ns,
                &everything,
                100,
                std::time::Duration::from_secs(1),
            )
            .unwrap()
            .iter()
            .map(|text| {
                let v: Value = serde_json::from_str(text).unwrap();
                format!(
                    "{}/{}",
                    v["metadata"]["namespace"].as_str().unwrap(),
                    v["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(names("shop"), ["shop/web-1"]);
    assert_eq!(names(""), ["bank/teller", "shop/web-1"]);
    std::fs::write(dir.path().join("b.yaml"), doc("Pod", "shop", "web-2")).unwrap();
    assert_eq!(names("shop"), ["shop/web-1", "shop/web-2"]);
    std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
    assert_eq!(names("shop"), ["shop/web-1"]);
    // web-1 moves from a.yaml to c.yaml.
    std::fs::write(dir.path().join("c.yaml"), doc("Pod", "shop", "web-1")).unwrap();
    std::fs::write(
        dir.path().join("a.yaml"),
        [
            doc("Pod", "bank", "teller"),
            doc("ConfigMap", "shop", "web-1"),
        ]
        .join("---\n"),
    )
    .unwrap();
    // a.yaml was edited in place: read at the next period's scan.
    clock.advance(MISS_RESCAN);
    assert_eq!(names("shop"), ["shop/web-1"]);
    std::fs::remove_file(dir.path().join("c.yaml")).unwrap();
    clock.advance(MISS_RESCAN);
    assert!(names("shop").is_empty());
    assert_eq!(names("bank"), ["bank/teller"]);
}

/// A create answers an object that exists, in the sources (a file added
/// since included) or in the overlay, with that object, and writes
/// nothing; a new one is written to its overlay file and read at once.
#[test]
fn an_overlay_create_finds_what_exists_and_writes_what_does_not() {
    use crate::cluster::{ClusterWriter, Created};
    let sources = tempfile::tempdir().unwrap();
    let overlay = tempfile::tempdir().unwrap();
    let doc = |name: &str, says: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: shop}}\ndata: {{says: {says}}}\n"
        )
    };
    std::fs::write(sources.path().join("a.yaml"), doc("in-source", "source")).unwrap();
    let cluster = ManifestCluster::new(vec![sources.path().to_path_buf()])
        .with_overlay(overlay.path().join("objects"));
    let id = |name: &str| ItemRef::new("", "configmaps", "shop", name);
    let object = |name: &str| -> Value { crate::yaml::from_str(&doc(name, "plugin")).unwrap() };
    let create = |name: &str| {
        cluster
            .create_within(&id(name), object(name), std::time::Duration::from_secs(1))
            .unwrap()
    };
    let says = |created: Created| match created {
        Created::New(v) => format!("new {}", v["data"]["says"]),
        Created::Existing(v) => format!("existing {}", v["data"]["says"]),
    };
    assert_eq!(says(create("in-source")), "existing \"source\"");
    assert!(!overlay::path_of(&overlay.path().join("objects"), &id("in-source")).exists());
    assert_eq!(says(create("new")), "new \"plugin\"");
    assert_eq!(
        cluster.get(&id("new")).unwrap().unwrap()["data"]["says"],
        "plugin"
    );
    assert_eq!(says(create("new")), "existing \"plugin\"");
    std::fs::write(sources.path().join("b.yaml"), doc("late", "source")).unwrap();
    assert_eq!(says(create("late")), "existing \"source\"");
}
