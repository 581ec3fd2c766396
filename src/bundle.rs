//! `Bundle`: the files of one mapping (target file name → bytes) and their
//! content hash.
//!
//! Invariants: every file name is a plain base name that is safe to create in a
//! target directory (see [`check_file_name`]); the hash covers names and bytes,
//! so two bundles with the same hash publish the same files. `Debug` never
//! prints file contents (a bundle holds a private key), only sizes and hashes.

use std::fmt;
use std::sync::Arc;

/// Target name of the certificate chain.
pub const CERT_FILE: &str = "tls.crt";
/// Target name of the private key.
pub const KEY_FILE: &str = "tls.key";
/// Target name of the optional CA bundle.
pub const CA_FILE: &str = "ca.crt";

/// Kubernetes limits a Secret's or ConfigMap's key to 253 characters.
const MAX_NAME_LEN: usize = 253;

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum BundleError {
    #[error("file name {name:?} is not allowed: {reason}")]
    BadFileName { name: String, reason: &'static str },
}

/// A plain file name as Kubernetes allows for Secret and ConfigMap keys
/// (`[-._a-zA-Z0-9]+`, at most 253), not reserved by certsync (`.`, `..*`):
/// no `/`, NUL or `..`, so a name never leaves the directory it is joined to.
pub fn check_file_name(name: &str) -> Result<(), BundleError> {
    let bad = |reason| {
        Err(BundleError::BadFileName {
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("it is longer than 253 characters");
    }
    if name == "." || name.starts_with("..") {
        return bad("'.' and names starting with '..' are reserved");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return bad("only letters, digits, '-', '_' and '.' are allowed (no '/', NUL or spaces)");
    }
    Ok(())
}

/// The files one mapping publishes, in target-name order; cheap to clone
/// (shared), as it sits in a source's channel and its sync task's state.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Bundle(Arc<Vec<File>>);

#[derive(Clone, PartialEq, Eq)]
struct File {
    name: Box<str>,
    bytes: Box<[u8]>,
    /// Where the file came from ("/etc/kubernetes/pki/apiserver.crt",
    /// "secret ns/name key tls.crt"), for error messages. Not hashed.
    origin: Box<str>,
}

impl Bundle {
    /// Adds (or replaces) a file under its target name.
    pub fn insert(
        &mut self,
        name: &str,
        bytes: Vec<u8>,
        origin: impl Into<String>,
    ) -> Result<(), BundleError> {
        check_file_name(name)?;
        let file = File {
            name: name.into(),
            bytes: bytes.into(),
            origin: origin.into().into(),
        };
        let files = Arc::make_mut(&mut self.0);
        match files.binary_search_by(|f| (*f.name).cmp(name)) {
            Ok(i) => files[i] = file,
            Err(i) => files.insert(i, file),
        }
        Ok(())
    }

    /// Every (name, contents), in name order.
    pub fn files(&self) -> impl ExactSizeIterator<Item = (&str, &[u8])> {
        self.0.iter().map(|f| (&*f.name, &*f.bytes))
    }

    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.0.iter().map(|f| &*f.name)
    }

    fn file(&self, name: &str) -> Option<&File> {
        self.0
            .binary_search_by(|f| (*f.name).cmp(name))
            .ok()
            .map(|i| &self.0[i])
    }

    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.file(name).map(|f| &*f.bytes)
    }

    /// Where `name` came from, or `name` itself when nothing was recorded.
    pub fn origin<'a>(&'a self, name: &'a str) -> &'a str {
        self.file(name).map_or(name, |f| &f.origin)
    }

    pub fn size(&self) -> usize {
        self.0.iter().map(|f| f.bytes.len()).sum()
    }

    /// SHA-256 over every (name, contents) pair in name order, each field
    /// length-prefixed so that no two different bundles can collide by moving
    /// bytes between a name and its contents.
    pub fn hash(&self) -> ContentHash {
        let mut h = ring::digest::Context::new(&ring::digest::SHA256);
        for (name, bytes) in self.files() {
            h.update(&(name.len() as u64).to_be_bytes());
            h.update(name.as_bytes());
            h.update(&(bytes.len() as u64).to_be_bytes());
            h.update(bytes);
        }
        // A SHA-256 digest is 32 bytes: the lengths always match.
        ContentHash(h.finish().as_ref().try_into().unwrap_or_default())
    }
}

/// SHA-256 of `bytes`, by ring (the implementation TLS already links).
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().try_into().unwrap_or_default()
}

