//! The contents tarball: a gzip'd tar of one JSON file per item, laid out as
//! Velero lays it out, so Velero's tooling can read an iar backup.

use super::names;
use crate::item::ItemRef;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Write};

/// The archive format version file Velero writes.
pub const VERSION_PATH: &str = "metadata/version";
/// Its content.
pub const VERSION: &[u8] = b"1\n";

const BLOCK: u64 = 512;
/// What `tar::Builder::finish` writes: two zero blocks.
const TRAILER: usize = 1024;

/// Where an item's JSON lives in the tarball. The group part follows
/// Velero's `GroupResource.String()`: omitted for the core group.
///
/// Every part of the identity is checked against the Kubernetes name rules
/// first, so no item becomes a path with `..`, `/`, NUL, or an absolute path;
/// the error names the item and the rule.
pub fn item_path(id: &ItemRef) -> Result<String, String> {
    let bad = |part: &str, value: &str, why: String| {
        format!("item {id}: invalid {part} {value:?}: {why} (rule kubernetes-name)")
    };
    if !id.group.is_empty() {
        names::dns_subdomain(&id.group).map_err(|e| bad("API group", &id.group, e))?;
    }
    names::dns_label(&id.resource).map_err(|e| bad("resource", &id.resource, e))?;
    if !id.namespace.is_empty() {
        names::dns_label(&id.namespace).map_err(|e| bad("namespace", &id.namespace, e))?;
    }
    names::object_name(&id.group, &id.resource, &id.name).map_err(|e| bad("name", &id.name, e))?;
    let gr = id.group_resource();
    Ok(if id.namespace.is_empty() {
        format!("resources/{gr}/cluster/{}.json", id.name)
    } else {
        format!(
            "resources/{gr}/namespaces/{}/{}.json",
            id.namespace, id.name
        )
    })
}

/// One entry (long-name header included when needed), without the trailer.
/// Headers are fixed so the same input always gives the same bytes.
fn encode_entry(path: &str, data: &[u8]) -> io::Result<Vec<u8>> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header.set_size(data.len() as u64);
    let mut builder = tar::Builder::new(Vec::new());
    builder.append_data(&mut header, path, data)?;
    let mut bytes = builder.into_inner()?;
    bytes.truncate(bytes.len() - TRAILER);
    Ok(bytes)
}

fn gzip(tar: &[u8]) -> io::Result<Vec<u8>> {
    // GzEncoder's default header has mtime 0, keeping the output deterministic.
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(tar)?;
    gz.finish()
}

fn gunzip(tar_gz: &[u8]) -> io::Result<Vec<u8>> {
    let mut tar = Vec::new();
    GzDecoder::new(tar_gz).read_to_end(&mut tar)?;
    Ok(tar)
}

/// A gzip'd tar of `entries`, in the given order.
pub fn build(entries: impl IntoIterator<Item = (String, Vec<u8>)>) -> io::Result<Vec<u8>> {
    let mut tar = Vec::new();
    for (path, data) in entries {
        tar.extend(encode_entry(&path, &data)?);
    }
    tar.extend([0; TRAILER]);
    gzip(&tar)
}

/// The regular files of a gzip'd tar, in archive order.
pub fn read(tar_gz: &[u8]) -> io::Result<Vec<(String, Vec<u8>)>> {
    let tar = gunzip(tar_gz)?;
    let mut archive = tar::Archive::new(tar.as_slice());
    let mut out = Vec::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let mut data = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut data)?;
        out.push((path, data));
    }
    Ok(out)
}

/// Rewrites a tarball for finalize: entries whose path is in `replace` get
/// the new data in place (same position); paths not present are appended at
/// the end in map order; every other entry is copied with its original
/// header and data unchanged, byte for byte.
pub fn rewrite(tar_gz: &[u8], replace: &BTreeMap<String, Vec<u8>>) -> io::Result<Vec<u8>> {
    let tar = gunzip(tar_gz)?;
    let mut out = Vec::with_capacity(tar.len());
    let mut seen = BTreeSet::new();
    let mut archive = tar::Archive::new(tar.as_slice());
    // A logical entry spans from the end of the previous one to the end of its
    // padded data, so any long-name or PAX headers before it are kept with it.
    let mut start = 0usize;
    for entry in archive.entries()? {
        let entry = entry?;
        let end = usize::try_from(entry.raw_file_position() + entry.size().div_ceil(BLOCK) * BLOCK)
            .map_err(io::Error::other)?;
        let path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let bytes = tar
            .get(start..end)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "truncated tar entry"))?;
        match replace.get(&path) {
            Some(data) if entry.header().entry_type().is_file() => {
                out.extend(encode_entry(&path, data)?);
                seen.insert(path);
            }
            _ => out.extend_from_slice(bytes),
        }
        start = end;
    }
    for (path, data) in replace {
        if !seen.contains(path) {
            out.extend(encode_entry(path, data)?);
        }
    }
    out.extend([0; TRAILER]);
    gzip(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(group: &str, resource: &str, namespace: &str, name: &str) -> ItemRef {
        ItemRef {
            group: group.into(),
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
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
}
