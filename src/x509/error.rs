//! Why the X.509 reading refused a key algorithm, a name, a request or a
//! certificate.

use x509_cert::der::Tag;
use x509_cert::der::asn1::ObjectIdentifier as Oid;

/// Why the X.509 reading refused something. Values from a request are
/// shown `{:?}`-escaped: a requester controls them, and they reach terminals.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum X509Error {
    #[error(
        "key algorithm {0:?} is not one of ecdsa-p256, ecdsa-p384, rsa-2048, rsa-3072, \
         rsa-4096, ed25519"
    )]
    UnknownKeyAlg(String),
    #[error("RSA-{0}: certsync makes RSA keys of 2048, 3072 or 4096 bits only")]
    RsaBits(usize),
    // A DNS name an issued certificate may not carry.
    #[error("DNS name {name:?} is empty or longer than 253 characters")]
    DnsNameLength { name: String },
    #[error("DNS name {name:?} looks like an IP address; an IP is an IP SAN")]
    DnsNameIp { name: String },
    #[error(
        "DNS name {name:?} is not a host name (an optional leading *., then dot-separated \
         labels of 1-63 letters, digits and inner hyphens)"
    )]
    DnsNameNotHost { name: String },

    // A certificate request ([`Request::read`]).
    #[error("spec.request is not one PEM CERTIFICATE REQUEST: {0}")]
    RequestPem(#[from] crate::pem::PemError),
    #[error("the request is not a strict DER PKCS#10 request: {0}")]
    RequestDer(#[source] x509_cert::der::Error),
    #[error("the request is not a strict DER PKCS#10 request: x509-parser: {0}")]
    RequestLax(#[source] x509_parser::nom::Err<x509_parser::error::X509Error>),
    /// Bytes after the request or certificate (`what`).
    #[error("trailing bytes after the {0}")]
    Trailing(&'static str),
    #[error("the request is not a strict DER PKCS#10 request: version is not 1 (0)")]
    RequestVersion,
    #[error("a subject RDN holds {count} attributes; one each is allowed")]
    RdnAttributes { count: usize },
    #[error("subject attribute {oid} is a {tag}; only UTF8String and PrintableString are read")]
    SubjectTag { oid: Oid, tag: Tag },
    #[error("the request carries {count} attributes; exactly one (extensionRequest) is allowed")]
    AttributeCount { count: usize },
    #[error("the request carries attribute {oid}; only extensionRequest is allowed")]
    OtherAttribute { oid: Oid },
    #[error("the extensionRequest attribute has {count} values; exactly one is allowed")]
    ExtensionRequestValues { count: usize },
    #[error("the extensions do not parse: {0}")]
    ExtensionsParse(#[source] x509_cert::der::Error),
    #[error(
        "extension {oid} is not one certsync reads (subjectAltName, keyUsage, extKeyUsage, \
         basicConstraints)"
    )]
    ExtensionUnknown { oid: Oid },
    /// The names ([`X509Error::is_san`]): their kinds, their syntax, or none.
    #[error("the request names no DNS name or IP address (a subjectAltName is required)")]
    NoSans,
    #[error("the request has no extensionRequest and so names no DNS name or IP address")]
    NoExtensionRequest,
    #[error("the subjectAltName does not parse: {0}")]
    SanParse(#[source] x509_cert::der::Error),
    #[error("the subjectAltName holds {kind}; only DNS names and IP addresses are allowed")]
    SanKind { kind: String },
    #[error("an IP address SAN of {len} bytes, not 4 or 16 (Go: x509: cannot parse IP address)")]
    SanIpLength { len: usize },
    #[error("DNS name {name:?} is a wildcard; wildcards are never approved")]
    SanWildcard { name: String },
    #[error("the request's signature does not verify with its public key")]
    Signature,

    // What Go's `x509.ParseCertificate` refuses in a certificate
    // ([`strict_certificate`]), each naming Go's error beside certsync's words.
    #[error("not strict DER, which Go's x509 refuses: {0}")]
    StrictDer(x509_cert::der::Error),
    #[error("negative serial number (Go: x509: negative serial number)")]
    NegativeSerial,
    #[error(
        "its signature algorithm differs from the one its signed part names (Go: x509: inner \
         and outer signature algorithm identifiers don't match)"
    )]
    SignatureAlgorithms,
    /// In a certificate or a request.
    #[error("extension {0} appears twice (Go: x509: certificate contains duplicate extension)")]
    DuplicateExtension(Oid),
    #[error("{which} attribute {oid}: invalid {tag}: {error} (Go: x509: invalid RDNSequence)")]
    StrictAttribute {
        which: &'static str,
        oid: Oid,
        tag: Tag,
        error: Box<x509_cert::der::Error>,
    },
    #[error("subject alternative names: {0} (Go: x509: SAN dNSName is malformed)")]
    StrictSan(x509_cert::der::Error),
    /// What Go's `url.Parse` refuses in a URI SAN.
    #[error("a URI SAN {0} (Go: x509: cannot parse URI)")]
    Uri(&'static str),
    #[error("key usage: {0} (Go: x509: invalid key usage)")]
    StrictKeyUsage(x509_cert::der::Error),
    #[error("key usage: its unused bits are not zero (Go: x509: invalid key usage)")]
    KeyUsagePadding,

    // Why a certificate, or one reading of its facts ([`Certificate`]), is
    // refused; a reader's own message is kept as it says it.
    #[error("{0}")]
    Certificate(#[source] x509_parser::nom::Err<x509_parser::error::X509Error>),
    #[error("extensions: {0}")]
    Extensions(#[source] x509_parser::error::X509Error),
    #[error("subject attribute {oid} is not a UTF8String or PrintableString")]
    SubjectType { oid: String },
    #[error("subject attribute {oid}: {problem}")]
    SubjectValue { oid: String, problem: String },
    /// A known extension the reader fell back to "unsupported" for.
    #[error("extension {oid} could not be read")]
    Unsupported { oid: String },
    #[error("extension {}: {problem}", super::oid::extension_name(oid))]
    Extension { oid: String, problem: String },
    #[error("subjectAltName holds an invalid entry")]
    InvalidSan,
    #[error("public key: {0}")]
    PublicKey(#[source] x509_cert::der::Error),
    /// One reader could not read the certificate.
    #[error("({parser}): {problem}")]
    Unread {
        parser: &'static str,
        #[source]
        problem: Box<X509Error>,
    },
    #[error("basic constraints say CA:TRUE; certsync issues leaf certificates only")]
    IsCa,
    #[error("basic constraints carry a path length, which only a CA has")]
    PathLength,
    #[error(
        "critical extension {oid} is not one certsync reads (subjectAltName, keyUsage, \
         extKeyUsage, basicConstraints)"
    )]
    UnknownCritical { oid: String },
    /// The two readers read `field` differently.
    #[error("its {field} read differently with x509-parser and x509-cert")]
    ReadDifferently { field: &'static str },
}

impl X509Error {
    /// Whether a request was refused for its names (their kinds, their
    /// syntax, or none), not for its form.
    pub fn is_san(&self) -> bool {
        match self {
            // One reader refused the names.
            Self::Unread { problem, .. } => problem.is_san(),
            Self::Extension { oid, .. } => oid == super::oid::SAN,
            other => matches!(
                other,
                Self::NoSans
                    | Self::NoExtensionRequest
                    | Self::SanParse(_)
                    | Self::SanKind { .. }
                    | Self::SanIpLength { .. }
                    | Self::InvalidSan
                    | Self::SanWildcard { .. }
                    | Self::DnsNameLength { .. }
                    | Self::DnsNameIp { .. }
                    | Self::DnsNameNotHost { .. }
            ),
        }
    }
}
