//! restic's encryption of a repository file with the master key, for the
//! files iar writes itself (locks): a 16-byte random nonce, AES-256-CTR
//! ciphertext, a 16-byte Poly1305-AES tag. rustic_core keeps its own
//! `Key` type private, so the bytes are taken from its public `MasterKey`.

use aes256ctr_poly1305aes::Aes256CtrPoly1305Aes;
use aes256ctr_poly1305aes::aead::Aead;
use rand::{Rng, rng};
use rustic_core::repofile::MasterKey;
use sha2::{Digest, Sha256};

/// A master key's 64 bytes: encryption (32) || mac.k (16) || mac.r (16).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RepoKey([u8; 64]);

impl std::fmt::Debug for RepoKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RepoKey(..)")
    }
}

impl RepoKey {
    /// `None` if the parts have the wrong lengths (not a restic key).
    pub(crate) fn from_master(key: &MasterKey) -> Option<Self> {
        Self::from_parts(&key.encrypt, &key.mac.k, &key.mac.r)
    }

    pub(crate) fn from_parts(encrypt: &[u8], k: &[u8], r: &[u8]) -> Option<Self> {
        if (encrypt.len(), k.len(), r.len()) != (32, 16, 16) {
            return None;
        }
        let mut bytes = [0; 64];
        bytes[..32].copy_from_slice(encrypt);
        bytes[32..48].copy_from_slice(k);
        bytes[48..].copy_from_slice(r);
        Some(RepoKey(bytes))
    }

    pub(crate) fn to_master(&self) -> MasterKey {
        // rustic_core does not export `Mac`; its fields are public.
        let mut key = MasterKey::new();
        key.encrypt = self.0[..32].to_vec();
        key.mac.k = self.0[32..48].to_vec();
        key.mac.r = self.0[48..].to_vec();
        key
    }

    fn cipher(&self) -> Aes256CtrPoly1305Aes {
        Aes256CtrPoly1305Aes::new(aes256ctr_poly1305aes::Key::from_slice(&self.0))
    }

    pub(crate) fn encrypt(&self, plain: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; 16];
        rng().fill_bytes(&mut nonce);
        let sealed = self
            .cipher()
            .encrypt(&nonce.into(), plain)
            .expect("AES-CTR with Poly1305 encrypts any length");
        [nonce.as_slice(), &sealed].concat()
    }

    /// `None` when the tag does not match (another key, or damaged data).
    pub(crate) fn decrypt(&self, data: &[u8]) -> Option<Vec<u8>> {
        if data.len() < 32 {
            return None;
        }
        let (nonce, sealed) = data.split_at(16);
        self.cipher()
            .decrypt(aes256ctr_poly1305aes::Nonce::from_slice(nonce), sealed)
            .ok()
    }
}

/// restic's storage id of a file: the SHA-256 of its stored bytes, in hex.
pub(crate) fn storage_id(data: &[u8]) -> String {
    let hash: [u8; 32] = Sha256::digest(data).into();
    rustic_core::Id::new(hash).to_hex().as_str().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_another_key() {
        let key = RepoKey::from_master(&MasterKey::new()).unwrap();
        let sealed = key.encrypt(b"{\"pid\":1}");
        assert_eq!(sealed.len(), 9 + 32);
        assert_eq!(key.decrypt(&sealed).unwrap(), b"{\"pid\":1}");
        let other = RepoKey::from_master(&MasterKey::new()).unwrap();
        assert!(other.decrypt(&sealed).is_none());
        assert_eq!(RepoKey::from_master(&key.to_master()), Some(key));
    }
}
