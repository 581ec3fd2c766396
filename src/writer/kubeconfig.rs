//! Kubeconfigs people and kubeadm read (`admin.conf`, `super-admin.conf`):
//! the user of the current context carries the mapping's live pair as
//! embedded data (`client-certificate-data`, `client-key-data`), which
//! certsync rewrites after each new pair (`update-kubeconfig=PATH`).
//! client-go re-reads a certificate given as a *file*, never embedded data,
//! but a person's `kubectl` and kubeadm read the file anew each time.
//!
//! Invariants:
//! - The file and every directory above it can be changed by root (or
//!   certsync's user) only; the file is certsync's user's, a regular file
//!   (checked on the opened descriptor, never followed), not writable by
//!   group or others. Anything else is refused, never repaired.
//! - The directory is opened once; the file is read, the temporary file
//!   made (`O_EXCL`, 0600, then the old owner and mode, written, fsynced)
//!   and renamed over the file beneath that handle; then the directory is
//!   fsynced. The path never names a missing or half-written file.
//! - Everything but the two data fields of that one user is kept as
//!   parsed (clusters, contexts, other users, preferences, the order of
//!   keys); a user who authenticates any other way too (a token, exec, an
//!   auth provider, a password, a certificate given as a file) is refused:
//!   embedding data beside it would change what the file means.
//! - Key bytes are never logged or put in an error.

use super::*;

use base64::Engine as _;
use serde_yaml_ng::{Mapping, Value};

/// The two fields certsync writes; the only ones the user may have.
const CERT_DATA: &str = "client-certificate-data";
const KEY_DATA: &str = "client-key-data";
/// The current cluster's CA data, which adopt sets once a CA is renewed.
const CA_DATA: &str = "certificate-authority-data";

/// A kubeconfig as read beneath its directory's handle.
struct Opened {
    dir: Dir,
    name: String,
    /// Mode, uid, gid of the file.
    meta: revision::FileMeta,
    doc: Value,
    /// Where the current context's user is in `users`.
    user: usize,
}

fn refused(path: &Path, problem: impl Into<String>) -> WriterError {
    WriterError::Kubeconfig {
        path: path.to_owned(),
        problem: problem.into(),
    }
}

/// Checks that `path` is a kubeconfig certsync may keep updated (see the
/// module's invariants), reading it as it will on every update.
pub fn check_kubeconfig(path: &Path) -> Result<(), WriterError> {
    open(path).map(|_| ())
}

/// The certificate and key (PEM) embedded for the current context's user,
/// for `certsync check` (as `kubeadm certs check-expiration` reads
/// admin.conf): read only, so none of the rules for writing apply, but
/// still a regular file, capped, through the one YAML reader. `Err` says
/// why there is no certificate to show.
pub fn kubeconfig_certificate(path: &Path) -> Result<(Vec<u8>, Option<Vec<u8>>), String> {
    let text = crate::files::read_text(path, MAX_BUNDLE_SIZE as u64).map_err(|e| e.problem())?;
    embedded_pair(&text)
}

/// [`kubeconfig_certificate`] of a kubeconfig's text, read by the caller
/// (`check` reads it as it reads a certificate: walked as written).
pub fn embedded_pair(text: &str) -> Result<(Vec<u8>, Option<Vec<u8>>), String> {
    let doc: Value =
        crate::files::parse_yaml(text).map_err(|e| format!("is not a kubeconfig: {e}"))?;
    let context = doc
        .get("current-context")
        .and_then(Value::as_str)
        .ok_or("has no current-context")?;
    let c = named(&doc, "contexts", context)?;
    let user = doc["contexts"][c]["context"]["user"]
        .as_str()
        .ok_or_else(|| format!("context {context:?} names no user"))?;
    let u = named(&doc, "users", user)?;
    let data = |field| decode(doc["users"][u]["user"].get(field), field);
    let cert = data(CERT_DATA)?
        .ok_or_else(|| format!("user {user:?} has no embedded client certificate ({CERT_DATA})"))?;
    Ok((cert, data(KEY_DATA)?))
}

