//! What the writer refuses or fails at.

use std::io;
use std::path::{Path, PathBuf};

use super::layout::RevisionProblem;
use crate::beneath::PathError;

/// The two fields certsync writes in a kubeconfig's user.
pub(super) const CERT_DATA: &str = "client-certificate-data";
pub(super) const KEY_DATA: &str = "client-key-data";
pub(super) const CA_DATA: &str = "certificate-authority-data";

#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("target {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error(
        "target {target} is now {now}, not {was} as when certsync started (a symlink on its \
         path was replaced?); refusing to write there"
    )]
    Moved {
        target: PathBuf,
        was: PathBuf,
        now: PathBuf,
    },
    #[error(
        "target {target} is no longer the directory certsync opened at start (inode {was}, now \
         {now}: renamed away and made again, by hand or by whoever may write the directory \
         above it); refusing to write there; restart certsync to adopt a directory made by hand"
    )]
    Replaced { target: PathBuf, was: u64, now: u64 },
    #[error(
        "target {target} (owner {uid}, mode {mode:04o}) may now be changed by a user other than \
         root and certsync's, who could plant or swap what certsync writes and obeys there; \
         refusing to publish into it (the last good files stay); make it writable by its owner \
         only (chmod go-w) and root's"
    )]
    OthersMayWrite {
        target: PathBuf,
        uid: u32,
        mode: u32,
    },
    #[error("{}: {problem}; refusing to write there", dir.display())]
    Unowned {
        dir: PathBuf,
        #[source]
        problem: PathError,
    },
    #[error("{path} is {what}; refusing to replace it")]
    Foreign { path: PathBuf, what: &'static str },
    /// What a refusal concerns: `what` (`target` for a rollback,
    /// `update-kubeconfig`, `update-pair`) and its path.
    #[error("{what} {path}: {problem}")]
    Of {
        what: &'static str,
        path: PathBuf,
        #[source]
        problem: Box<WriterError>,
    },
    /// Another process held the write lock (`held_by`, as its lock file
    /// says) until shutdown, or for `after` (`--once-timeout`).
    #[error(
        "target {target}: waiting for the write lock: {} is held by {held_by}; {}; nothing was \
         written",
        lock.display(),
        match after {
            None => "stopped waiting for it at shutdown".to_owned(),
            Some(d) => format!("gave up after {} (--once-timeout)", humantime::format_duration(*d)),
        }
    )]
    LockWait {
        target: PathBuf,
        lock: PathBuf,
        held_by: String,
        after: Option<std::time::Duration>,
    },
    #[error(
        "target {target} is already managed by another certsync (pid {pid}); \
         two daemons on one target would undo each other's work"
    )]
    Owned { target: PathBuf, pid: String },
    #[error(
        "target {target} is gone, and {path}: {problem}; certsync makes a missing target only \
         through directories it opens without following links, owned by root or itself and \
         written by no one else; nothing was made"
    )]
    Way {
        target: PathBuf,
        path: PathBuf,
        problem: String,
    },

    // Why a kubeconfig is refused; rendered after its path.
    #[error("names no file")]
    NoFileName,
    #[error("is not UTF-8 text")]
    NotUtf8,
    #[error("is not a kubeconfig: {0}")]
    NotKubeconfig(String),
    #[error("is not a YAML mapping")]
    NotMapping,
    #[error("has no current-context, so no user or cluster is the one meant")]
    NoCurrentContext,
    #[error("context {context:?} names no {what}")]
    ContextNamesNo { context: String, what: &'static str },
    #[error("has no {0}")]
    NoList(String),
    #[error("{0} is not a list")]
    NotList(String),
    #[error("has no entry {name:?} in {list}")]
    NoEntry { list: String, name: String },
    #[error("names {name:?} twice in {list}")]
    Twice { list: String, name: String },
    #[error("the user {user:?} of context {context:?}: {problem}")]
    OfUser {
        user: String,
        context: String,
        #[source]
        problem: Box<WriterError>,
    },
    #[error("user {0:?} is not a mapping")]
    UserNotMapping(String),
    #[error(
        "user {user:?} (of current-context {context:?}) {}; refusing to embed a certificate \
         beside it",
        authenticates_by(key)
    )]
    OtherAuth {
        user: String,
        context: String,
        /// The user's field that authenticates another way.
        key: String,
    },
    #[error("user {0:?} has no embedded client certificate ({CERT_DATA})")]
    NoCertificate(String),
    #[error("{0} is not base64")]
    NotBase64(String),
    #[error("{0} is not a string")]
    NotString(String),
    #[error("the user vanished")]
    UserVanished,
    #[error("its cluster has no fields")]
    ClusterHasNoFields,
    #[error("its cluster has {0}; certsync embeds CA data only where kubeadm did")]
    ClusterNamesCa(&'static str),
    #[error("has {0} clusters; kubeadm writes one")]
    Clusters(usize),
    #[error("its cluster has no {CA_DATA}")]
    NoCaData,
    /// Not one plain value written once (split across lines, YAML anchors, also in a comment
    /// or another field): the value is replaced where it stands in the text, and replacing
    /// other text could change another field.
    #[error("its {0} is not written once as one plain value")]
    NotOnce(&'static str),
    #[error("cannot write it as YAML: {0}")]
    Unwritable(String),

    // Why a pair outside the target is refused (after [`WriterError::Of`]).
    #[error("names no file stem (e.g. /etc/kubernetes/pki/apiserver)")]
    NoStem,
    #[error("is not an absolute path")]
    NotAbsolute,

    // Why a copy outside the target, its directory or a `file` in it, is
    // refused; rendered after the copy.
    #[error(
        "{0}, who could swap the files certsync writes the key into; keep the directory and those \
         above it owned by root and writable by their owner only"
    )]
    DirOthersMayChange(#[source] PathError),
    #[error("{file}: {}", problem.problem())]
    CopyUnreadable {
        file: String,
        #[source]
        problem: PathError,
    },
    #[error(
        "{file} is owned by uid {uid} with mode {mode:04o}; certsync replaces only a file of its \
         own user (uid {euid}) that group and others cannot write"
    )]
    CopyNotOwn {
        file: String,
        uid: u32,
        mode: u32,
        euid: u32,
    },
    #[error(
        "{key} exists with no {cert} beside it: a lone key is a signing key (a service-account or \
         CA key), not a pair certsync keeps"
    )]
    LoneKey { key: String, cert: String },
    #[error(
        "{cert} is not one certificate certsync can read, so it cannot be judged not to be a \
         CA's; certsync replaces only a leaf pair"
    )]
    NotOneCertificate { cert: String },
    #[error(
        "its .crt is a CA certificate (CA:TRUE, keyCertSign, or version 1 or 2); certsync never \
         writes over a CA"
    )]
    Ca,
    #[error(
        "{key} is not the key of {cert} (nor the key certsync writes): another's key, never \
         replaced"
    )]
    OtherKey { key: String, cert: String },

    // Why a rollback is refused or a pin not kept; rendered after the target.
    #[error("the rollback pin names content no revision on disk holds; remove ..pin")]
    PinnedContentGone,
    #[error("no live revision to roll back from")]
    NoLiveRevision,
    #[error("revision {0} is not in history (see `certsync revisions`)")]
    NotInHistory(u64),
    #[error("no earlier revision in history")]
    NoHistory,
    #[error("revision {number}: {problem}")]
    RevisionUntrusted {
        number: u64,
        #[source]
        problem: RevisionProblem,
    },
    #[error("refusing revision {number}: {problem}")]
    Refused {
        number: u64,
        #[source]
        problem: crate::validate::ValidationError,
    },
    /// Why `..pin` is not obeyed (it is removed): not a regular file, not
    /// certsync's own, or a hard link; the text names it.
    #[error("{0}")]
    Pin(String),
}

