//! A pair kept in step outside the target (`update-pair=PREFIX`):
//! `PREFIX.crt` and `PREFIX.key` hold the live pair, for what still reads
//! kubeadm's paths (`kubeadm certs check-expiration`, `openssl`, the
//! components after `certsync kubeadm revert`).
//!
//! Invariants:
//! - The directory and every one above it can be changed by root (or
//!   certsync's user) only ([`copy_dir`], [`read_copy`]), else refused,
//!   never repaired.
//! - Each file is replaced beneath that one handle ([`replace_beneath`]),
//!   never written in place; the key is always 0600, the certificate
//!   keeps its mode (0644 when new).
//! - Only a leaf pair is replaced ([`replaceable`]).
//! - Key bytes are never logged or put in an error.

use std::path::{Path, PathBuf};

use cap_std::fs::Dir;

use super::error::WriterError;
use super::revision::{copy_dir, read_copy, replace_beneath};

/// The directory of `prefix`, opened once, the two file names, and the
/// bytes and mode of each file (`None` when absent).
struct Opened {
    dir: Dir,
    dir_path: PathBuf,
    cert: String,
    key: String,
    old_cert: Option<(Vec<u8>, u32)>,
    old_key: Option<(Vec<u8>, u32)>,
}

/// `prefix` opened and read; `Err` is not yet named after the prefix.
fn open(prefix: &Path) -> Result<Opened, WriterError> {
    let stem = prefix
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty() && !n.starts_with('.'))
        .ok_or(WriterError::NoStem)?;
    let dir_path = match prefix.parent() {
        Some(p) if p.is_absolute() => p.to_owned(),
        _ => return Err(WriterError::NotAbsolute),
    };
    let dir = copy_dir(&dir_path)?;
    let read = |name: &str| match read_copy(&dir, name, &dir_path) {
        Ok((bytes, (mode, ..))) => Ok(Some((bytes, mode))),
        Err(WriterError::CopyUnreadable { problem, .. }) if problem.is_not_found() => Ok(None),
        Err(e) => Err(e),
    };
    let (cert, key) = (format!("{stem}.crt"), format!("{stem}.key"));
    let (old_cert, old_key) = (read(&cert)?, read(&key)?);
    Ok(Opened {
        dir,
        dir_path,
        cert,
        key,
        old_cert,
        old_key,
    })
}

/// Checks that `prefix` names a pair certsync may keep in step, read as
/// every update will.
pub fn check_pair(prefix: &Path) -> Result<(), WriterError> {
    open(prefix)
        .and_then(|o| replaceable(&o, None))
        .map_err(|p| WriterError::of("update-pair", prefix, p))
}

/// Refuses to replace what is not a leaf pair: a CA certificate (basic
/// constraints CA:TRUE), by any path (a typo, a bind mount), would lose
/// the CA's key to a leaf's; a `.crt` certsync cannot read cannot be
/// judged not to be one; a `.key` with no `.crt` is a signing key
/// (kubeadm's `sa.key`).
fn replaceable(o: &Opened, new_key: Option<&[u8]>) -> Result<(), WriterError> {
    let Some((bytes, _)) = &o.old_cert else {
        return match o.old_key {
            Some(_) => Err(WriterError::LoneKey {
                key: o.key.clone(),
                cert: o.cert.clone(),
            }),
            None => Ok(()),
        };
    };
    let unreadable = || WriterError::NotOneCertificate {
        cert: o.cert.clone(),
    };
    let [der] = crate::pem::certificates(bytes)
        .ok()
        .and_then(|all| <[Vec<u8>; 1]>::try_from(all).ok())
        .ok_or_else(unreadable)?;
    let c = crate::x509::Certificate::read(&der).map_err(|_| unreadable())?;
    let is_ca = match c.basic_constraints() {
        Ok(bc) => bc.is_some_and(|(ca, _)| ca),
        Err(_) => return Err(unreadable()),
    };
    // A CA without CA:TRUE is a CA all the same: a version 1 certificate
    // (openssl's classic CA) or one that may sign certificates; either
    // named by update-pair would lose its key to a leaf's too.
    let signs = c
        .key_usage()
        .ok()
        .flatten()
        .is_some_and(|ku| ku & crate::x509::KEY_CERT_SIGN != 0);
    if is_ca || signs || !c.is_v3() {
        return Err(WriterError::Ca);
    }
    // A key that is not the certificate's is someone else's, unless it is the
    // key certsync writes (a replacement cut short). Judged at updates only:
    // an interrupted replacement must not keep certsync from starting.
    if let (Some((old_key, _)), Some(new_key)) = (&o.old_key, new_key) {
        let ours = old_key.as_slice() == new_key;
        if !ours && !crate::validate::key_matches(bytes, old_key).unwrap_or(false) {
            return Err(WriterError::OtherKey {
                key: o.key.clone(),
                cert: o.cert.clone(),
            });
        }
    }
    Ok(())
}

/// What bringing a copy of the live pair (`update-pair=`,
/// `update-kubeconfig=`) in step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyUpdate {
    /// It held the pair already: nothing was written.
    Unchanged,
    /// It was rewritten; `before` is the certificate (PEM) it held, if any
    /// (the caller tells whether another wrote it: `kubeadm certs renew`).
    Replaced { before: Option<Vec<u8>> },
}

/// Makes `PREFIX.crt` and `PREFIX.key` hold `cert` and `key` (PEM).
pub fn update_pair(prefix: &Path, cert: &[u8], key: &[u8]) -> Result<CopyUpdate, WriterError> {
    let mut o = open(prefix)
        .and_then(|o| replaceable(&o, Some(key)).map(|()| o))
        .map_err(|p| WriterError::of("update-pair", prefix, p))?;
    let (old_cert, old_key) = (o.old_cert.take(), o.old_key.take());
    let same = |old: &Option<(Vec<u8>, u32)>, want: &[u8]| {
        old.as_ref().is_some_and(|(b, _)| b.as_slice() == want)
    };
    let key_ok = same(&old_key, key) && old_key.as_ref().is_some_and(|(_, m)| m & 0o077 == 0);
    if key_ok && same(&old_cert, cert) {
        return Ok(CopyUpdate::Unchanged);
    }
    // A new pair certificate first (an interrupted write never leaves a
    // lone key, refused above); an existing one key first, as kubeadm does.
    let new_pair = old_cert.is_none();
    let before = old_cert.as_ref().map(|(b, _)| b.clone());
    let write_cert = |old: Option<(Vec<u8>, u32)>| -> Result<(), WriterError> {
        let mode = old.map_or(0o644, |(_, m)| m & 0o7777);
        replace_beneath(&o.dir, &o.cert, mode, None, cert, &o.dir_path)
    };
    let cert_differs = !same(&old_cert, cert);
    if new_pair {
        write_cert(None)?;
    }
    if !key_ok {
        replace_beneath(&o.dir, &o.key, 0o600, None, key, &o.dir_path)?;
    }
    if cert_differs && !new_pair {
        write_cert(old_cert)?;
    }
    Ok(CopyUpdate::Replaced { before })
}
