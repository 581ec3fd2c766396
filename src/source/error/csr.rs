//! `CsrError`: why a `csr:` certificate cannot be obtained or checked.

use std::net::IpAddr;
use std::time::Duration;

use super::trust_bundle::TrustBundleError;
use crate::source::client::{ApiError, ClientError};
use crate::source::usage::{CaUsage, eku_usage, ku_names};
use crate::validate;
use crate::x509::{COMMON_NAME as OID_CN, KeyAlg, ORGANIZATION as OID_O};

#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    #[error("cannot generate a {alg} key: {source}")]
    KeyGen {
        alg: KeyAlg,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("cannot build the certificate request: {0}")]
    Request(#[source] Box<CsrError>),
    #[error(transparent)]
    Api(ApiError),
    #[error("{verb} {object}: no answer within {waited:?}")]
    ApiTimeout {
        verb: &'static str,
        object: String,
        waited: Duration,
    },
    #[error("watch certificatesigningrequest {csr}: the watch ended")]
    WatchEnded { csr: String },
    /// Denied or failed: `outcome` says which ("was denied", "failed").
    #[error("certificatesigningrequest {csr} {outcome}: {reason}: {message}")]
    Decided {
        csr: String,
        outcome: &'static str,
        reason: String,
        message: String,
    },
    #[error("certificatesigningrequest {csr} was deleted before a certificate was issued")]
    Deleted { csr: String },
    #[error("certificatesigningrequest {csr} was replaced by another object of the same name")]
    Replaced { csr: String },
    #[error(
        "certificatesigningrequest {csr}: no certificate issued within {}; approve it with `kubectl certificate approve {csr}`",
        humantime::format_duration(*waited)
    )]
    Timeout { csr: String, waited: Duration },
    #[error("certificatesigningrequest {csr}: the issued certificate is refused: {problem}")]
    Mismatch {
        csr: String,
        #[source]
        problem: Box<CsrError>,
    },
    #[error("API client for certificate requests: {0}")]
    Client(#[source] ClientError),
    #[error("signer CA {source_name}: {problem}")]
    Ca {
        source_name: String,
        #[source]
        problem: Box<CsrError>,
    },
    #[error("{}", .0.problem())]
    CaFile(#[source] crate::beneath::PathError),
    #[error("key {key:?} is missing")]
    CaNoKey { key: String },
    /// ClusterTrustBundles not served: the other CA sources are named.
    #[error(
        "{source}{}",
        if matches!(source, TrustBundleError::NotServed) {
            "; give ca=file: or ca=configmap: instead"
        } else {
            ""
        }
    )]
    CaBundles { source: TrustBundleError },
    #[error("no answer within {0:?}")]
    CaTimeout(Duration),
    #[error("{0}")]
    Panicked(#[from] crate::Panicked),
    #[error("holds no CERTIFICATE block")]
    CaNoCertificate,

    // Why a request (or a certificate part it shares) cannot be encoded.
    #[error("{what}: {error}")]
    Der {
        what: &'static str,
        error: x509_cert::der::Error,
    },
    #[error("{oid}: {error}")]
    Oid {
        oid: &'static str,
        error: x509_cert::der::oid::Error,
    },
    #[error("signing: {0}")]
    Signing(#[source] rcgen::Error),
    #[error("key usage: {0}")]
    KeyUsageBits(x509_cert::der::flagset::InvalidBits),

    // Why a signer's answer (or the live pair) is not what the mapping asks
    // for. Values the signer chose are shown with `{:?}` (escaped).
    #[error("{0}")]
    IssuedBundle(#[source] crate::bundle::BundleError),
    #[error("{0}")]
    Invalid(#[source] validate::ValidationError),
    #[error("no leaf certificate")]
    NoLeaf,
    #[error("certificate PEM: {0}")]
    Pem(#[source] rustls::pki_types::pem::Error),
    #[error(
        "subject is [{}], the mapping asks for exactly [{}]",
        attributes(got),
        attributes(want)
    )]
    Subject {
        got: Vec<(String, String)>,
        want: Vec<(String, String)>,
    },
    #[error("subjectAltName holds {kind}, not requested")]
    OtherName { kind: &'static str },
    #[error("DNS names are {got:?}, the mapping asks for {want:?}")]
    DnsNames { got: Vec<String>, want: Vec<String> },
    #[error("IP addresses are {got:?}, the mapping asks for {want:?}")]
    IpAddresses { got: Vec<IpAddr>, want: Vec<IpAddr> },
    #[error("usage {0:?} is not one the CSR API knows")]
    UnknownUsage(String),
    #[error(
        "key usage is {:?}, the mapping asks for exactly {:?}",
        ku_names(*got),
        ku_names(*want)
    )]
    KeyUsage { got: u16, want: u16 },
    #[error(
        "extended key usage is {:?}, the mapping asks for exactly {:?}",
        eku_names(got),
        eku_names(want)
    )]
    ExtKeyUsage { got: Vec<String>, want: Vec<String> },
    #[error("{0}")]
    CaUsage(#[from] CaUsage),
    /// Unreadable, or not a leaf (a CA, an unknown critical extension).
    #[error("leaf certificate: {0}")]
    Leaf(#[source] crate::x509::X509Error),
    #[error("key algorithm is {got}, the mapping asks for {want}")]
    IssuedKeyAlg { got: KeyAlg, want: KeyAlg },
    #[error("the key algorithm is not one certsync requests")]
    UnknownKeyAlg,
    #[error("signer CA PEM: {0}")]
    CaPem(#[source] rustls::pki_types::pem::Error),
    #[error("the signer CA holds no usable certificate")]
    NoAnchor,
    #[error("leaf: {0}")]
    EndEntity(#[source] webpki::Error),
    #[error("does not chain to the signer CA: {0}")]
    Chain(#[source] webpki::Error),
}

impl CsrError {
    /// A short, fixed label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::KeyGen { .. } | Self::Request(_) | Self::KeyUsageBits(_) => "request",
            Self::Api(_) | Self::ApiTimeout { .. } | Self::WatchEnded { .. } | Self::Client(_) => {
                "api"
            }
            Self::Decided { outcome, .. } if *outcome == "failed" => "failed",
            Self::Decided { .. } => "denied",
            Self::Deleted { .. } | Self::Replaced { .. } => "deleted",
            Self::Timeout { .. } => "timeout",
            Self::Mismatch { .. } => "mismatch",
            Self::Ca { .. }
            | Self::CaFile(_)
            | Self::CaNoKey { .. }
            | Self::CaBundles { .. }
            | Self::CaTimeout(_)
            | Self::Panicked(_)
            | Self::CaNoCertificate => "ca",
            // What the variants above carry.
            Self::Der { .. } | Self::Oid { .. } | Self::Signing(_) => "request",
            _ => "mismatch",
        }
    }
}

/// EKU OIDs by the usage names that ask for them, for messages.
pub(super) fn eku_names(oids: &[String]) -> Vec<String> {
    let name = |o: &String| eku_usage(o).map_or_else(|| o.clone(), str::to_owned);
    oids.iter().map(name).collect()
}

/// Subject attributes for messages: `CN="x", O="y"`, else the OID.
pub(super) fn attributes(s: &[(String, String)]) -> String {
    let name = |oid: &str| {
        match oid {
            OID_CN => "CN",
            OID_O => "O",
            "2.5.4.11" => "OU",
            "2.5.4.6" => "C",
            "2.5.4.7" => "L",
            "2.5.4.8" => "ST",
            "2.5.4.5" => "serialNumber",
            other => other,
        }
        .to_owned()
    };
    let shown: Vec<String> = s
        .iter()
        .map(|(o, v)| format!("{}={v:?}", name(o)))
        .collect();
    shown.join(", ")
}