impl WriterError {
    /// `problem`, said of `what` at `path` ([`WriterError::Of`]).
    pub(super) fn of(what: &'static str, path: &Path, problem: Self) -> Self {
        let path = path.to_owned();
        Self::Of {
            what,
            path,
            problem: Box::new(problem),
        }
    }
}

/// How a user's field `key` authenticates beside the embedded certificate.
fn authenticates_by(key: &str) -> String {
    match key {
        "client-certificate" | "client-key" => format!(
            "gives its client {} as a file ({key}); replacing a file reference with embedded data \
             would change what the file means: point certsync's consumers at the target's files \
             instead, or remove {key}",
            key.trim_start_matches("client-")
        ),
        "token" | "tokenFile" => format!("authenticates with a token ({key}) too"),
        "exec" => "authenticates with an exec plugin too".into(),
        "auth-provider" => "authenticates with an auth provider too".into(),
        "username" | "password" => format!("authenticates with a password ({key}) too"),
        other => format!("has {other:?}, which certsync does not know to keep meaningful"),
    }
}

pub(super) trait Ctx<T> {
    fn ctx(self, op: &'static str, path: &Path) -> Result<T, WriterError>;
}

impl<T> Ctx<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: &Path) -> Result<T, WriterError> {
        self.map_err(|source| WriterError::Io {
            op,
            path: path.to_owned(),
            source,
        })
    }
}
