//! The CSR API's usage names: the bit or EKU OID each asks for, and
//! `CaUsage`, a usage only a CA has (refused: certsync issues leaves).

/// The usage names the API accepts (`pkg/apis/certificates`).
pub const USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];
/// A usage's key usage bit (bit 0: digitalSignature) or EKU OID, as
/// Kubernetes' `keyUsagesFromStrings` maps them.
enum Usage {
    Ku(u16),
    Eku(&'static str),
}

fn usage(name: &str) -> Option<Usage> {
    Some(match name {
        "signing" | "digital signature" => Usage::Ku(1 << 0),
        "content commitment" => Usage::Ku(1 << 1),
        "key encipherment" => Usage::Ku(1 << 2),
        "data encipherment" => Usage::Ku(1 << 3),
        "key agreement" => Usage::Ku(1 << 4),
        "cert sign" => Usage::Ku(1 << 5),
        "crl sign" => Usage::Ku(1 << 6),
        "encipher only" => Usage::Ku(1 << 7),
        "decipher only" => Usage::Ku(1 << 8),
        "any" => Usage::Eku("2.5.29.37.0"),
        "server auth" => Usage::Eku("1.3.6.1.5.5.7.3.1"),
        "client auth" => Usage::Eku("1.3.6.1.5.5.7.3.2"),
        "code signing" => Usage::Eku("1.3.6.1.5.5.7.3.3"),
        "email protection" | "s/mime" => Usage::Eku("1.3.6.1.5.5.7.3.4"),
        "ipsec end system" => Usage::Eku("1.3.6.1.5.5.7.3.5"),
        "ipsec tunnel" => Usage::Eku("1.3.6.1.5.5.7.3.6"),
        "ipsec user" => Usage::Eku("1.3.6.1.5.5.7.3.7"),
        "timestamping" => Usage::Eku("1.3.6.1.5.5.7.3.8"),
        "ocsp signing" => Usage::Eku("1.3.6.1.5.5.7.3.9"),
        "microsoft sgc" => Usage::Eku("1.3.6.1.4.1.311.10.3.3"),
        "netscape sgc" => Usage::Eku("2.16.840.1.113730.4.1"),
        _ => return None,
    })
}

/// The key usage bits and the EKU OIDs (each once, in order) `usages`
/// ask for; `Err` names a usage the API does not know.
pub(crate) fn split(usages: &[String]) -> Result<(u16, Vec<&'static str>), String> {
    let (mut ku, mut eku) = (0, Vec::new());
    for u in usages {
        match usage(u) {
            Some(Usage::Ku(bit)) => ku |= bit,
            Some(Usage::Eku(oid)) if eku.contains(&oid) => {}
            Some(Usage::Eku(oid)) => eku.push(oid),
            None => return Err(u.clone()),
        }
    }
    Ok((ku, eku))
}

/// Refuses usages only a CA certificate has: keyCertSign and cRLSign on a
/// CA:FALSE leaf are read one way by some verifiers and the other by
/// others; certsync issues no CA certificates.
pub(crate) fn leaf_usages<'a>(usages: impl IntoIterator<Item = &'a str>) -> Result<(), CaUsage> {
    for u in usages {
        if let Some(Usage::Ku(bit)) = usage(u)
            && bit & (crate::x509::KEY_CERT_SIGN | CRL_SIGN) != 0
        {
            return Err(CaUsage(u.into()));
        }
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "usage {0:?} belongs to a CA certificate (keyCertSign, cRLSign); certsync issues leaf \
     certificates only (CA:FALSE)"
)]
pub struct CaUsage(pub String);

const CRL_SIGN: u16 = 1 << 6;

/// The usage name that asks for an EKU OID, if one does.
pub(crate) fn eku_usage(oid: &str) -> Option<&'static str> {
    USAGES
        .iter()
        .find(|u| matches!(usage(u), Some(Usage::Eku(o)) if o == oid))
        .copied()
}

/// The names of the bits set in `bits`, bit 0 first ("digital signature",
/// the last name [`USAGES`] gives a bit).
pub(crate) fn ku_names(bits: u16) -> Vec<&'static str> {
    let name = |bit: u16| {
        let named = |u: &&&str| matches!(usage(u), Some(Usage::Ku(b)) if b == bit);
        USAGES.iter().rev().find(named).copied()
    };
    (0..9)
        .map(|i| 1 << i)
        .filter(|b| bits & b != 0)
        .filter_map(name)
        .collect()
}
