//! Sources publish the newest content of one mapping into a
//! `tokio::sync::watch` channel: bursts coalesce and the latest wins. They
//! never validate or write; the sync task does (see `sync`).

pub mod hostdir;

use crate::bundle::Bundle;

/// Why a source could not produce a bundle.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    HostDir(#[from] hostdir::HostDirError),
}

/// What a source publishes: the newest content, or why it cannot be read.
pub type Update = Result<Bundle, SourceError>;
