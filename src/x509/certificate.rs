//! The strict reading of a certificate certsync publishes or accepts, as
//! Go's `crypto/x509.ParseCertificate` (Go 1.24+) reads it: Kubernetes
//! components load their pairs and CA bundles with it, and one it refuses
//! stops the component at its next start. Refused, with Go's words beside
//! certsync's: anything not strict DER (RustCrypto's `x509-cert`), a
//! negative serial number, an outer signature algorithm other than the
//! signed part's, an extension that appears twice, a name attribute string
//! holding what its type may not, a SAN dNSName, rfc822Name or URI that is
//! not ASCII, a URI `url.Parse` refuses, an IP SAN of another length than
//! 4 or 16, and a key usage whose unused bits are not zero.

use x509_cert::der::asn1::{BmpString, Ia5StringRef, PrintableStringRef, Utf8StringRef};
use x509_cert::der::{Any, Decode, Tag, Tagged};
use x509_cert::ext::Extension;

use super::error::X509Error;

/// `der` as strict DER (RustCrypto's `x509-cert`), or refused.
pub fn strict_der(der: &[u8]) -> Result<x509_cert::Certificate, X509Error> {
    x509_cert::Certificate::from_der(der).map_err(X509Error::StrictDer)
}

/// `der` read strictly, when Go's `x509.ParseCertificate` would read it
/// too (see the module); else the problem, naming Go's error.
pub fn strict_certificate(der: &[u8]) -> Result<x509_cert::Certificate, X509Error> {
    let cert = strict_der(der)?;
    let tbs = &cert.tbs_certificate;
    // The signature covers only the signed part: the outer algorithm can
    // be changed by anyone, and lenient readers verify with it anyway.
    if cert.signature_algorithm != tbs.signature {
        return Err(X509Error::SignatureAlgorithms);
    }
    if tbs
        .serial_number
        .as_bytes()
        .first()
        .is_some_and(|b| b & 0x80 != 0)
    {
        return Err(X509Error::NegativeSerial);
    }
    let extensions = tbs.extensions.as_deref().unwrap_or_default();
    for (i, ext) in extensions.iter().enumerate() {
        once(&extensions[..i], ext)?;
        extension(ext)?;
    }
    for (which, name) in [("subject", &tbs.subject), ("issuer", &tbs.issuer)] {
        for atv in name.0.iter().flat_map(|rdn| rdn.0.iter()) {
            string_value(&atv.value).map_err(|error| X509Error::StrictAttribute {
                which,
                oid: atv.oid,
                tag: atv.value.tag(),
                error: Box::new(error),
            })?;
        }
    }
    Ok(cert)
}

/// `ext` is not one of the extensions `before` it (in a certificate and
/// in a request alike).
pub(super) fn once(before: &[Extension], ext: &Extension) -> Result<(), X509Error> {
    match before.iter().any(|e| e.extn_id == ext.extn_id) {
        true => Err(X509Error::DuplicateExtension(ext.extn_id)),
        false => Ok(()),
    }
}

/// The extensions whose content Go reads strictly: the subject
/// alternative names and the key usage (see the module).
fn extension(ext: &Extension) -> Result<(), X509Error> {
    use super::oid::{KEY_USAGE, SAN};
    use x509_cert::ext::pkix::name::GeneralName;
    let content = ext.extn_value.as_bytes();
    let oid = ext.extn_id.to_string();
    if oid == SAN {
        let names = x509_cert::ext::pkix::SubjectAltName::from_der(content)
            .map_err(X509Error::StrictSan)?;
        for name in &names.0 {
            match name {
                GeneralName::IpAddress(ip) if ![4, 16].contains(&ip.as_bytes().len()) => {
                    let len = ip.as_bytes().len();
                    return Err(X509Error::SanIpLength { len });
                }
                GeneralName::UniformResourceIdentifier(uri) => url_parses(uri.as_str())?,
                _ => {}
            }
        }
    }
    if oid == KEY_USAGE {
        let bits = x509_cert::der::asn1::BitStringRef::from_der(content)
            .map_err(X509Error::StrictKeyUsage)?;
        let raw = bits.raw_bytes();
        let unused = bits.unused_bits();
        let padding = raw.last().map_or(0, |b| b & ((1u8 << unused) - 1));
        if raw.is_empty() || padding != 0 {
            return Err(X509Error::KeyUsagePadding);
        }
    }
    Ok(())
}

/// What Go's `url.Parse` refuses in a URI SAN: a control character, a `%`
/// not followed by two hex digits, a scheme that is empty.
fn url_parses(uri: &str) -> Result<(), X509Error> {
    if uri.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(X509Error::Uri("holds a control character"));
    }
    if uri.starts_with(':') {
        return Err(X509Error::Uri("has an empty scheme"));
    }
    let b = uri.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |j: usize| b.get(j).is_some_and(|c| c.is_ascii_hexdigit());
            if !(hex(i + 1) && hex(i + 2)) {
                return Err(X509Error::Uri("holds an invalid % escape"));
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    Ok(())
}

