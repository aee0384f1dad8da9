//! Gzip streams read from a store, each under a decompressed-size bound:
//! whoever can write to a store can plant a gzip bomb (a few KiB that
//! inflate to terabytes), and no reader may allocate what a store claims.

use flate2::read::MultiGzDecoder;
use std::io::Read;

/// The bound for the store's JSON files (operations, results, logs,
/// created-object records, volume manifests).
pub const JSON_MAX: u64 = 1 << 30;
/// The bound for a backup's tarball.
pub const TARBALL_MAX: u64 = 8 << 30;

/// Every member of `data` as one stream, refused with rule
/// `decompressed-size` past `limit` bytes (nothing past it is kept).
pub fn gunzip_at_most(data: &[u8], limit: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    MultiGzDecoder::new(data)
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("inflates past {limit} bytes (rule: decompressed-size)"),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_bomb_is_refused_without_inflating_it() {
        // 64 MiB of zeros in about 64 KiB.
        let bomb = gz(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 200 << 10);
        let err = gunzip_at_most(&bomb, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("rule: decompressed-size"), "{err}");
        assert_eq!(gunzip_at_most(&gz(b"abc"), 3).unwrap(), b"abc");
        assert!(gunzip_at_most(&gz(b"abcd"), 3).is_err());
    }
}
