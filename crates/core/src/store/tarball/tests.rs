use super::*;

fn id(group: &str, resource: &str, namespace: &str, name: &str) -> ItemRef {
    ItemRef::new(group, resource, namespace, name)
}

#[test]
fn item_paths_follow_velero() {
    let cases = [
        (
            id("", "pods", "ns", "p"),
            "resources/pods/namespaces/ns/p.json",
        ),
        (
            id("apps", "deployments", "ns", "d"),
            "resources/deployments.apps/namespaces/ns/d.json",
        ),
        (
            id("", "persistentvolumes", "", "pv"),
            "resources/persistentvolumes/cluster/pv.json",
        ),
        (
            id("snapshot.storage.k8s.io", "volumesnapshotcontents", "", "c"),
            "resources/volumesnapshotcontents.snapshot.storage.k8s.io/cluster/c.json",
        ),
    ];
    for (id, want) in cases {
        assert_eq!(item_path(&id).unwrap(), want);
    }
}

/// Identities the API server would refuse never become tarball paths:
/// each is refused naming the item, the part and the rule. Before, a
/// name like `../../etc/passwd` became
/// `resources/pods/namespaces/ns/../../etc/passwd.json`.
#[test]
fn invalid_names_never_become_paths() {
    let long = "x".repeat(254);
    let cases = [
        (id("", "pods", "ns", "../../../etc/passwd"), "name"),
        (id("", "pods", "ns", ".."), "name"),
        (id("", "pods", "ns", "a/b"), "name"),
        (id("", "pods", "ns", "nul\0byte"), "name"),
        (id("", "pods", "ns", "/abs"), "name"),
        (id("", "pods", "ns", ""), "name"),
        (id("", "pods", "ns", "Upper"), "name"),
        (id("", "pods", "ns", &long), "name"),
        (id("example.io", "widgets", "ns", ".."), "name"),
        (id("example.io", "widgets", "ns", "a%2fb"), "name"),
        (id("example.io", "widgets", "", &long), "name"),
        (id("", "namespaces", "", "a.b"), "name"),
        (id("", "pods", "..", "p"), "namespace"),
        (id("", "pods", "a/b", "p"), "namespace"),
        (id("", "pods", "/etc", "p"), "namespace"),
        (id("", "pods", "NS", "p"), "namespace"),
        (id("", "../x", "ns", "p"), "resource"),
        (id("", "", "ns", "p"), "resource"),
        (id("../..", "pods", "ns", "p"), "API group"),
    ];
    for (id, part) in cases {
        let err = item_path(&id).unwrap_err();
        assert!(
            err.contains(&format!("item {id}"))
                && err.contains(&format!("invalid {part}"))
                && err.contains("kubernetes-name"),
            "{id:?}: {err}"
        );
    }
    // What Kubernetes accepts is kept: RBAC names with ':', custom
    // resource names with capitals, 253-character subdomains.
    for ok in [
        id(
            "rbac.authorization.k8s.io",
            "clusterroles",
            "",
            "system:controller:x",
        ),
        id("example.io", "widgets", "ns", "Mixed_Case"),
        id("", "configmaps", "ns", &"a".repeat(253)),
    ] {
        item_path(&ok).unwrap();
    }
}

#[test]
fn round_trip_is_deterministic() {
    let long = format!("resources/pods/namespaces/ns/{}.json", "x".repeat(150));
    let entries = vec![
        (VERSION_PATH.to_string(), VERSION.to_vec()),
        (
            "resources/pods/namespaces/ns/a.json".to_string(),
            b"{}".to_vec(),
        ),
        (long, vec![7; 1000]),
        ("empty".to_string(), vec![]),
    ];
    let one = build(entries.clone()).unwrap();
    assert_eq!(one, build(entries.clone()).unwrap());
    assert_eq!(read(&one).unwrap(), entries);
    let tar = gunzip(&one).unwrap();
    let mut archive = tar::Archive::new(tar.as_slice());
    for entry in archive.entries().unwrap() {
        let h = entry.unwrap().header().clone();
        assert_eq!(
            (
                h.mode().unwrap(),
                h.mtime().unwrap(),
                h.uid().unwrap(),
                h.gid().unwrap()
            ),
            (0o644, 0, 0, 0)
        );
        assert!(h.entry_type().is_file());
    }
}