/// Makes the current context's user of `path` carry `cert` and `key`
/// (PEM), unless it already does.
pub fn update_kubeconfig(path: &Path, cert: &[u8], key: &[u8]) -> Result<CopyUpdate, WriterError> {
    let mut o = open(path)?;
    let same = |field, want: &[u8]| embedded(&o, field).is_ok_and(|d| d.as_deref() == Some(want));
    if same(CERT_DATA, cert) && same(KEY_DATA, key) {
        return Ok(CopyUpdate::Unchanged);
    }
    let before = embedded(&o, CERT_DATA).ok().flatten();
    let b64 = |b: &[u8]| Value::String(base64::engine::general_purpose::STANDARD.encode(b));
    let user = user_fields(&mut o.doc, o.user).ok_or_else(|| refused(path, "the user vanished"))?;
    // Replaced in place: an existing key keeps its position.
    user.insert(CERT_DATA.into(), b64(cert));
    user.insert(KEY_DATA.into(), b64(key));
    write_back(&o, path)?;
    Ok(CopyUpdate::Replaced { before })
}

/// The CA data (`certificate-authority-data`, decoded) of the current
/// context's cluster in the text of the kubeconfig at `path`, `None` when
/// it has none.
pub fn embedded_ca(path: &Path, text: &str) -> Result<Option<Vec<u8>>, WriterError> {
    let doc: Value = crate::files::parse_yaml(text)
        .map_err(|e| refused(path, format!("is not a kubeconfig: {e}")))?;
    let c = current_cluster(&doc).map_err(|p| refused(path, p))?;
    decode(doc["clusters"][c]["cluster"].get(CA_DATA), CA_DATA).map_err(|p| refused(path, p))
}

/// Makes the current context's cluster of `path` trust `ca` (PEM, the
/// CA's certificates) as embedded data, unless it already does: the CA's
/// renewal put beside the certificate a kubeconfig was made with, before
/// that one ends. Refused where the cluster names its CA by file (the
/// file is what to update) or skips verification; everything else is
/// kept as parsed, as [`update_kubeconfig`] keeps it.
pub fn update_kubeconfig_ca(path: &Path, ca: &[u8]) -> Result<CopyUpdate, WriterError> {
    let mut o = open(path)?;
    let c = current_cluster(&o.doc).map_err(|p| refused(path, p))?;
    let cluster = o.doc["clusters"][c]
        .get_mut("cluster")
        .and_then(Value::as_mapping_mut)
        .ok_or_else(|| refused(path, "its current cluster has no fields"))?;
    for other in ["certificate-authority", "insecure-skip-tls-verify"] {
        if cluster.contains_key(other) {
            return Err(refused(
                path,
                format!(
                    "its current cluster has {other}; certsync embeds CA data only where kubeadm did"
                ),
            ));
        }
    }
    let before = cluster.get(CA_DATA).cloned();
    let want = Value::String(base64::engine::general_purpose::STANDARD.encode(ca));
    if before.as_ref() == Some(&want) {
        return Ok(CopyUpdate::Unchanged);
    }
    cluster.insert(CA_DATA.into(), want);
    write_back(&o, path)?;
    Ok(CopyUpdate::Replaced { before: None })
}

/// The index in `clusters` of the current context's cluster.
fn current_cluster(doc: &Value) -> Result<usize, String> {
    let context = doc
        .get("current-context")
        .and_then(Value::as_str)
        .ok_or("has no current-context")?;
    let c = named(doc, "contexts", context)?;
    let cluster = doc["contexts"][c]["context"]["cluster"]
        .as_str()
        .ok_or_else(|| format!("context {context:?} names no cluster"))?;
    named(doc, "clusters", cluster)
}

/// The parsed document written back over the file beneath its
/// directory's handle, with its owner and mode.
fn write_back(o: &Opened, path: &Path) -> Result<(), WriterError> {
    let text = serde_yaml_ng::to_string(&o.doc)
        .map_err(|e| refused(path, format!("cannot write it as YAML: {e}")))?;
    let (mode, uid, gid) = o.meta;
    let dir_path = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    replace_file_in(
        &o.dir,
        &o.name,
        mode,
        Some((uid, gid)),
        text.as_bytes(),
        dir_path,
    )
}

