//! Why a reload was not sent, not answered or not proven: one error for the
//! reloader's parts (signal, HTTP hook, serving check), each with what it
//! was about as fields, and why a pidfile is not proof of the consumer.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    // The serving check.
    #[error("{addr}: still serving {served} instead of {expected} after {waited:?}")]
    Stale {
        addr: String,
        /// The fingerprint served, as [`super::verify::short`] says it, or
        /// why none was read at the last try.
        served: String,
        expected: String,
        waited: Duration,
    },
    #[error("{0:?} is not host:port")]
    NotHostPort(String),
    /// The connection, the server name or the handshake failed, timed
    /// out, or presented no certificate.
    #[error("{0}")]
    Tls(#[source] Box<dyn std::error::Error + Send + Sync>),

    // Signal mode.
    #[error(
        "no process matches {what} (certsync itself, its ancestors, PID 1 and pause are never \
         candidates)"
    )]
    NoMatch { what: String },
    /// Unreadable, not a file, not a process id, or naming no process.
    #[error("pidfile {path}: {problem}")]
    Pidfile { path: PathBuf, problem: String },
    /// The pidfile is not proof that the process it names is the consumer:
    /// `problem` says why, and `reason` is the label it is counted under:
    /// `pidfile` (a symlink, not a regular file, a hard link or larger than
    /// the cap), `user` (the process does not run as the pidfile's owner),
    /// `name` (it does not have the `--reload-process` name), `pid`
    /// (certsync, one of its ancestors, or a process younger than the file).
    #[error("pidfile {path}: {problem}; refusing to signal it")]
    Refused {
        path: PathBuf,
        reason: &'static str,
        problem: String,
    },
    /// The signal did not reach a chosen process: certsync may not signal
    /// it, it exited after it was checked, or the kernel refused.
    #[error("{0}")]
    Unsent(String),
    #[error("cannot read /proc: {0}")]
    Proc(#[source] procfs::ProcError),
    #[error("cannot read /proc: pidfd_open({pid}): {errno}")]
    PidfdOpen {
        pid: i32,
        #[source]
        errno: rustix::io::Errno,
    },
    /// certsync's own ancestors cannot all be told, so neither can whether
    /// a process is one of them.
    #[error(
        "cannot tell the parent of process {pid}, certsync or one of its ancestors (unreadable, \
         or read across an exit and a reused PID): no process is signalled while certsync \
         cannot tell that it did not start certsync"
    )]
    Lineage { pid: i32 },
    /// The blocking task that signals panicked.
    #[error("{0}")]
    Task(#[source] crate::Panicked),

    // The HTTP hook's settings.
    /// Not `http[s]://host[:port]/path`, a host not loopback where
    /// verification is skipped, or a method that is none.
    #[error("reload URL {url:?}: {problem}")]
    Url { url: String, problem: String },
    #[error("reload header {header:?}: expected 'Name: value'")]
    Header { header: String },
    /// Not readable as a file only root may change, not PEM, a
    /// certificate rustls refuses, or no certificate at all.
    #[error("reload CA file {path}: {source}")]
    CaFile {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The bearer token file, judged at start.
    #[error("--reload-bearer-token-file: {0}")]
    TokenFile(#[source] Box<ReloadError>),
    /// Not readable as a file only root may change, not UTF-8 text, or
    /// not a valid header value.
    #[error("bearer token file {}: {problem}", path.display())]
    Token {
        path: PathBuf,
        #[source]
        problem: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] rustls::Error),

    // A call of the HTTP hook.
    #[error("{hook}: gave up after {attempts} attempts; last: {last}")]
    GaveUp {
        hook: String,
        attempts: u32,
        #[source]
        last: Box<ReloadError>,
    },
    #[error("HTTP {0}")]
    Status(u16),
    #[error("no answer within {}", humantime::format_duration(*.0))]
    NoAnswer(Duration),
    #[error("HTTP {status} redirect to {to}; redirects are not followed")]
    Redirect { status: u16, to: String },
    #[error(transparent)]
    Request(http::Error),
    /// hyper's error chain, which never carries the URL.
    #[error("{}", crate::error_chain(.0))]
    Send(#[source] hyper_util::client::legacy::Error),
}