impl fmt::Debug for Bundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only sizes: contents include a private key.
        let mut m = f.debug_map();
        for (name, bytes) in self.files() {
            m.entry(&name, &format_args!("<{} bytes>", bytes.len()));
        }
        m.finish()?;
        write!(f, " hash={}", self.hash().short())
    }
}

/// SHA-256 of a bundle's names and contents.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContentHash(pub [u8; 32]);

impl ContentHash {
    /// The first 8 hex digits, used in revision names and logs.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..4])
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({})", self.short())
    }
}

/// How the source's files map to target files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// One source file per target file (the mapping's items).
    Files,
    /// Every key of the object, or every file of the directory, under its
    /// own name (`files=all`).
    All,
    /// One PEM holding chain and key, split into tls.crt and tls.key.
    Combined(String),
}

/// A source file (or key) published under a target name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub source: String,
    pub target: String,
    pub required: bool,
}

impl Item {
    pub fn new(source: &str, target: &str, required: bool) -> Self {
        Self {
            source: source.to_owned(),
            target: target.to_owned(),
            required,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FIPS 180-2's "abc" vector: the hash is SHA-256, whoever computes it
    /// (fingerprints are compared with openssl's and kube-apiserver's).
    #[test]
    fn sha256_is_sha256() {
        assert_eq!(
            hex::encode(sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    fn bundle(pairs: &[(&str, &[u8])]) -> Bundle {
        let mut b = Bundle::default();
        for (n, bytes) in pairs {
            b.insert(n, bytes.to_vec(), *n).unwrap();
        }
        b
    }

    #[test]
    fn file_names() {
        for ok in [
            "tls.crt",
            "apiserver.key",
            "ca-bundle.crt",
            "a_b",
            ".hidden",
        ] {
            assert_eq!(check_file_name(ok), Ok(()), "{ok}");
        }
        let long = "a".repeat(254);
        for bad in ["", ".", "..", "..data", "a/b", "/abs", "a\0b", "a b", &long] {
            assert!(check_file_name(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn hash_depends_on_names_and_bytes() {
        let a = bundle(&[("tls.crt", b"ab"), ("tls.key", b"c")]);
        let same = bundle(&[("tls.key", b"c"), ("tls.crt", b"ab")]);
        let moved = bundle(&[("tls.crt", b"a"), ("tls.key", b"bc")]);
        let renamed = bundle(&[("tls.crt", b"ab"), ("tls.kez", b"c")]);
        assert!(Bundle::default().insert("../x", vec![], "x").is_err());
        assert_eq!(a.hash(), same.hash());
        assert_eq!(a, same, "kept in name order whatever the insertion order");
        let mut replaced = a.clone();
        replaced.insert("tls.crt", b"xy".to_vec(), "x").unwrap();
        assert_eq!(replaced.names().collect::<Vec<_>>(), ["tls.crt", "tls.key"]);
        assert_eq!(replaced.get("tls.crt"), Some(&b"xy"[..]));
        assert_eq!(
            a.get("tls.crt"),
            Some(&b"ab"[..]),
            "a clone's insert leaves the original"
        );
        assert_ne!(a.hash(), moved.hash());
        assert_ne!(a.hash(), renamed.hash());
    }

    #[test]
    fn debug_is_redacted() {
        let b = bundle(&[("tls.key", b"SECRET-KEY-BYTES")]);
        let s = format!("{b:?}");
        assert!(!s.contains("SECRET"), "{s}");
        assert!(s.contains("<16 bytes>"), "{s}");
    }
}
