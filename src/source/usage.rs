//! The CSR API's usage names: the bit or EKU OID each asks for, and
//! `CaUsage`, a usage only a CA has (refused: certsync issues leaves).

/// The usage names the API accepts (`pkg/apis/certificates`), each with
/// the key usage bit (bit 0: digitalSignature) or EKU OID it puts into a
/// certificate, as Kubernetes' `keyUsagesFromStrings` maps them.
const TABLE: &[(&str, Usage)] = &[
    ("signing", Ku(1 << 0)),
    ("digital signature", Ku(1 << 0)),
    ("content commitment", Ku(1 << 1)),
    ("key encipherment", Ku(1 << 2)),
    ("key agreement", Ku(1 << 4)),
    ("data encipherment", Ku(1 << 3)),
    ("cert sign", Ku(1 << 5)),
    ("crl sign", Ku(1 << 6)),
    ("encipher only", Ku(1 << 7)),
    ("decipher only", Ku(1 << 8)),
    ("any", Eku("2.5.29.37.0")),
    ("server auth", Eku("1.3.6.1.5.5.7.3.1")),
    ("client auth", Eku("1.3.6.1.5.5.7.3.2")),
    ("code signing", Eku("1.3.6.1.5.5.7.3.3")),
    ("email protection", Eku("1.3.6.1.5.5.7.3.4")),
    ("s/mime", Eku("1.3.6.1.5.5.7.3.4")),
    ("ipsec end system", Eku("1.3.6.1.5.5.7.3.5")),
    ("ipsec tunnel", Eku("1.3.6.1.5.5.7.3.6")),
    ("ipsec user", Eku("1.3.6.1.5.5.7.3.7")),
    ("timestamping", Eku("1.3.6.1.5.5.7.3.8")),
    ("ocsp signing", Eku("1.3.6.1.5.5.7.3.9")),
    ("microsoft sgc", Eku("1.3.6.1.4.1.311.10.3.3")),
    ("netscape sgc", Eku("2.16.840.1.113730.4.1")),
];

/// The usage names the API accepts, in [`TABLE`]'s order.
pub const USAGES: [&str; TABLE.len()] = {
    let mut names = [""; TABLE.len()];
    let mut i = 0;
    while i < TABLE.len() {
        names[i] = TABLE[i].0;
        i += 1;
    }
    names
};

#[derive(Clone, Copy, PartialEq)]
enum Usage {
    Ku(u16),
    Eku(&'static str),
}
use Usage::{Eku, Ku};

fn usage(name: &str) -> Option<Usage> {
    TABLE.iter().find(|(n, _)| *n == name).map(|&(_, u)| u)
}

/// The key usage bits and the EKU OIDs (each once, in order) `usages`
/// ask for; `Err` names a usage the API does not know.
pub(crate) fn split(usages: &[String]) -> Result<(u16, Vec<&'static str>), String> {
    let (mut ku, mut eku) = (0, Vec::new());
    for u in usages {
        match usage(u) {
            Some(Ku(bit)) => ku |= bit,
            Some(Eku(oid)) if eku.contains(&oid) => {}
            Some(Eku(oid)) => eku.push(oid),
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
        if let Some(Ku(bit)) = usage(u)
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
    TABLE
        .iter()
        .find(|(_, u)| matches!(u, Eku(o) if *o == oid))
        .map(|(n, _)| *n)
}

/// The names of the bits set in `bits`, bit 0 first ("digital signature",
/// the last name [`TABLE`] gives a bit).
pub(crate) fn ku_names(bits: u16) -> Vec<&'static str> {
    let name = |bit| {
        TABLE
            .iter()
            .rev()
            .find(|(_, u)| *u == Ku(bit))
            .map(|(n, _)| *n)
    };
    (0..9)
        .map(|i| 1 << i)
        .filter(|b| bits & b != 0)
        .filter_map(name)
        .collect()
}
