//! What `adopt` and `revert` are asked to do. A leaf.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

#[derive(Debug, Clone)]
pub struct Options {
    /// The node's `/etc/kubernetes` as this process sees it.
    pub dir: PathBuf,
    pub dry_run: bool,
    /// `ca:` options for every mapping, checked by `cli::check_set`.
    pub set: Vec<(String, String)>,
    /// `None`: the node's current one (its pod's, else adopt's record's).
    pub image: Option<String>,
    /// `None`: the node's current one, else [`DEFAULT_ADMIN_ADDR`].
    pub admin_addr: Option<SocketAddr>,
    pub json: bool,
    pub ready_timeout: Duration,
    /// Zero: adopt does not wait for the API server.
    pub api_server_timeout: Duration,
    pub keep_backups: usize,
    /// The time adopt judges the CAs by: now, but for tests.
    pub now: SystemTime,
}

#[derive(Debug, Clone)]
pub struct RevertOptions {
    pub dir: PathBuf,
    pub dry_run: bool,
    pub api_server_timeout: Duration,
    pub purge: bool,
}

pub const DEFAULT_ADMIN_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9814);

impl Options {
    pub fn admin(&self) -> SocketAddr {
        self.admin_addr.unwrap_or(DEFAULT_ADMIN_ADDR)
    }

    /// The image, once `choices::kept` filled it in; none is "", which no image check
    /// passes.
    pub fn image(&self) -> &str {
        self.image.as_deref().unwrap_or_default()
    }
}
