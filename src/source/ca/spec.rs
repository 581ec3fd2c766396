//! What a `ca:` mapping issues (`CaSpec`), and the `BACKDATE`.

use std::path::PathBuf;
use std::time::Duration;

use crate::source::csr::CsrSpec;

/// notBefore is this far in the past (kubeadm's `CertificateBackdate`), or a
/// tenth of the lifetime if less: a consumer whose clock is a little behind
/// accepts the certificate at once.
pub const BACKDATE: Duration = Duration::from_secs(300);
/// What a `ca:` mapping issues, from which CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaSpec {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    /// Subject, SANs and usages are copied from it at every issuance.
    pub template: Option<PathBuf>,
    /// The certificate in the `csr:` source's terms, so both share [`crate::source::csr::check`]
    /// and [`crate::source::csr::renewal`] (usages empty with a template: filled from it;
    /// lifetime always set; `signer` names the CA for messages).
    pub issue: CsrSpec,
    /// No `key-alg=` with a template: its key algorithm is taken.
    pub key_alg_from_template: bool,
    pub keep_key: bool,
    pub allow_loose_ca_key: bool,
}
