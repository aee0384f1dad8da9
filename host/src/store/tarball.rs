//! The contents tarball: a gzip'd tar of one JSON file per item, laid out as
//! Velero lays it out, so Velero's tooling can read an iar backup.
//!
//! A backup whose actions started operations is written in two gzip
//! members: the items finalize will not touch, then the post-operation
//! items (and the tar trailer). RFC 1952 makes a gzip file a series of
//! members read as one stream (GNU gzip, Go's `gzip.Reader` and so Velero,
//! flate2's `MultiGzDecoder` all do), so the file is still one tar.gz. The
//! first member's header carries its own length in an extra field (as BGZF
//! does), so finalize copies it byte for byte and recompresses the tail
//! alone instead of the whole archive.

use crate::item::ItemRef;
use crate::names;
use flate2::Compression;
use flate2::GzBuilder;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Write};

/// The archive format version file Velero writes.
pub const VERSION_PATH: &str = "metadata/version";
/// Its content: Velero's `BackupFormatVersion`, the one `status.formatVersion`
/// names. Since 1.1.0 every item is also under its API version (below).
pub const VERSION: &[u8] = b"1.1.0\n";

/// The suffix of the directory that holds each item at its preferred API
/// version (Velero's `PreferredVersionDir`).
pub const PREFERRED_VERSION_DIR: &str = "-preferredversion";

const BLOCK: u64 = 512;
/// What `tar::Builder::finish` writes: two zero blocks.
const TRAILER: usize = 1024;

/// The extra-field subfield of a head member: its id, and where its 16
/// bytes of data (the member's compressed length, then the length of the tar
/// bytes it holds, both u64 little-endian) sit in the member's header (10
/// fixed bytes, XLEN, the subfield's id and length).
const SPLIT_ID: [u8; 2] = *b"iT";
const SPLIT_DATA: std::ops::Range<usize> = 16..32;

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

/// The second place Velero writes an item since format 1.1.0:
/// `resources/<group-resource>/<version>-preferredversion/namespaces/<ns>/<name>.json`,
/// what a restore with `--features=EnableAPIGroupVersions` reads. The
/// version is the one the item was read at (its `apiVersion`), which is
/// its resource's preferred version in a live cluster (read through
/// discovery's preferred versions); a manifest's objects are taken at the
/// version they are written in.
pub fn preferred_version_path(id: &ItemRef, api_version: &str) -> Result<String, String> {
    let plain = item_path(id)?;
    // `group/version` or `version`; anything more is not an API version.
    let version = api_version
        .split_once('/')
        .map_or(api_version, |(_, version)| version);
    names::dns_label(version).map_err(|why| {
        format!("item {id}: invalid API version {api_version:?}: {why} (rule kubernetes-name)")
    })?;
    let gr = id.group_resource();
    let rest = plain
        .strip_prefix(&format!("resources/{gr}/"))
        .expect("item_path starts with the group-resource");
    Ok(format!(
        "resources/{gr}/{version}{PREFERRED_VERSION_DIR}/{rest}"
    ))
}

/// One entry (long-name header included when needed), without the trailer,
/// appended to `tar`. Headers are fixed so the same input always gives the
/// same bytes.
fn encode_entry(tar: &mut Vec<u8>, path: &str, data: &[u8]) -> io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header.set_size(data.len() as u64);
    let start = tar.len();
    let mut builder = tar::Builder::new(std::mem::take(tar));
    builder.append_data(&mut header, path, data)?;
    *tar = builder.into_inner()?;
    // `into_inner` finished the archive; the trailer is written once, last.
    tar.truncate(tar.len() - TRAILER);
    debug_assert!(tar.len() > start);
    Ok(())
}

fn gzip(tar: &[u8]) -> io::Result<Vec<u8>> {
    // GzEncoder's default header has mtime 0, keeping the output deterministic.
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(tar)?;
    gz.finish()
}

