//! What `adopt` and `revert` are asked to do: their flags, one struct
//! each, parsed by clap. A leaf.

use std::net::SocketAddr;

pub use crate::cli::AdoptArgs as Options;
pub use crate::cli::RevertArgs as RevertOptions;

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
