//! The strict reading of a certificate certsync publishes or accepts, as
//! Go's `crypto/x509.ParseCertificate` (Go 1.24+) reads it: Kubernetes
//! components load their pairs and CA bundles with it, and a certificate
//! it refuses that certsync published over the last good pair stops the
//! component at its next start (the ninth attacker review, F2:
//! kube-apiserver exited with `x509: certificate contains duplicate
//! extension`). x509-parser, which reads everything else, is more lenient.
//!
//! Refused, with Go's words beside certsync's: anything not strict DER
//! (RustCrypto's `x509-cert`: a BOOLEAN other than 00/FF, non-minimal
//! integers and lengths, trailing bytes, a version other than v1-v3), a
//! negative serial number, an extension that appears twice, and a name
//! attribute whose PrintableString, IA5String, UTF8String or BMPString
//! holds what that type may not.

use x509_cert::der::asn1::{BmpString, Ia5StringRef, PrintableStringRef, Utf8StringRef};
use x509_cert::der::{Any, Decode, Tag, Tagged};

/// `Ok` when Go's `x509.ParseCertificate` would read `der` too; else the
/// problem, in words, naming Go's error.
pub fn strict_certificate(der: &[u8]) -> Result<(), String> {
    let cert = x509_cert::Certificate::from_der(der)
        .map_err(|e| format!("not strict DER, which Go's x509 refuses: {e}"))?;
    let tbs = &cert.tbs_certificate;
    if tbs
        .serial_number
        .as_bytes()
        .first()
        .is_some_and(|b| b & 0x80 != 0)
    {
        return Err("negative serial number (Go: x509: negative serial number)".into());
    }
    let mut seen = Vec::new();
    for ext in tbs.extensions.iter().flatten() {
        if seen.contains(&ext.extn_id) {
            return Err(format!(
                "extension {} appears twice (Go: x509: certificate contains duplicate extension)",
                ext.extn_id
            ));
        }
        seen.push(ext.extn_id);
    }
    for (which, name) in [("subject", &tbs.subject), ("issuer", &tbs.issuer)] {
        for atv in name.0.iter().flat_map(|rdn| rdn.0.iter()) {
            string_value(&atv.value).map_err(|problem| {
                format!(
                    "{which} attribute {}: {problem} (Go: x509: invalid RDNSequence)",
                    atv.oid
                )
            })?;
        }
    }
    Ok(())
}

/// A name attribute's string holds only what its type allows.
fn string_value(value: &Any) -> Result<(), String> {
    let checked = match value.tag() {
        Tag::PrintableString => value.decode_as::<PrintableStringRef<'_>>().map(drop),
        Tag::Utf8String => value.decode_as::<Utf8StringRef<'_>>().map(drop),
        Tag::Ia5String => value.decode_as::<Ia5StringRef<'_>>().map(drop),
        Tag::BmpString => value.decode_as::<BmpString>().map(drop),
        _ => Ok(()),
    };
    checked.map_err(|e| format!("invalid {}: {e}", value.tag()))
}

#[cfg(test)]
mod tests {
    use super::strict_certificate;
    use rcgen::{CertificateParams, CustomExtension, DnType, DnValue, KeyPair};

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

    /// The six shapes of the ninth attacker review (F2), each refused
    /// naming the problem; x509-parser reads every one of them.
    #[test]
    fn each_shape_go_refuses_is_refused() {
        let der = leaf();
        let shapes = [
            (
                "negative serial",
                edit(&der, &[0x02, 0x04, 0x11, 0x22], &[0x02, 0x04, 0x91, 0x22]),
                "negative serial number",
            ),
            (
                "BER BOOLEAN critical flag",
                edit(
                    &der,
                    &[0x06, 0x03, 0x2a, 0x03, 0x04, 0x01, 0x01, 0xff],
                    &[0x06, 0x03, 0x2a, 0x03, 0x04, 0x01, 0x01, 0x01],
                ),
                "not strict DER",
            ),
            (
                "version 4",
                edit(
                    &der,
                    &[0xa0, 0x03, 0x02, 0x01, 0x02],
                    &[0xa0, 0x03, 0x02, 0x01, 0x03],
                ),
                "not strict DER",
            ),
            (
                "duplicate extension",
                edit(
                    &der,
                    &[0x06, 0x03, 0x2a, 0x03, 0x06],
                    &[0x06, 0x03, 0x2a, 0x03, 0x05],
                ),
                "extension 1.2.3.5 appears twice",
            ),
            (
                "invalid PrintableString",
                edit(
                    &der,
                    &[0x13, 0x03, b'a', b'X', b'b'],
                    &[0x13, 0x03, b'a', b'_', b'b'],
                ),
                "subject attribute 2.5.4.10: invalid PrintableString",
            ),
            (
                "invalid UTF-8",
                edit(
                    &der,
                    &[0x0c, 0x03, b'z', b'z', b'Y'],
                    &[0x0c, 0x03, b'z', b'z', 0xff],
                ),
                "subject attribute 2.5.4.11: invalid UTF8String",
            ),
        ];
        for (shape, der, want) in shapes {
            assert!(
                matches!(x509_parser::parse_x509_certificate(&der), Ok(([], _))),
                "{shape}: the lenient reader takes it (else the test proves nothing)"
            );
            let e = strict_certificate(&der).expect_err(shape);
            assert!(e.contains(want), "{shape}: {e}");
        }
    }
}