/// A name attribute's string, when it holds only what its type allows;
/// `None` for a value of another type (not checked).
pub(super) fn string_value(value: &Any) -> Result<Option<String>, x509_cert::der::Error> {
    Ok(Some(match value.tag() {
        Tag::PrintableString => value.decode_as::<PrintableStringRef<'_>>()?.to_string(),
        Tag::Utf8String => value.decode_as::<Utf8StringRef<'_>>()?.to_string(),
        Tag::Ia5String => value.decode_as::<Ia5StringRef<'_>>()?.to_string(),
        Tag::BmpString => value.decode_as::<BmpString>()?.to_string(),
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::strict_certificate;
    use crate::x509::X509Error;
    use rcgen::{CertificateParams, CustomExtension, DnType, DnValue, KeyPair};
    use x509_cert::der::Tag;
    use x509_cert::der::oid::ObjectIdentifier;

    /// Whether the refusal is the one a shape should get.
    type Refused = fn(&X509Error) -> bool;

    /// A self-signed leaf with a serial, a PrintableString O, a UTF8String
    /// OU, and three custom extensions (1.2.3.4 critical, 1.2.3.5 and
    /// 1.2.3.6), each shape below one same-length byte edit away.
    fn leaf() -> Vec<u8> {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec!["shape.example".into()]).unwrap();
        p.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x11, 0x22, 0x33, 0x44]));
        p.distinguished_name.push(DnType::CommonName, "shape");
        p.distinguished_name.push(
            DnType::OrganizationName,
            DnValue::PrintableString("aXb".try_into().unwrap()),
        );
        p.distinguished_name.push(
            DnType::OrganizationalUnitName,
            DnValue::Utf8String("zzY".into()),
        );
        let mut critical = CustomExtension::from_oid_content(&[1, 2, 3, 4], vec![0x05, 0x00]);
        critical.set_criticality(true);
        p.custom_extensions.push(critical);
        p.custom_extensions.push(CustomExtension::from_oid_content(
            &[1, 2, 3, 5],
            vec![0x05, 0x00],
        ));
        p.custom_extensions.push(CustomExtension::from_oid_content(
            &[1, 2, 3, 6],
            vec![0x05, 0x00],
        ));
        p.self_signed(&key).unwrap().der().to_vec()
    }

    /// `der` with every occurrence of `from` replaced by `to` (a name is
    /// both issuer and subject of a self-signed leaf); one at least.
    fn edit(der: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
        let at: Vec<usize> = der
            .windows(from.len())
            .enumerate()
            .filter(|(_, w)| *w == from)
            .map(|(i, _)| i)
            .collect();
        assert!(!at.is_empty(), "{from:02x?} is not there");
        let mut out = der.to_vec();
        for i in at {
            out[i..i + to.len()].copy_from_slice(to);
        }
        out
    }

    #[test]
    fn a_certificate_go_reads_passes() {
        strict_certificate(&leaf()).unwrap();
    }

    /// Six shapes Go refuses that certsync published over the last good
    /// pair, each refused naming the problem; x509-parser reads every one
    /// of them.
    #[test]
    fn each_shape_go_refuses_is_refused() {
        let der = leaf();
        let shapes: [(&str, _, Refused); 7] = [
            (
                // The signed part's ecdsa-with-SHA256 made SHA384: the
                // outer one (which no signature covers) now differs.
                "inner and outer signature algorithms differ",
                {
                    let sha256 = [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
                    let mut d = der.clone();
                    let inner = d.windows(10).position(|w| w == sha256).expect("ECDSA");
                    d[inner + 9] = 0x03;
                    d
                },
                |e| *e == X509Error::SignatureAlgorithms,
            ),
            (
                "negative serial",
                edit(&der, &[0x02, 0x04, 0x11, 0x22], &[0x02, 0x04, 0x91, 0x22]),
                |e| *e == X509Error::NegativeSerial,
            ),
            (
                "BER BOOLEAN critical flag",
                edit(
                    &der,
                    &[0x06, 0x03, 0x2a, 0x03, 0x04, 0x01, 0x01, 0xff],
                    &[0x06, 0x03, 0x2a, 0x03, 0x04, 0x01, 0x01, 0x01],
                ),
                |e| matches!(e, X509Error::StrictDer(_)),
            ),
            (
                "version 4",
                edit(
                    &der,
                    &[0xa0, 0x03, 0x02, 0x01, 0x02],
                    &[0xa0, 0x03, 0x02, 0x01, 0x03],
                ),
                |e| matches!(e, X509Error::StrictDer(_)),
            ),
            (
                "duplicate extension",
                edit(
                    &der,
                    &[0x06, 0x03, 0x2a, 0x03, 0x06],
                    &[0x06, 0x03, 0x2a, 0x03, 0x05],
                ),
                |e| *e == X509Error::DuplicateExtension(ObjectIdentifier::new_unwrap("1.2.3.5")),
            ),
            (
                "invalid PrintableString",
                edit(
                    &der,
                    &[0x13, 0x03, b'a', b'X', b'b'],
                    &[0x13, 0x03, b'a', b'_', b'b'],
                ),
                |e| {
                    matches!(e, X509Error::StrictAttribute { which: "subject", oid, tag: Tag::PrintableString, .. }
                        if *oid == ObjectIdentifier::new_unwrap("2.5.4.10"))
                },
            ),
            (
                "invalid UTF-8",
                edit(
                    &der,
                    &[0x0c, 0x03, b'z', b'z', b'Y'],
                    &[0x0c, 0x03, b'z', b'z', 0xff],
                ),
                |e| {
                    matches!(e, X509Error::StrictAttribute { which: "subject", oid, tag: Tag::Utf8String, .. }
                        if *oid == ObjectIdentifier::new_unwrap("2.5.4.11"))
                },
            ),
        ];
        for (shape, der, want) in shapes {
            assert!(
                matches!(x509_parser::parse_x509_certificate(&der), Ok(([], _))),
                "{shape}: the lenient reader takes it (else the test proves nothing)"
            );
            let e = strict_certificate(&der).expect_err(shape);
            assert!(want(&e), "{shape}: {e}");
        }
    }

    /// A leaf whose subject alternative names (or key usage) are the DER
    /// `content` given, as a custom extension of that OID.
    fn leaf_with(oid: &[u64], content: Vec<u8>) -> Vec<u8> {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, "shape");
        p.custom_extensions
            .push(CustomExtension::from_oid_content(oid, content));
        p.self_signed(&key).unwrap().der().to_vec()
    }

    /// `SEQUENCE { [tag] value }`: one general name.
    fn san(tag: u8, value: &[u8]) -> Vec<u8> {
        let mut v = vec![0x30, value.len() as u8 + 2, tag, value.len() as u8];
        v.extend_from_slice(value);
        v
    }

    /// Five more shapes Go refuses (a malformed SAN or key usage), each
    /// published before; their well-formed neighbours pass.
    #[test]
    fn each_san_and_key_usage_shape_go_refuses_is_refused() {
        const SAN: &[u64] = &[2, 5, 29, 17];
        const KU: &[u64] = &[2, 5, 29, 15];
        let shapes: [(&str, &[u64], Vec<u8>, Refused); 6] = [
            (
                "non-ASCII dNSName",
                SAN,
                san(0x82, "sh\u{e9}pe.example".as_bytes()),
                |e| matches!(e, X509Error::StrictSan(_)),
            ),
            (
                "non-ASCII rfc822Name",
                SAN,
                san(0x81, "\u{e9}@example.com".as_bytes()),
                |e| matches!(e, X509Error::StrictSan(_)),
            ),
            ("13-byte IP address", SAN, san(0x87, &[10; 13]), |e| {
                *e == X509Error::SanIpLength { len: 13 }
            }),
            (
                "URI with a bad escape",
                SAN,
                san(0x86, b"https://x.example/%zz"),
                |e| *e == X509Error::Uri("holds an invalid % escape"),
            ),
            (
                "URI with a control character",
                SAN,
                san(0x86, b"https://x.example/\x01"),
                |e| *e == X509Error::Uri("holds a control character"),
            ),
            (
                "key usage padding bit set",
                KU,
                vec![0x03, 0x02, 0x05, 0xa1],
                |e| *e == X509Error::KeyUsagePadding,
            ),
        ];
        for (shape, oid, content, want) in shapes {
            let der = leaf_with(oid, content);
            assert!(
                matches!(x509_parser::parse_x509_certificate(&der), Ok(([], _))),
                "{shape}: the lenient reader takes it"
            );
            let e = strict_certificate(&der).expect_err(shape);
            assert!(want(&e), "{shape}: {e}");
        }
        for (fine, oid, content) in [
            ("dNSName", SAN, san(0x82, b"shape.example")),
            ("IPv4", SAN, san(0x87, &[10, 0, 0, 1])),
            ("IPv6", SAN, san(0x87, &[0xfd; 16])),
            (
                "URI",
                SAN,
                san(0x86, b"spiffe://cluster.local/ns/a/sa/b%20c"),
            ),
            ("key usage", KU, vec![0x03, 0x02, 0x05, 0xa0]),
        ] {
            strict_certificate(&leaf_with(oid, content)).unwrap_or_else(|e| panic!("{fine}: {e}"));
        }
    }
}
