//! `ValidationError`: what may not be published and why, each a variant naming the file.

use std::time::{Duration, UNIX_EPOCH};

/// A Unix timestamp as RFC 3339 (the raw number if it predates 1970).
pub fn rfc3339(secs: i64) -> String {
    u64::try_from(secs).map_or_else(
        |_| secs.to_string(),
        |s| humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(s)).to_string(),
    )
}

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ValidationError {
    #[error("bundle is {size} bytes, over the {limit}-byte limit (largest file: {file})")]
    TooLarge {
        file: String,
        size: usize,
        limit: usize,
    },
    #[error("{file}: required file is missing")]
    Missing { file: String },
    #[error("{file}: file is empty")]
    Empty { file: String },
    #[error("{file}: not valid PEM: {problem}")]
    Pem { file: String, problem: &'static str },
    #[error("{file}: no CERTIFICATE block found")]
    NoCertificate { file: String },
    /// Not one certificate, with nothing after it, or one Go's reader
    /// refuses although x509-parser reads it: published over the last
    /// good pair, it would stop a Kubernetes component at its next start.
    #[error("{file}: certificate #{index} does not parse as X.509: {source}")]
    BadCertificate {
        file: String,
        index: usize,
        #[source]
        source: Box<crate::x509::X509Error>,
    },
    #[error(
        "{file}: no private key found (expected PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)"
    )]
    NoKey { file: String },
    #[error("{file}: {count} private keys found, expected exactly one")]
    MultipleKeys { file: String, count: usize },
    #[error("{file}: private key is encrypted; certsync needs an unencrypted key")]
    EncryptedKey { file: String },
    #[error("{file}: private key cannot be loaded: {source}")]
    UnsupportedKey {
        file: String,
        #[source]
        source: Box<rustls::Error>,
    },
    #[error("{file}: private key cannot be loaded: the key type cannot report its public key")]
    NoPublicKey { file: String },
    #[error("{file}: holds a private key, which would be published with certificate permissions")]
    KeyInCertFile { file: String },
    #[error("{file}: holds a private key but this mapping carries only a CA bundle")]
    UnexpectedKey { file: String },
    #[error("{key_file} does not match the leaf certificate in {cert_file}")]
    KeyMismatch { cert_file: String, key_file: String },
    #[error(
        "{cert_file}: the key matches certificate #{index}, not the first one; the leaf must come first"
    )]
    LeafNotFirst { cert_file: String, index: usize },
    #[error("{file}: certificate expired at {}", rfc3339(*not_after))]
    Expired { file: String, not_after: i64 },
    #[error(
        "{file}: certificate is not valid before {}, beyond the clock-skew allowance",
        rfc3339(*not_before)
    )]
    NotYetValid { file: String, not_before: i64 },
    #[error("{file}: not PEM; add allow-non-pem to the mapping to publish it as it is")]
    NotPem { file: String },
    #[error(
        "{key_file}: a private key with no certificate to pair with (expected {stem}.crt, \
         {stem}.pem or the certificate in the same file)"
    )]
    Unpaired { key_file: String, stem: String },
}

impl ValidationError {
    /// A short, fixed label for metrics and events (never a Debug string).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "too_large",
            Self::Missing { .. } => "missing_file",
            Self::Empty { .. } => "empty",
            Self::Pem { .. } => "bad_pem",
            Self::NoCertificate { .. } => "no_certificate",
            Self::BadCertificate { .. } => "bad_certificate",
            Self::NoKey { .. } => "no_key",
            Self::MultipleKeys { .. } => "multiple_keys",
            Self::EncryptedKey { .. } => "encrypted_key",
            Self::UnsupportedKey { .. } | Self::NoPublicKey { .. } => "unsupported_key",
            Self::KeyInCertFile { .. } => "key_in_cert_file",
            Self::UnexpectedKey { .. } => "unexpected_key",
            Self::KeyMismatch { .. } => "key_mismatch",
            Self::LeafNotFirst { .. } => "leaf_not_first",
            Self::Expired { .. } => "expired",
            Self::NotYetValid { .. } => "not_yet_valid",
            Self::NotPem { .. } => "not_pem",
            Self::Unpaired { .. } => "unpaired_key",
        }
    }
}
