//! What `adopt` and `revert` are asked to do: the command layer's flags
//! made into what the node's run needs. A leaf.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// What `adopt` is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// The node's `/etc/kubernetes` as this process sees it.
    pub dir: PathBuf,
    pub dry_run: bool,
    /// `ca:` options for every mapping (`lifetime`, `renew`, `key-alg`,
    /// `keep-key`), checked by `cli::check_set`.
    pub set: Vec<(String, String)>,
    /// The certsync image the node's kubelet runs.
    pub image: String,
    /// certsync's admin port in its static pod (`adopt --admin-addr`);
    /// `None`: the node's current one, else [`DEFAULT_ADMIN_ADDR`].
    pub admin_addr: Option<SocketAddr>,
    pub json: bool,
    /// `adopt --ready-timeout`: how long certsync's pod has to be ready
    /// before adopt takes it out and changes nothing of kubeadm's.
    pub ready_timeout: Duration,
    /// `adopt --api-server-timeout`: how long adopt waits, once it changed
    /// the API server's manifest, for it to serve certsync's certificate
    /// and be ready; zero: not at all.
    pub api_server_timeout: Duration,
    /// `adopt --keep-backups`: how many of the newest backups a successful
    /// adopt keeps, besides every one revert needs.
    pub keep_backups: usize,
    /// The time adopt judges the CAs by (whether a renewal is due): now,
    /// but for tests of kubeadm's files made on a given day.
    pub now: SystemTime,
}

/// What `revert` is asked to do.
#[derive(Debug, Clone)]
pub struct RevertOptions {
    /// The node's `/etc/kubernetes` as this process sees it.
    pub dir: PathBuf,
    pub dry_run: bool,
    /// `--api-server-timeout`: how long revert waits for the API server
    /// to serve kubeadm's certificate again and be ready; zero: not at all.
    pub api_server_timeout: Duration,
    /// `--purge`: certsync's own files go too.
    pub purge: bool,
}

/// Where certsync's admin port listens unless told otherwise: loopback,
/// the node's own.
pub const DEFAULT_ADMIN_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9814);

impl Options {
    /// certsync's admin address as adopt writes it.
    pub fn admin(&self) -> SocketAddr {
        self.admin_addr.unwrap_or(DEFAULT_ADMIN_ADDR)
    }
}