fn open(path: &Path) -> Result<Opened, WriterError> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| refused(path, "names no file"))?
        .to_owned();
    crate::files::only_root_may_change(path).map_err(|p| {
        refused(
            path,
            format!(
                "{p}, who could swap the file certsync writes the key into; keep it and its \
                 directories owned by root and writable by their owner only"
            ),
        )
    })?;
    let dir_path = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = Dir::open_ambient_dir(dir_path, cap_std::ambient_authority())
        .ctx("open directory", dir_path)?;
    let (bytes, meta) =
        read_file_meta(&dir, &name, path).map_err(|e| refused(path, e.problem()))?;
    let (mode, uid, _) = meta;
    let euid = nix::unistd::geteuid().as_raw();
    if uid != euid {
        return Err(refused(
            path,
            format!("is owned by uid {uid}, not certsync's user (uid {euid})"),
        ));
    }
    if mode & 0o022 != 0 {
        return Err(refused(
            path,
            format!("mode {mode:04o} lets group or others write it"),
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| refused(path, "is not UTF-8 text"))?;
    let doc: Value = crate::files::parse_yaml(&text)
        .map_err(|e| refused(path, format!("is not a kubeconfig: {e}")))?;
    let user = current_user(&doc).map_err(|p| refused(path, p))?;
    Ok(Opened {
        dir,
        name,
        meta,
        doc,
        user,
    })
}

/// The one entry of `list` (a kubeconfig's `contexts` or `users`) named
/// `name`, by index.
fn named(doc: &Value, list: &str, name: &str) -> Result<usize, String> {
    let entries = match doc.get(list) {
        Some(Value::Sequence(s)) => s,
        None | Some(Value::Null) => return Err(format!("has no {list}")),
        Some(_) => return Err(format!("{list} is not a list")),
    };
    let mut found = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.get("name").and_then(Value::as_str) == Some(name));
    match (found.next(), found.next()) {
        (Some((i, _)), None) => Ok(i),
        (None, _) => Err(format!("has no entry {name:?} in {list}")),
        (Some(_), Some(_)) => Err(format!("names {name:?} twice in {list}")),
    }
}

/// The index in `users` of the current context's user, once that user is
/// known to authenticate by embedded client certificate data only (or by
/// nothing yet).
fn current_user(doc: &Value) -> Result<usize, String> {
    if !doc.is_mapping() {
        return Err("is not a YAML mapping".into());
    }
    let context = match doc.get("current-context") {
        Some(Value::String(s)) if !s.is_empty() => s,
        _ => return Err("has no current-context, so no user is the one to update".into()),
    };
    let c = named(doc, "contexts", context)?;
    let user_name = doc["contexts"][c]
        .get("context")
        .and_then(|c| c.get("user"))
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| format!("context {context:?} names no user"))?;
    let u = named(doc, "users", user_name)
        .map_err(|e| format!("the user {user_name:?} of context {context:?}: {e}"))?;
    let fields = match doc["users"][u].get("user") {
        Some(Value::Mapping(m)) => m.clone(),
        None | Some(Value::Null) => Mapping::new(),
        Some(_) => return Err(format!("user {user_name:?} is not a mapping")),
    };
    for key in fields.keys() {
        let key = key.as_str().unwrap_or("(a key that is not a string)");
        let how = match key {
            CERT_DATA | KEY_DATA => continue,
            "client-certificate" | "client-key" => format!(
                "gives its client {} as a file ({key}); replacing a file reference with \
                 embedded data would change what the file means: point certsync's \
                 consumers at the target's files instead, or remove {key}",
                if key == "client-key" {
                    "key"
                } else {
                    "certificate"
                }
            ),
            "token" | "tokenFile" => format!("authenticates with a token ({key}) too"),
            "exec" => "authenticates with an exec plugin too".into(),
            "auth-provider" => "authenticates with an auth provider too".into(),
            "username" | "password" => format!("authenticates with a password ({key}) too"),
            other => format!("has {other:?}, which certsync does not know to keep meaningful"),
        };
        return Err(format!(
            "user {user_name:?} (of current-context {context:?}) {how}; refusing to embed a \
             certificate beside it"
        ));
    }
    Ok(u)
}

/// The user's fields, made a mapping if the user had none.
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

/// The decoded bytes of `field` of the current user, `None` when absent.
fn embedded(o: &Opened, field: &str) -> Result<Option<Vec<u8>>, String> {
    decode(
        o.doc["users"][o.user]
            .get("user")
            .and_then(|u| u.get(field)),
        field,
    )
}

/// A base64 data field's bytes, `None` when absent.
fn decode(value: Option<&Value>, field: &str) -> Result<Option<Vec<u8>>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .map(Some)
            .map_err(|_| format!("{field} is not base64")),
        Some(_) => Err(format!("{field} is not a string")),
    }
}

#[cfg(test)]
#[path = "kubeconfig_tests.rs"]
mod tests;