#[test]
fn garbage_is_an_error() {
    assert!(read(b"not a tarball").is_err());
    assert!(rewrite(b"not a tarball", &BTreeMap::new()).is_err());
}

/// Each entry's own 512-byte header and padded data, by path.
fn raw_entries(tar: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut archive = tar::Archive::new(tar);
    let mut out = Vec::new();
    for entry in archive.entries().unwrap() {
        let entry = entry.unwrap();
        let from = entry.raw_header_position() as usize;
        let to = entry.raw_file_position() as usize + entry.size().div_ceil(512) as usize * 512;
        let path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        out.push((path, tar[from..to].to_vec()));
    }
    out
}

/// A tarball as another writer (Velero) would make it: real mtimes,
/// modes and owners, a long name, a PAX record.
fn foreign_tarball() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let files: [(&str, &[u8], u32, u64); 4] = [
        ("metadata/version", b"1\n", 0o755, 1_700_000_000),
        (
            "resources/pods/namespaces/ns/keep.json",
            b"{\"k\":1}",
            0o600,
            1_700_000_001,
        ),
        (
            "resources/pods/namespaces/ns/swap.json",
            b"{\"old\":true}",
            0o644,
            1_700_000_002,
        ),
        (
            "resources/pods/namespaces/ns/tail.json",
            b"{\"t\":2}",
            0o644,
            1_700_000_003,
        ),
    ];
    for (i, (path, data, mode, mtime)) in files.into_iter().enumerate() {
        let mut h = tar::Header::new_ustar();
        h.set_mode(mode);
        h.set_mtime(mtime);
        h.set_uid(1000 + i as u64);
        h.set_size(data.len() as u64);
        if i == 1 {
            b.append_pax_extensions([("comment", b"velero".as_slice())])
                .unwrap();
        }
        b.append_data(&mut h, path, data).unwrap();
    }
    let long = format!("resources/secrets/namespaces/ns/{}.json", "l".repeat(120));
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o640);
    h.set_mtime(42);
    h.set_size(3);
    b.append_data(&mut h, long, b"abc".as_slice()).unwrap();
    gzip(&b.into_inner().unwrap()).unwrap()
}

#[test]
fn rewrite_replaces_in_place_appends_and_keeps_the_rest_byte_for_byte() {
    let original = foreign_tarball();
    let replace = BTreeMap::from([
        (
            "resources/pods/namespaces/ns/swap.json".to_string(),
            b"{\"new\":1}".to_vec(),
        ),
        (
            "resources/pvc/namespaces/ns/z.json".to_string(),
            b"z".to_vec(),
        ),
        (
            "resources/pvc/namespaces/ns/a.json".to_string(),
            b"a".to_vec(),
        ),
    ]);
    let rewritten = rewrite(&original, &replace).unwrap();

    let paths: Vec<_> = read(&rewritten).unwrap();
    let names: Vec<_> = paths.iter().map(|(p, _)| p.as_str()).collect();
    let long = format!("resources/secrets/namespaces/ns/{}.json", "l".repeat(120));
    assert_eq!(
        names,
        [
            "metadata/version",
            "resources/pods/namespaces/ns/keep.json",
            "resources/pods/namespaces/ns/swap.json",
            "resources/pods/namespaces/ns/tail.json",
            long.as_str(),
            "resources/pvc/namespaces/ns/a.json",
            "resources/pvc/namespaces/ns/z.json",
        ]
    );
    assert_eq!(paths[2].1, b"{\"new\":1}");
    assert_eq!(paths[5].1, b"a");

    let before = raw_entries(&gunzip(&original).unwrap());
    let after = raw_entries(&gunzip(&rewritten).unwrap());
    for (path, raw) in &before {
        let now = &after.iter().find(|(p, _)| p == path).unwrap().1;
        if replace.contains_key(path) {
            assert_ne!(raw, now, "{path} was replaced");
        } else {
            assert_eq!(raw, now, "{path} must be kept byte for byte");
        }
    }
    // The PAX record that described the kept entry is still there.
    let tar = gunzip(&rewritten).unwrap();
    let mut archive = tar::Archive::new(tar.as_slice());
    let mut keep = archive.entries().unwrap().nth(1).unwrap().unwrap();
    let pax: Vec<_> = keep.pax_extensions().unwrap().unwrap().collect();
    assert_eq!(pax[0].as_ref().unwrap().value().unwrap(), "velero");
}

