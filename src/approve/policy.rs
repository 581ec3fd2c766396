//! The kubelet-serving policy: a pure function from a CSR, the Nodes, the
//! cluster's own names and addresses and the operator's flags to a
//! verdict. No I/O, no clock.
//!
//! Approve only when every check holds; deny when one definitely fails,
//! naming it; wait when the answer depends on a Node not there yet, or on
//! a name or address nothing can prove (a person decides with `csr
//! review`). What a node writes itself (its Node's `status.addresses`) is
//! necessary, never sufficient: every name and address must also lie
//! inside what the operator declared, and nothing of the cluster's or
//! another node's is ever a node's. The checks, in order:
//!
//! 1. `requester`: `system:node:NAME` in group `system:nodes` (set by the
//!    API server from how the kubelet authenticated, never by the kubelet);
//! 2. `request` / `sans`: `spec.request` read strictly ([`crate::x509`]:
//!    one PEM block, strict DER, two parsers agreeing);
//! 3. `key`: RSA ≥ 2048 bits, ECDSA P-256 or P-384, or Ed25519;
//! 4. `signature`: it verifies with its own public key;
//! 5. `subject`: exactly `CN=system:node:NAME`, `O=system:nodes`;
//! 6. `usages`: digital signature and server auth (key encipherment for
//!    RSA), in `spec.usages` and in the request; never a CA;
//! 7. `expiration`: `expirationSeconds` within the maximum;
//! 8. `dns-san` / `ip-san`, denied: a name or address of the cluster's
//!    own ([`reserved`]);
//! 9. `dns-san` / `ip-san`, denied: another Node's name, or what another
//!    Node lists (a wait when the requester lists it too);
//! 10. `ip-san`, denied: an address outside every `--node-cidr`;
//! 11. `node`: wait while Node NAME does not exist or lists no addresses;
//! 12. `ip-san` / `dns-san`, else wait: every IP one Node NAME lists;
//!     every DNS name NAME itself, or one Node NAME lists that matches
//!     `--allowed-dns`.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

/// A denial for a requester's CSR beyond the oldest `cap` it has pending:
/// refused unread, so one identity's flood costs no parsing.
pub fn too_many_pending(requester: &str, pending: usize, cap: usize) -> Verdict {
    deny(
        Check::Pending,
        format!(
            "{requester:?} has {pending} pending CSRs for this signer; only its oldest {cap} are \
             looked at (a kubelet has one or two)"
        ),
    )
}

/// The verdict on `csr`, given the Nodes indexed once ([`Nodes::new`]) for
/// many requests, and the cluster's own names and addresses.
pub fn decide_with(
    csr: &CertificateSigningRequest,
    nodes: &Nodes,
    cluster: &Cluster,
    policy: &Policy,
) -> (Verdict, Facts) {
    let mut facts = Facts::unread(csr);
    // Every check, in order: the first that fails is the verdict.
    let checks = |facts: &mut Facts| -> Result<(), Verdict> {
        let name = request::requester(csr, facts)?;
        let req = request::read(csr, facts)?;
        request::key(&req)?;
        request::signature(&req)?;
        request::subject(&req, csr.spec.username.as_deref().unwrap_or_default())?;
        request::usages(&facts.usages, &req)?;
        request::expiration(csr, policy)?;
        let asker = Asker {
            name,
            lower: name.to_ascii_lowercase(),
            own: nodes.listed(name),
        };
        reserved::check(facts, &asker, nodes, cluster, policy)?;
        whose::other_nodes(facts, &asker, nodes)?;
        whose::node_networks(&facts.ips, policy)?;
        let listed = whose::node(&asker)?;
        whose::service_dispute(facts, &asker, listed, cluster)?;
        whose::listed_sans(facts, &asker, listed, policy)
    };
    let verdict = checks(&mut facts).err().unwrap_or(Verdict::Approve);
    (verdict, facts)
}

mod index;
mod ranges;
mod request;
mod reserved;
mod verdict;
mod whose;
pub use index::{Listed, MAX_NODE_ADDRESSES, Nodes, Piece};
pub use ranges::{Cidr, Reserved, canonical, dns_name};
use verdict::{Asker, deny};
pub use verdict::{Check, Cluster, Facts, MAX_REQUEST_BYTES, NODE_PREFIX, Policy, SIGNER, Verdict};

#[cfg(test)]
mod tests;