/// Every member of a gzip file, as one stream.
fn gunzip(tar_gz: &[u8]) -> io::Result<Vec<u8>> {
    let mut tar = Vec::new();
    MultiGzDecoder::new(tar_gz).read_to_end(&mut tar)?;
    Ok(tar)
}

/// The encoder of a head member: its header has room for the lengths.
fn head_encoder() -> flate2::write::GzEncoder<Vec<u8>> {
    let mut extra = SPLIT_ID.to_vec();
    extra.extend(16u16.to_le_bytes());
    extra.extend([0; 16]);
    GzBuilder::new()
        .extra(extra)
        .write(Vec::new(), Compression::default())
}

/// Ends a head member of `tar_len` tar bytes and writes the lengths into its
/// header.
fn finish_head(gz: flate2::write::GzEncoder<Vec<u8>>, tar_len: u64) -> io::Result<Vec<u8>> {
    let mut member = gz.finish()?;
    // The lengths are known only now; the header has no checksum (no
    // FHCRC), so they are written into it in place.
    let member_len = member.len() as u64;
    member[SPLIT_DATA.start..SPLIT_DATA.start + 8].copy_from_slice(&member_len.to_le_bytes());
    member[SPLIT_DATA.start + 8..SPLIT_DATA.end].copy_from_slice(&tar_len.to_le_bytes());
    Ok(member)
}

/// The length of the head member `tar_gz` starts with, if it starts with
/// one that [`finish_head`] wrote and a member follows it: its header names
/// the length, its trailer's size field agrees with the tar length its header
/// names, and a gzip header begins where it ends. Anything else (a foreign
/// tarball, one member, a damaged file) is `None`, and read whole.
pub fn head_member(tar_gz: &[u8]) -> Option<usize> {
    let header = tar_gz.get(..SPLIT_DATA.end)?;
    let extra_flag = 0x04;
    if header[..3] != [0x1f, 0x8b, 8]
        || header[3] & extra_flag == 0
        || header[12..14] != SPLIT_ID
        || header[14..16] != 16u16.to_le_bytes()
    {
        return None;
    }
    let u64_at = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    let member_len = usize::try_from(u64_at(SPLIT_DATA.start)).ok()?;
    let tar_len = u64_at(SPLIT_DATA.start + 8);
    let size_field = tar_gz.get(member_len.checked_sub(4)?..member_len)?;
    let next = tar_gz.get(member_len..member_len + 2)?;
    (member_len > SPLIT_DATA.end
        && size_field == (tar_len as u32).to_le_bytes()
        && next == [0x1f, 0x8b])
    .then_some(member_len)
}

/// Writes each entry, tar-encoded, into `out`, one entry's bytes in memory
/// at a time (never the whole tar); returns how many tar bytes it wrote.
fn write_entries<B: AsRef<[u8]>>(
    out: &mut impl Write,
    entries: impl IntoIterator<Item = (String, B)>,
) -> io::Result<u64> {
    let mut buf = Vec::new();
    let mut written = 0;
    for (path, data) in entries {
        buf.clear();
        encode_entry(&mut buf, &path, data.as_ref())?;
        out.write_all(&buf)?;
        written += buf.len() as u64;
    }
    Ok(written)
}

/// A gzip'd tar of `entries`, in the given order, in one member. Entries
/// are compressed as they come: memory holds the compressed output and one
/// entry, not the tar.
pub fn build<B: AsRef<[u8]>>(
    entries: impl IntoIterator<Item = (String, B)>,
) -> io::Result<Vec<u8>> {
    // GzEncoder's default header has mtime 0, keeping the output deterministic.
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    write_entries(&mut gz, entries)?;
    gz.write_all(&[0; TRAILER])?;
    gz.finish()
}

