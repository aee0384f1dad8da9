//! What a repository snapshot holds beyond a manifest's entries, for the
//! restore: whose volume it is (its tags), modification times, extended
//! attributes and hard links.

use super::{Link, RestoreOptions, Step, show};
use crate::backup::volumes::EntryKind;
use iar_repository::Node;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::PathBuf;

/// The volume a snapshot must be: its backup and namespace always; its
/// pod, volume and claim when a record says them.
pub(super) struct Expect {
    pub backup: String,
    pub namespace: String,
    pub volume: Option<(String, String, Option<String>)>,
}

/// Whether snapshot `id`'s tags are `expect`'s: each of `backup=`,
/// `namespace=`, and with a record `pod=`, `volume=` and `pvc=`, exactly
/// once with the record's value (`pvc=` absent when the record has no
/// claim). A snapshot's tags are encrypted with the repository, so
/// whoever can only write the store cannot make them; a record can be.
pub(super) fn check_tags(tags: &[String], expect: &Expect, id: &str) -> Result<(), String> {
    let mut want = vec![
        ("backup", Some(expect.backup.as_str())),
        ("namespace", Some(expect.namespace.as_str())),
    ];
    if let Some((pod, volume, pvc)) = &expect.volume {
        want.extend([
            ("pod", Some(pod.as_str())),
            ("volume", Some(volume.as_str())),
            ("pvc", pvc.as_deref()),
        ]);
    }
    for (key, value) in want {
        let found: Vec<&str> = tags
            .iter()
            .filter_map(|t| t.strip_prefix(key)?.strip_prefix('='))
            .collect();
        let matches = match value {
            Some(v) => found == [v],
            None => found.is_empty(),
        };
        if !matches {
            let shown = |values: &[&str]| match values {
                [] => format!("no {key}="),
                _ => values
                    .iter()
                    .map(|v| format!("{key}={v}"))
                    .collect::<Vec<_>>()
                    .join(","),
            };
            return Err(format!(
                "snapshot {id} is tagged {} where the volume's would be {}: another volume's data (rule: snapshot-mismatch); nothing was written",
                shown(&found),
                shown(value.as_slice())
            ));
        }
    }
    Ok(())
}

/// A node's modification time as (seconds, nanoseconds in 0..1e9).
pub(super) fn mtime_of(node: &Node) -> Option<(i64, u32)> {
    let t = node.meta.mtime?;
    let (mut secs, mut nanos) = (t.as_second(), t.subsec_nanosecond());
    // Before 1970 the nanoseconds are negative.
    if nanos < 0 {
        secs -= 1;
        nanos += 1_000_000_000;
    }
    Some((secs, nanos as u32))
}

/// `mtime` to set, the access time left as it is (the walk keeps none).
pub(super) fn times((secs, nanos): (i64, u32)) -> rustix::fs::Timestamps {
    rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: secs,
            tv_nsec: nanos.into(),
        },
    }
}

const XATTR_NAMESPACE: &str = "outside user.*, restored only with --preserve-owner (as root): such attributes carry privileges or identities (file capabilities, SELinux labels, ACLs naming users) (rule: xattr-namespace)";

/// Adds to each step its node's time, attributes and hard links; returns
/// the warnings for what will not be restored (attributes dropped, a hard
/// link whose names hold different content).
///
/// Attributes: `user.*` always; the others (`security.`, `trusted.`,
/// `system.`) only with `preserve_owner` as root, as setuid bits are.
/// Hard links as restic restores them: later names of a file (links > 1,
/// same device and inode) become links to its first name, but only when
/// their content is the first's (a file changed between reading two of
/// its names is two files' worth of content, and is restored as such).
pub(super) fn add_metadata(
    steps: &mut [Step],
    listed: &[(PathBuf, Node)],
    options: &RestoreOptions,
) -> Vec<String> {
    let mut warnings = Vec::new();
    // Attributes not restored, by reason and name: counted with the first
    // entry, so a volume labelled throughout says so once.
    let mut dropped: BTreeMap<(&str, String), (u64, String)> = BTreeMap::new();
    let privileged = options.preserve_owner && rustix::process::geteuid().is_root();
    let mut firsts: HashMap<(u64, u64), usize> = HashMap::new();
    for i in 0..steps.len() {
        let (path, node) = &listed[steps[i].index];
        steps[i].mtime = mtime_of(node);
        for a in &node.meta.extended_attributes {
            let value = a.value.clone().unwrap_or_default();
            let reason = if a.name.is_empty()
                || a.name.len() > 255
                || a.name.contains('\0')
                || value.len() > 65536
            {
                Some("not a valid attribute (rule: xattr-invalid)")
            } else if steps[i].kind == EntryKind::Symlink {
                Some("a symlink's attributes are not restored (rule: xattr-symlink)")
            } else if !a.name.starts_with("user.") && !privileged {
                Some(XATTR_NAMESPACE)
            } else {
                None
            };
            match reason {
                None => steps[i].xattrs.push((a.name.clone(), value)),
                Some(reason) => {
                    let seen = dropped
                        .entry((reason, a.name.clone()))
                        .or_insert_with(|| (0, path.display().to_string()));
                    seen.0 += 1;
                }
            }
        }
        let m = &node.meta;
        if steps[i].kind != EntryKind::File || m.links < 2 || m.inode == 0 || m.device_id == 0 {
            continue;
        }
        match firsts.entry((m.device_id, m.inode)) {
            Entry::Vacant(v) => {
                v.insert(i);
            }
            Entry::Occupied(o) => {
                let f = *o.get();
                let (first_path, first) = &listed[steps[f].index];
                if first.content == node.content && first.meta.size == m.size {
                    steps[f].link = Link::First;
                    steps[i].link = Link::To(steps[f].index);
                } else {
                    warnings.push(format!(
                        "{}: a hard link of {:?} in the volume, but the backup read other content under each name (it changed while read): restored as a file of its own (rule: hard-link-differs)",
                        path.display(),
                        first_path.display().to_string()
                    ));
                }
            }
        }
    }
    for ((reason, name), (count, first)) in dropped {
        warnings.push(format!(
            "extended attribute {name:?} not restored on {count} entries (the first: {first:?}): {reason}"
        ));
    }
    warnings
}

/// Entries whose attributes the target's file system refused as a whole
/// (`ENOTSUP`): reported once, not per entry.
#[derive(Default)]
pub(super) struct XattrsUnsupported {
    count: u64,
    first: Option<String>,
}

impl XattrsUnsupported {
    pub(super) fn warning(&self) -> Option<String> {
        self.first.as_ref().map(|first| {
            format!(
                "the target's file system takes no extended attributes: those of {} entries were not restored (the first: {first:?}) (rule: xattr-unsupported)",
                self.count
            )
        })
    }
}

/// Sets `step`'s attributes on its handle; what is refused is a warning
/// (the content is restored all the same).
pub(super) fn set_xattrs(
    fd: &impl std::os::fd::AsFd,
    step: &Step,
    unsupported: &mut XattrsUnsupported,
    warnings: &mut Vec<String>,
) {
    for (name, value) in &step.xattrs {
        match rustix::fs::fsetxattr(fd, name.as_str(), value, rustix::fs::XattrFlags::empty()) {
            Ok(()) => {}
            Err(rustix::io::Errno::NOTSUP) => {
                unsupported.count += 1;
                unsupported
                    .first
                    .get_or_insert_with(|| show(&step.components));
                return;
            }
            Err(e) => warnings.push(format!(
                "{}: extended attribute {name:?} not restored: {e} (rule: xattr-refused)",
                show(&step.components)
            )),
        }
    }
}
