//! A spool: an unlinked temporary file that listed objects' texts are
//! written into once, so that a backup holds each listed object as a
//! position (a few bytes) instead of its text, and reads it back when a
//! plugin or the tarball needs it. Velero does the same with a directory of
//! temporary files, one per listed item.
//!
//! Append-only: a position, once given, always reads back the same bytes,
//! whatever happens to the file the object came from. The file is unlinked
//! at creation, so it goes with the process (or the last [`Spool`] handle)
//! however that ends; its pages live in the page cache, not the process.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

/// An append-only spool file; shared by the items it holds.
#[derive(Debug)]
pub struct Spool {
    file: File,
    /// The write end and its offset. A lock held across the write: the
    /// offset and the bytes at it must advance together (atomicity is the
    /// point), and each write is one small `write_all` to the page cache.
    end: Mutex<u64>,
}

/// Where a text is in a spool.
#[derive(Clone, Debug)]
pub struct Spooled {
    spool: Arc<Spool>,
    at: u64,
    len: u32,
}

impl Spool {
    /// A new spool in the temporary directory (`TMPDIR`).
    pub fn new() -> io::Result<Arc<Spool>> {
        Ok(Arc::new(Spool {
            file: tempfile::tempfile()?,
            end: Mutex::new(0),
        }))
    }

    /// Writes `text` at the end of the spool and returns where it is. A
    /// text over 4 GiB is refused (no Kubernetes object is near that: the
    /// API server's limit is about 1.5 MiB).
    pub fn put(self: &Arc<Self>, text: &str) -> io::Result<Spooled> {
        let len = u32::try_from(text.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "text over 4 GiB"))?;
        let mut end = self.end.lock().unwrap_or_else(|p| p.into_inner());
        let at = *end;
        self.file.write_all_at(text.as_bytes(), at)?;
        *end = at + u64::from(len);
        Ok(Spooled {
            spool: self.clone(),
            at,
            len,
        })
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        *self.end.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Spooled {
    /// The text, read back.
    pub fn read(&self) -> io::Result<String> {
        let mut buf = vec![0; self.len as usize];
        self.spool.file.read_exact_at(&mut buf, self.at)?;
        String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// The text's length in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_position_reads_back_its_own_text() {
        let spool = Spool::new().unwrap();
        let texts = ["", "{}", "{\"a\":\"é\"}", &"x".repeat(70_000)];
        let at: Vec<Spooled> = texts.iter().map(|t| spool.put(t).unwrap()).collect();
        // Read back in another order, after more writes.
        spool.put("later").unwrap();
        for (t, s) in texts.iter().zip(&at).rev() {
            assert_eq!(s.read().unwrap(), *t);
            assert_eq!(s.len(), t.len());
        }
        assert_eq!(
            spool.len(),
            texts.iter().map(|t| t.len() as u64).sum::<u64>() + 5
        );
    }

    #[test]
    fn writers_on_many_threads_never_overlap() {
        let spool = Spool::new().unwrap();
        let got: Vec<(String, Spooled)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|t| {
                    let spool = spool.clone();
                    s.spawn(move || {
                        (0..500)
                            .map(|i| {
                                let text = format!("{{\"t\":{t},\"i\":{i}}}");
                                let at = spool.put(&text).unwrap();
                                (text, at)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        for (text, at) in got {
            assert_eq!(at.read().unwrap(), text);
        }
    }
}
