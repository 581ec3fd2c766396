//! Kubeconfigs people and kubeadm read (`admin.conf`): the current
//! context's user carries the mapping's live pair as embedded data,
//! rewritten after each new pair (`update-kubeconfig=PATH`).
//!
//! Invariants:
//! - The file and every directory above it can be changed by root (or
//!   certsync's user) only ([`copy_dir`], [`read_copy`]), else refused.
//!   The file is read and replaced beneath that one handle
//!   ([`replace_beneath`], its owner and mode kept).
//! - Everything but the two data fields of that one user is kept as parsed
//!   (the order of keys too); a user who authenticates any other way too
//!   is refused: embedding data beside it would change what the file means.
//! - A CA renewal changes the CA data where it stands in the text, every
//!   other byte kept ([`with_ca_data`]), or is refused.
//! - Key bytes are never logged or put in an error.

use std::path::Path;

use cap_std::fs::Dir;

use super::error::{CA_DATA, CERT_DATA, KEY_DATA, WriterError};
use super::pair::CopyUpdate;
use super::revision::{FileMeta, copy_dir, read_copy, replace_beneath};

use base64::Engine as _;
use serde_yaml_ng::{Mapping, Value};

const KUBECONFIG: &str = "update-kubeconfig";

struct Opened {
    dir: Dir,
    name: String,
    meta: FileMeta,
    text: String,
    doc: Value,
    /// Where the current context's user is in `users`.
    user: usize,
}

/// Checks that `path` is a kubeconfig certsync may keep updated, read as
/// every update will.
pub fn check_kubeconfig(path: &Path) -> Result<(), WriterError> {
    open(path).map(|_| ())
}

/// The certificate and key (PEM) embedded for the current context's user
/// of a kubeconfig's text, for `certsync check` (as `kubeadm certs
/// check-expiration` reads admin.conf). `Err` says why there is none.
pub fn embedded_pair(text: &str) -> Result<(Vec<u8>, Option<Vec<u8>>), WriterError> {
    let doc = parse(text)?;
    let (_, user) = current(&doc, "user")?;
    let u = named(&doc, "users", user)?;
    let cert =
        user_data(&doc, u, CERT_DATA)?.ok_or_else(|| WriterError::NoCertificate(user.into()))?;
    Ok((cert, user_data(&doc, u, KEY_DATA)?))
}

/// Makes the current context's user of `path` carry `cert` and `key`.
pub fn update_kubeconfig(path: &Path, cert: &[u8], key: &[u8]) -> Result<CopyUpdate, WriterError> {
    let mut o = open(path)?;
    let held = |field| user_data(&o.doc, o.user, field).ok().flatten();
    let before = held(CERT_DATA);
    if before.as_deref() == Some(cert) && held(KEY_DATA).as_deref() == Some(key) {
        return Ok(CopyUpdate::Unchanged);
    }
    let b64 = |b: &[u8]| Value::String(base64::engine::general_purpose::STANDARD.encode(b));
    let user = user_fields(&mut o.doc, o.user)
        .ok_or_else(|| WriterError::of(KUBECONFIG, path, WriterError::UserVanished))?;
    user.insert(CERT_DATA.into(), b64(cert));
    user.insert(KEY_DATA.into(), b64(key));
    let text = serde_yaml_ng::to_string(&o.doc)
        .map_err(|e| WriterError::of(KUBECONFIG, path, WriterError::Unwritable(e.to_string())))?;
    write_back(&o, path, &text)?;
    Ok(CopyUpdate::Replaced { before })
}

#[derive(Debug, Clone, Copy)]
pub enum CaCluster {
    Current,
    /// Its one cluster (`cluster-info` names no current context); another
    /// count is refused, never picked from.
    One,
}

/// The CA data (decoded) of `cluster` in a kubeconfig's text.
pub fn ca_data(text: &str, cluster: CaCluster) -> Result<Option<Vec<u8>>, WriterError> {
    let doc = parse(text)?;
    let c = cluster_index(&doc, cluster)?;
    decode(doc["clusters"][c]["cluster"].get(CA_DATA), CA_DATA)
}

