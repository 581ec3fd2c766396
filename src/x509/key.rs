//! The key algorithms certsync makes keys of and requests certificates for.

use super::error::X509Error;

/// The key algorithm of requested certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyAlg {
    #[default]
    EcdsaP256,
    EcdsaP384,
    /// Modulus size in bits: 2048, 3072 or 4096.
    Rsa(usize),
    Ed25519,
}

impl std::fmt::Display for KeyAlg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::EcdsaP256 => f.write_str("ecdsa-p256"),
            Self::EcdsaP384 => f.write_str("ecdsa-p384"),
            Self::Rsa(bits) => write!(f, "rsa-{bits}"),
            Self::Ed25519 => f.write_str("ed25519"),
        }
    }
}

impl std::str::FromStr for KeyAlg {
    type Err = X509Error;
    fn from_str(s: &str) -> Result<Self, X509Error> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "ecdsa-p256" | "p256" | "ecdsa" => Self::EcdsaP256,
            "ecdsa-p384" | "p384" => Self::EcdsaP384,
            "rsa-2048" | "rsa" => Self::Rsa(2048),
            "rsa-3072" => Self::Rsa(3072),
            "rsa-4096" => Self::Rsa(4096),
            "ed25519" => Self::Ed25519,
            _ => return Err(X509Error::UnknownKeyAlg(s.into())),
        })
    }
}

/// The RSA modulus sizes certsync makes keys of. Any other size is
/// refused before a key is made: an RSA-16384 key takes minutes to
/// generate, on a blocking thread no signal can stop.
pub const RSA_BITS: [usize; 3] = [2048, 3072, 4096];

impl KeyAlg {
    /// `self` if certsync makes keys of it: RSA only of [`RSA_BITS`].
    pub fn issuable(self) -> Result<Self, X509Error> {
        match self {
            Self::Rsa(bits) if !RSA_BITS.contains(&bits) => Err(X509Error::RsaBits(bits)),
            other => Ok(other),
        }
    }

    /// The algorithm of a public key, if it is one certsync requests (RSA
    /// of any size, for callers that judge the size).
    pub fn of_spki(spki: &x509_parser::x509::SubjectPublicKeyInfo<'_>) -> Option<Self> {
        match spki.algorithm.algorithm.to_id_string().as_str() {
            "1.2.840.113549.1.1.1" => match spki.parsed().ok()? {
                x509_parser::public_key::PublicKey::RSA(k) => Some(Self::Rsa(k.key_size())),
                _ => None,
            },
            "1.2.840.10045.2.1" => {
                let curve = spki.algorithm.parameters.as_ref()?.as_oid().ok()?;
                match curve.to_id_string().as_str() {
                    "1.2.840.10045.3.1.7" => Some(Self::EcdsaP256),
                    "1.3.132.0.34" => Some(Self::EcdsaP384),
                    _ => None,
                }
            }
            "1.3.101.112" => Some(Self::Ed25519),
            _ => None,
        }
    }
}