/// A gzip'd tar of `head` then `tail`, in two members (the second holds at
/// least the trailer), for a backup whose operations name post-operation
/// items: `tail` must hold every one of them that is backed up now and
/// `head` none, so that [`rewrite`] leaves the head's bytes as they are.
pub fn build_split<B: AsRef<[u8]>>(
    head: impl IntoIterator<Item = (String, B)>,
    tail: impl IntoIterator<Item = (String, B)>,
) -> io::Result<Vec<u8>> {
    let mut out = StreamWriter::new();
    for (path, data) in head {
        out.append(&path, data.as_ref())?;
    }
    out.finish(tail)
}

/// A contents tarball written as the items come, in the layout
/// [`build_split`] gives: entries are compressed into the head member as
/// they are appended (memory holds the compressed head, not the items),
/// and [`StreamWriter::finish`] ends the head and writes `tail`, the
/// post-operation items, into the second member.
pub struct StreamWriter {
    head: flate2::write::GzEncoder<Vec<u8>>,
    head_len: u64,
    entry: Vec<u8>,
}

impl Default for StreamWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamWriter {
    pub fn new() -> StreamWriter {
        StreamWriter {
            head: head_encoder(),
            head_len: 0,
            entry: Vec::new(),
        }
    }

    /// Appends one entry to the head member.
    pub fn append(&mut self, path: &str, data: &[u8]) -> io::Result<()> {
        self.entry.clear();
        encode_entry(&mut self.entry, path, data)?;
        self.head.write_all(&self.entry)?;
        self.head_len += self.entry.len() as u64;
        Ok(())
    }

    /// Compressed bytes of the head so far.
    pub fn compressed_len(&self) -> usize {
        self.head.get_ref().len()
    }

    /// The whole tarball: the head, then `tail` and the trailer.
    pub fn finish<B: AsRef<[u8]>>(
        self,
        tail: impl IntoIterator<Item = (String, B)>,
    ) -> io::Result<Vec<u8>> {
        let mut out = finish_head(self.head, self.head_len)?;
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        write_entries(&mut gz, tail)?;
        gz.write_all(&[0; TRAILER])?;
        out.extend(gz.finish()?);
        Ok(out)
    }
}

/// The same tarball in one member: for one whose head holds an item that
/// finalize will replace (an item named a post-operation item only after
/// it was written), which [`rewrite`] must then rewrite whole.
pub fn one_member(tar_gz: &[u8]) -> io::Result<Vec<u8>> {
    gzip(&gunzip(tar_gz)?)
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
///
/// `replace` holds post-operation items only. A tarball [`build_split`]
/// wrote holds none of them in its head, so its head member is copied as it
/// is and only its tail is decompressed, rewritten and compressed again. Any
/// other tarball is rewritten whole.
pub fn rewrite(tar_gz: &[u8], replace: &BTreeMap<String, Vec<u8>>) -> io::Result<Vec<u8>> {
    if let Some(head_len) = head_member(tar_gz) {
        let tail = rewrite_tar(&gunzip(&tar_gz[head_len..])?, replace)?;
        let mut out = tar_gz[..head_len].to_vec();
        out.extend(gzip(&tail)?);
        return Ok(out);
    }
    gzip(&rewrite_tar(&gunzip(tar_gz)?, replace)?)
}

/// [`rewrite`] on the tar bytes.
fn rewrite_tar(tar: &[u8], replace: &BTreeMap<String, Vec<u8>>) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(tar.len());
    let mut seen = BTreeSet::new();
    let mut archive = tar::Archive::new(tar);
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
                encode_entry(&mut out, &path, data)?;
                seen.insert(path);
            }
            _ => out.extend_from_slice(bytes),
        }
        start = end;
    }
    for (path, data) in replace {
        if !seen.contains(path) {
            encode_entry(&mut out, path, data)?;
        }
    }
    out.extend([0; TRAILER]);
    Ok(out)
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
        let id = |group: &str, resource: &str, namespace: &str, name: &str| ItemRef {
            group: group.into(),
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
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
}