#[test]
fn rewrite_with_nothing_to_replace_keeps_the_tar() {
    let original = foreign_tarball();
    let rewritten = rewrite(&original, &BTreeMap::new()).unwrap();
    assert_eq!(gunzip(&original).unwrap(), gunzip(&rewritten).unwrap());
}

fn entry(path: &str, data: &str) -> (String, Vec<u8>) {
    (path.to_string(), data.as_bytes().to_vec())
}

type Entries = Vec<(String, Vec<u8>)>;

/// 200 head entries, two tail entries, and the tarball of both.
fn split_tarball() -> (Entries, Entries, Vec<u8>) {
    let head: Vec<_> = (0..200)
        .map(|i| {
            entry(
                &format!("resources/pods/namespaces/ns/p{i}.json"),
                &format!("{{\"pod\":{i}}}"),
            )
        })
        .collect();
    let tail = vec![
        entry(
            "resources/volumesnapshots.snapshot.storage.k8s.io/namespaces/ns/a.json",
            "{\"ready\":false}",
        ),
        entry(
            "resources/volumesnapshots.snapshot.storage.k8s.io/namespaces/ns/b.json",
            "{\"ready\":false}",
        ),
    ];
    let built = build_split(head.clone(), tail.clone()).unwrap();
    (head, tail, built)
}

/// Two members, one archive: our reader and GNU gzip and tar read the
/// head's entries then the tail's.
#[test]
fn a_split_tarball_is_one_archive_to_every_reader() {
    let (head, tail, built) = split_tarball();
    let head_len = head_member(&built).expect("a head member");
    assert!(head_len < built.len());
    let all: Vec<_> = head.iter().chain(&tail).cloned().collect();
    assert_eq!(read(&built).unwrap(), all);
    // `build` writes one plain member, read whole.
    assert_eq!(read(&build(all.clone()).unwrap()).unwrap(), all);
    assert_eq!(head_member(&build(all.clone()).unwrap()), None);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("contents.tar.gz");
    std::fs::write(&file, &built).unwrap();
    let listed = std::process::Command::new("tar")
        .arg("-tzf")
        .arg(&file)
        .output()
        .expect("GNU tar runs");
    assert!(listed.status.success(), "{listed:?}");
    let names: Vec<String> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let want: Vec<String> = all.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(names, want);
}

/// Replacing tail entries copies the head member byte for byte and
/// gives the same archive as rewriting the whole.
#[test]
fn rewriting_tail_entries_keeps_the_head_member() {
    let (head, tail, built) = split_tarball();
    let head_len = head_member(&built).unwrap();
    let replace = BTreeMap::from([entry(&tail[1].0, "{\"ready\":true}")]);
    let rewritten = rewrite(&built, &replace).unwrap();
    assert_eq!(rewritten[..head_len], built[..head_len]);
    let whole = rewrite(&gzip(&gunzip(&built).unwrap()).unwrap(), &replace).unwrap();
    assert_eq!(gunzip(&rewritten).unwrap(), gunzip(&whole).unwrap());
    let read_back = read(&rewritten).unwrap();
    assert_eq!(read_back[..head.len()], head[..]);
    assert_eq!(read_back[head.len()], tail[0]);
    assert_eq!(read_back[head.len() + 1].1, b"{\"ready\":true}");
}

