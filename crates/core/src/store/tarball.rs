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
    let bad = |part: &str, value: &str, why: names::NameError| {
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
    super::gz::gunzip_at_most(tar_gz, super::gz::TARBALL_MAX)
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
mod tests;