/// Makes the current context's cluster of `path` trust `ca`
/// ([`with_ca_data`]).
pub fn update_kubeconfig_ca(path: &Path, ca: &[u8]) -> Result<CopyUpdate, WriterError> {
    let o = open(path)?;
    let Some(text) = with_ca_data(&o.text, CaCluster::Current, ca)
        .map_err(|p| WriterError::of(KUBECONFIG, path, p))?
    else {
        return Ok(CopyUpdate::Unchanged);
    };
    write_back(&o, path, &text)?;
    Ok(CopyUpdate::Replaced { before: None })
}

/// `text`, a kubeconfig, with the CA data of `cluster` set to `ca` (PEM),
/// every other byte kept; `None` when it already holds exactly that: the
/// one way certsync changes what a kubeconfig trusts.
///
/// Refused: a cluster that names its CA by file or skips verification
/// (embedded data beside either would change what the file means); CA data
/// not written once as one plain value (which text to replace would be a
/// guess, and a wrong one changes another field). The new text must parse
/// as the kubeconfig with that one value changed. A cluster without CA
/// data gets it, the document as parsed.
pub fn with_ca_data(
    text: &str,
    cluster: CaCluster,
    ca: &[u8],
) -> Result<Option<String>, WriterError> {
    let mut doc = parse(text)?;
    let c = cluster_index(&doc, cluster)?;
    let fields = doc["clusters"][c]
        .get_mut("cluster")
        .and_then(Value::as_mapping_mut)
        .ok_or(WriterError::ClusterHasNoFields)?;
    for other in ["certificate-authority", "insecure-skip-tls-verify"] {
        if fields.contains_key(other) {
            return Err(WriterError::ClusterNamesCa(other));
        }
    }
    let new = base64::engine::general_purpose::STANDARD.encode(ca);
    let Some(held) = decode(fields.get(CA_DATA), CA_DATA)? else {
        fields.insert(CA_DATA.into(), Value::String(new));
        return serde_yaml_ng::to_string(&doc)
            .map(Some)
            .map_err(|e| WriterError::Unwritable(e.to_string()));
    };
    if held == ca {
        return Ok(None);
    }
    let old = written_once(text, fields[CA_DATA].as_str().unwrap_or_default(), CA_DATA)?;
    let edited = text.replacen(old, &new, 1);
    fields.insert(CA_DATA.into(), Value::String(new));
    if parse(&edited)? != doc {
        return Err(WriterError::NotOnce(CA_DATA));
    }
    Ok(Some(edited))
}

/// Where `value` (trimmed, not empty) of `field` stands in the kubeconfig `text`, if exactly
/// once: the text to replace to change it ([`with_ca_data`]); else refused.
pub fn written_once<'a>(
    text: &'a str,
    value: &str,
    field: &'static str,
) -> Result<&'a str, WriterError> {
    let value = value.trim();
    match text.match_indices(value).collect::<Vec<_>>()[..] {
        [(i, _)] if !value.is_empty() => Ok(&text[i..i + value.len()]),
        _ => Err(WriterError::NotOnce(field)),
    }
}

fn parse(text: &str) -> Result<Value, WriterError> {
    crate::files::parse_yaml(text).map_err(|e| WriterError::NotKubeconfig(e.to_string()))
}

fn cluster_index(doc: &Value, cluster: CaCluster) -> Result<usize, WriterError> {
    if let CaCluster::One = cluster {
        return match entries(doc, "clusters")?.len() {
            1 => Ok(0),
            n => Err(WriterError::Clusters(n)),
        };
    }
    let (_, name) = current(doc, "cluster")?;
    named(doc, "clusters", name)
}

/// The current context's name and the name it gives its `what` (`user`,
/// `cluster`), neither empty.
fn current<'a>(doc: &'a Value, what: &'static str) -> Result<(&'a str, &'a str), WriterError> {
    let context = doc.get("current-context").and_then(Value::as_str);
    let context = context
        .filter(|c| !c.is_empty())
        .ok_or(WriterError::NoCurrentContext)?;
    let c = named(doc, "contexts", context)?;
    let name = doc["contexts"][c]["context"][what].as_str();
    let name = name.filter(|n| !n.is_empty());
    let name = name.ok_or_else(|| WriterError::ContextNamesNo {
        context: context.into(),
        what,
    })?;
    Ok((context, name))
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn write_back(o: &Opened, path: &Path, text: &str) -> Result<(), WriterError> {
    let (mode, uid, gid, _) = o.meta;
    replace_beneath(
        &o.dir,
        &o.name,
        mode,
        Some((uid, gid)),
        text.as_bytes(),
        parent(path),
    )
}