/// A post-operation item the first pass did not back up (a snapshot
/// created after it) is appended to the tail; the head stays as it is.
/// With no tail entries at all the tail member holds the trailer alone.
#[test]
fn new_post_operation_items_are_appended_to_the_tail() {
    let (head, tail, built) = split_tarball();
    let head_len = head_member(&built).unwrap();
    let new = BTreeMap::from([entry("resources/pods/namespaces/ns/zz.json", "{}")]);
    let rewritten = rewrite(&built, &new).unwrap();
    assert_eq!(rewritten[..head_len], built[..head_len]);
    let read_back = read(&rewritten).unwrap();
    assert_eq!(read_back.len(), head.len() + tail.len() + 1);
    assert_eq!(
        read_back.last().unwrap().0,
        "resources/pods/namespaces/ns/zz.json"
    );

    let empty_tail = build_split(head.clone(), []).unwrap();
    let head_len = head_member(&empty_tail).unwrap();
    let rewritten = rewrite(&empty_tail, &new).unwrap();
    assert_eq!(rewritten[..head_len], empty_tail[..head_len]);
    let read_back = read(&rewritten).unwrap();
    assert_eq!(read_back[..head.len()], head[..]);
    assert_eq!(read_back.len(), head.len() + 1);
}

/// A head member whose recorded lengths do not hold (a damaged file, a
/// foreign writer's extra field) is not trusted: the archive is read and
/// rewritten whole, and nothing is lost.
#[test]
fn a_head_member_whose_lengths_do_not_hold_is_not_trusted() {
    let (head, tail, built) = split_tarball();
    let replace = BTreeMap::from([entry(&tail[0].0, "{\"ready\":true}")]);
    for (at, value) in [(SPLIT_DATA.start, 7u64), (SPLIT_DATA.start + 8, 12345)] {
        let mut damaged = built.clone();
        damaged[at..at + 8].copy_from_slice(&value.to_le_bytes());
        assert_eq!(head_member(&damaged), None);
        let read_back = read(&rewrite(&damaged, &replace).unwrap()).unwrap();
        assert_eq!(read_back.len(), head.len() + tail.len());
        assert_eq!(read_back[head.len()].1, b"{\"ready\":true}");
    }
}

/// Velero's layout since format 1.1.0: the versioned copy beside the
/// plain path, for namespaced and cluster-scoped items, and a version
/// that could change the path is refused like any bad name.
#[test]
fn items_are_also_under_their_preferred_version() {
    let id = |group: &str, resource: &str, namespace: &str, name: &str| {
        ItemRef::new(group, resource, namespace, name)
    };
    assert_eq!(
        preferred_version_path(&id("", "configmaps", "shop", "web"), "v1").unwrap(),
        "resources/configmaps/v1-preferredversion/namespaces/shop/web.json"
    );
    assert_eq!(
        preferred_version_path(&id("apps", "deployments", "shop", "web"), "apps/v1").unwrap(),
        "resources/deployments.apps/v1-preferredversion/namespaces/shop/web.json"
    );
    assert_eq!(
        preferred_version_path(&id("", "namespaces", "", "shop"), "v1").unwrap(),
        "resources/namespaces/v1-preferredversion/cluster/shop.json"
    );
    for bad in ["apps/../x", "apps/", "", "apps/V1", "a/b/../../etc"] {
        let err =
            preferred_version_path(&id("apps", "deployments", "shop", "web"), bad).unwrap_err();
        assert!(err.contains("rule kubernetes-name"), "{bad}: {err}");
    }
}
