//! certsync: keeps TLS certificate/key pairs on disk in step with their source
//! (a Kubernetes Secret or ConfigMap, or a host directory), publishes every new
//! pair atomically through a `..data` symlink flip, and tells the consumer.
//!
//! The binary (`main.rs`) only wires these modules together; see DESIGN.md for
//! the data flow.
#![forbid(unsafe_code)]

pub mod admin;
pub mod bundle;
pub mod config;
pub mod dirwatch;
pub mod events;
pub mod files;
pub mod inspect;
pub mod metrics;
pub mod reload;
pub mod source;
pub mod sync;
pub mod validate;
pub mod writer;

/// An error with its causes, each once ("client error (Connect): invalid
/// peer certificate: ..."): the top-level messages of kube and reqwest hide
/// TLS and connection failures.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = c.source();
    }
    out
}

/// Test certificates, shared with the integration tests (one maker).
#[cfg(test)]
#[path = "../tests/support/certs.rs"]
mod test_certs;