fn open(path: &Path) -> Result<Opened, WriterError> {
    let opened = || {
        let name = path.file_name().and_then(|n| n.to_str());
        let name = name.ok_or(WriterError::NoFileName)?.to_owned();
        let dir = copy_dir(parent(path))?;
        let (bytes, meta) = read_copy(&dir, &name, parent(path))?;
        let text = String::from_utf8(bytes).map_err(|_| WriterError::NotUtf8)?;
        let doc = parse(&text)?;
        let user = current_user(&doc)?;
        Ok(Opened {
            dir,
            name,
            meta,
            text,
            doc,
            user,
        })
    };
    opened().map_err(|p| WriterError::of(KUBECONFIG, path, p))
}

/// The index of the one entry of `list` named `name`.
fn named(doc: &Value, list: &str, name: &str) -> Result<usize, WriterError> {
    let mut found = entries(doc, list)?
        .iter()
        .enumerate()
        .filter(|(_, e)| e.get("name").and_then(Value::as_str) == Some(name));
    match (found.next(), found.next()) {
        (Some((i, _)), None) => Ok(i),
        (None, _) => Err(WriterError::NoEntry {
            list: list.into(),
            name: name.into(),
        }),
        (Some(_), Some(_)) => Err(WriterError::Twice {
            list: list.into(),
            name: name.into(),
        }),
    }
}

fn entries<'a>(doc: &'a Value, list: &str) -> Result<&'a Vec<Value>, WriterError> {
    match doc.get(list) {
        Some(Value::Sequence(s)) => Ok(s),
        None | Some(Value::Null) => Err(WriterError::NoList(list.into())),
        Some(_) => Err(WriterError::NotList(list.into())),
    }
}

/// The index in `users` of the current context's user, if it
/// authenticates by embedded certificate data only (or nothing yet).
fn current_user(doc: &Value) -> Result<usize, WriterError> {
    if !doc.is_mapping() {
        return Err(WriterError::NotMapping);
    }
    let (context, user_name) = current(doc, "user")?;
    let u = named(doc, "users", user_name).map_err(|e| WriterError::OfUser {
        user: user_name.into(),
        context: context.into(),
        problem: Box::new(e),
    })?;
    let fields = match doc["users"][u].get("user") {
        Some(Value::Mapping(m)) => m.clone(),
        None | Some(Value::Null) => Mapping::new(),
        Some(_) => return Err(WriterError::UserNotMapping(user_name.into())),
    };
    for key in fields.keys() {
        let key = key.as_str().unwrap_or("(a key that is not a string)");
        if key != CERT_DATA && key != KEY_DATA {
            return Err(WriterError::OtherAuth {
                user: user_name.into(),
                context: context.into(),
                key: key.into(),
            });
        }
    }
    Ok(u)
}

fn user_fields(doc: &mut Value, u: usize) -> Option<&mut Mapping> {
    let entry = doc.get_mut("users")?.get_mut(u)?.as_mapping_mut()?;
    let user = entry
        .entry(Value::String("user".into()))
        .or_insert(Value::Null);
    if user.is_null() {
        *user = Value::Mapping(Mapping::new());
    }
    user.as_mapping_mut()
}

fn user_data(doc: &Value, u: usize, field: &str) -> Result<Option<Vec<u8>>, WriterError> {
    decode(doc["users"][u]["user"].get(field), field)
}

fn decode(value: Option<&Value>, field: &str) -> Result<Option<Vec<u8>>, WriterError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => base64_data(field, s).map(Some),
        Some(_) => Err(WriterError::NotString(field.into())),
    }
}

/// `data`, the value of a kubeconfig's `field`, decoded from base64 (trimmed).
pub fn base64_data(field: &str, data: &str) -> Result<Vec<u8>, WriterError> {
    (base64::engine::general_purpose::STANDARD.decode(data.trim()))
        .map_err(|_| WriterError::NotBase64(field.into()))
}

#[cfg(test)]
#[path = "kubeconfig_tests.rs"]
pub(super) mod tests;
