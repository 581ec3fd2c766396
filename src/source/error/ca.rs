//! `CaError`: why a `ca:` certificate cannot be issued, or the live one no longer fits.

use std::path::PathBuf;
use std::time::Duration;

use super::csr::CsrError;
use crate::source::usage::CaUsage;
use crate::validate;
use crate::x509::KeyAlg;

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// What is wrong with the "CA certificate", the "CA key" or the
    /// "template" (`what`) at `path`.
    #[error("{what} {path}: {problem}")]
    File {
        what: &'static str,
        path: PathBuf,
        #[source]
        problem: Box<CaError>,
    },
    #[error("cannot make the certificate's key: {0}")]
    Key(#[source] Box<CsrError>),
    #[error("cannot sign the certificate: {0}")]
    Sign(#[source] Box<CaError>),
    #[error("the issued certificate is refused: {0}")]
    Mismatch(#[source] Box<CaError>),
    #[error("internal task failed: {0}")]
    Task(#[from] crate::Panicked),

    // Why the live pair is not one this mapping would issue now.
    #[error("the live revision holds no pair")]
    NoPair,
    /// The `csr:` source's check of it, or its encoding, failed.
    #[error("{0}")]
    Csr(#[source] Box<CsrError>),
    #[error("its ca.crt is not the CA certificate on disk")]
    OtherCa,

    // Why a certificate issued again (a renewed CA, a template) is refused.
    #[error("the certificate issued again has another key")]
    RenewedOtherKey,
    #[error("{0}")]
    Certificate(#[source] Box<crate::x509::X509Error>),

    // Why a certificate is not the CA's.
    #[error("not a certificate ({0})")]
    NotCertificate(#[source] Box<crate::x509::X509Error>),
    #[error("issued by {0:?}")]
    Issuer(String),
    #[error("the CA's key did not sign it")]
    Signature,

    // Why a live certificate does not have the lifetime asked for (the
    // guide and the mapping reference quote these).
    /// It ends with its CA (`ends`); one of `wanted` issued now would not.
    #[error(
        "lifetime changed: live ends with the CA at {}, wanted {}",
        crate::validate::rfc3339(*.ends),
        show(*.wanted)
    )]
    LifetimeCutByCa { ends: i64, wanted: Duration },
    #[error("lifetime changed: live {}, wanted {}", show(*.live), show(*.wanted))]
    LifetimeOther { live: Duration, wanted: Duration },

    // Why a certificate cannot be made (the other parts: `CsrError::Der`).
    #[error("the OS random generator failed")]
    Random,

    // What is wrong with the CA certificate, key or template (the wrapping
    // variant names the path).
    #[error("{}", .0.problem())]
    Read(crate::beneath::PathError),
    #[error("{0}")]
    Io(#[source] std::io::Error),
    #[error("{0} (one CERTIFICATE block is expected)")]
    NotOneCertificate(#[source] crate::pem::PemError),
    /// The file's owner, or (`dir`) that of a directory on the way to it.
    #[error(
        "{}owned by uid {uid}, neither root nor certsync's own user (uid {euid}): whoever owns \
         it can replace it; chown it to root",
        dir.as_ref().map(|d| format!("its directory {} is ", d.display())).unwrap_or_default()
    )]
    Owner {
        dir: Option<PathBuf>,
        uid: u32,
        euid: u32,
    },
    #[error("cannot resolve it: {0}")]
    Unresolved(#[source] std::io::Error),
    #[error("its directory: {0}")]
    Directory(#[source] crate::beneath::PathError),
    #[error(
        "its directory {} has mode {mode:04o}: group or others may write it, and so swap the \
         CA key and certificate; chmod go-w it, or give allow-loose-ca-key to use it anyway",
        dir.display()
    )]
    DirectoryWritable { dir: PathBuf, mode: u32 },
    /// What it lacks: CA:TRUE, keyCertSign, or a keyUsage at all.
    #[error("not usable as a CA: {0}")]
    NotCa(&'static str),
    #[error("expired at {}; renew the CA first", validate::rfc3339(*not_after))]
    Expired { not_after: i64 },
    #[error("not valid until {}", validate::rfc3339(*not_before))]
    NotYetValid { not_before: i64 },
    #[error("its key is not RSA, ECDSA P-256/P-384 or Ed25519")]
    UnknownKeyAlg,
    #[error(
        "mode {mode:04o} lets group or others at the CA key; chmod 600 it (kubeadm writes it \
         so), or give allow-loose-ca-key to use it anyway"
    )]
    LooseKey { mode: u32 },
    #[error(
        "it is not the key of the CA certificate {} (their public keys differ)",
        ca_cert.display()
    )]
    NotTheCasKey { ca_cert: PathBuf },
    #[error("{0} (one unencrypted PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block)")]
    KeyPem(#[source] crate::pem::PemError),
    #[error("holds no PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block")]
    NoKey,
    #[error("a {encoding} key cannot be the certificate's {alg} key")]
    KeyEncoding { encoding: &'static str, alg: KeyAlg },
    #[error("cannot read the key: {0}")]
    Wrap(#[source] rsa::pkcs8::der::Error),
    #[error("not a usable {alg} private key: {source}")]
    Unusable {
        alg: KeyAlg,
        #[source]
        source: rcgen::Error,
    },
    #[error("{0}")]
    KeySign(#[source] rcgen::Error),
    #[error(
        "it is not signed by the CA (its issuer or signature is not the CA's); a template is a \
         certificate the CA issued"
    )]
    NotSignedByCa,
    #[error("its subject attribute {oid} is empty")]
    EmptyAttribute { oid: String },
    #[error("its subject holds two CNs")]
    TwoCns,
    #[error("its subject holds {oid}; certsync issues CN and O only")]
    SubjectOther { oid: String },
    #[error("its SANs hold {kind}; only DNS names and IP addresses are copied")]
    OtherSan { kind: &'static str },
    #[error("its extended key usage {oid} is not one the CSR API names")]
    UnknownEku { oid: String },
    #[error("it carries name constraints, which only a CA certificate has")]
    NameConstraints,
    #[error("it names no CN, DNS name or IP address")]
    NoName,
    #[error("{0}")]
    CaUsage(#[from] CaUsage),
    #[error("its key is {0}")]
    NotIssuable(#[source] crate::x509::X509Error),
    #[error("{source}: not a certificate {} issued, so not issued again", ca_cert.display())]
    NotIssuedByTheCa {
        ca_cert: PathBuf,
        #[source]
        source: Box<CaError>,
    },
    #[error("not self-signed ({0}): only a root CA is renewed here")]
    NotSelfSigned(#[source] Box<CaError>),
    /// Go matches a leaf to its CA by the key identifier: kubeadm's CAs
    /// have one.
    #[error("it has no subject key identifier")]
    NoSubjectKeyId,
    #[error("signed with {signed}, where the CA key signs with {signs}")]
    SignedWith { signed: String, signs: String },
}

impl CaError {
    /// `problem` of the file `what` ([`CaError::File`]) at `path`.
    pub(crate) fn file(what: &'static str, path: &std::path::Path, problem: CaError) -> Self {
        let (path, problem) = (path.to_owned(), Box::new(problem));
        Self::File {
            what,
            path,
            problem,
        }
    }

    pub(crate) fn signing(e: CaError) -> Self {
        Self::Sign(Box::new(e))
    }

    pub(crate) fn certificate(e: crate::x509::X509Error) -> Self {
        Self::Certificate(Box::new(e))
    }

    pub(crate) fn csr(e: CsrError) -> Self {
        Self::Csr(Box::new(e))
    }

    /// A short, fixed label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::File { what: "CA key", .. } => "ca_key",
            Self::File {
                what: "template", ..
            } => "template",
            Self::Key(_) | Self::Task(_) => "request",
            Self::Sign(_) => "sign",
            Self::Mismatch(_)
            | Self::NoPair
            | Self::Csr(_)
            | Self::OtherCa
            | Self::LifetimeCutByCa { .. }
            | Self::LifetimeOther { .. }
            | Self::NotCertificate(_)
            | Self::Issuer(_)
            | Self::Signature
            | Self::RenewedOtherKey
            | Self::Certificate(_) => "mismatch",
            // The CA certificate, and what the variants above carry.
            _ => "ca",
        }
    }
}

/// A duration as Go writes one (`8760h`, `8m`, `1h30m`, `45s`): the form
/// kubeadm's `certificateValidityPeriod` and `lifetime=` accept.
pub(crate) fn show(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    let mut out = String::new();
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    if out.is_empty() {
        out.push_str("0s");
    }
    out
}
