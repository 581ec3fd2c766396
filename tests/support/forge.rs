//! Hand-assembled PKCS#10 requests of any shape, signed with a real key:
//! what an attacker holding a node's credentials can send, including what
//! no well-behaved library produces (two extensionRequest attributes, a
//! UTF8String inside the SAN sequence, BER lengths, trailing bytes). Shared
//! by the policy's unit tests and the end-to-end suites; kube-apiserver
//! accepts every shape here that Go's `crypto/x509` parses.
#![allow(dead_code)]

use rcgen::{PublicKeyData, SigningKey};

/// One DER TLV.
pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

pub fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
    tlv(0x30, &parts.concat())
}

/// A SET, its elements sorted as DER wants.
pub fn set(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut parts = parts.to_vec();
    parts.sort();
    tlv(0x31, &parts.concat())
}

/// An OBJECT IDENTIFIER from its dotted form.
pub fn oid(dotted: &str) -> Vec<u8> {
    let arcs: Vec<u64> = dotted.split('.').map(|a| a.parse().unwrap()).collect();
    let mut body = vec![(arcs[0] * 40 + arcs[1]) as u8];
    for &arc in &arcs[2..] {
        let mut chunk = vec![(arc & 0x7f) as u8];
        let mut rest = arc >> 7;
        while rest > 0 {
            chunk.push(0x80 | (rest & 0x7f) as u8);
            rest >>= 7;
        }
        chunk.reverse();
        body.extend(chunk);
    }
    tlv(0x06, &body)
}

pub fn utf8(s: &str) -> Vec<u8> {
    tlv(0x0c, s.as_bytes())
}

pub fn printable(s: &str) -> Vec<u8> {
    tlv(0x13, s.as_bytes())
}

pub const CN: &str = "2.5.4.3";
pub const O: &str = "2.5.4.10";
pub const EXTENSION_REQUEST: &str = "1.2.840.113549.1.9.14";
pub const CHALLENGE_PASSWORD: &str = "1.2.840.113549.1.9.7";
pub const SAN: &str = "2.5.29.17";
pub const KEY_USAGE: &str = "2.5.29.15";
pub const EXT_KEY_USAGE: &str = "2.5.29.37";
pub const BASIC_CONSTRAINTS: &str = "2.5.29.19";

/// An RDN of one attribute.
pub fn rdn(attr: &str, value: Vec<u8>) -> Vec<u8> {
    set(&[seq(&[oid(attr), value])])
}

/// A kubelet's subject: O=system:nodes, CN=system:node:NAME (Go's order).
pub fn node_subject(node: &str) -> Vec<Vec<u8>> {
    vec![
        rdn(O, utf8("system:nodes")),
        rdn(CN, utf8(&format!("system:node:{node}"))),
    ]
}

/// SAN elements.
pub fn dns(name: &str) -> Vec<u8> {
    tlv(0x82, name.as_bytes())
}
pub fn ip(addr: &str) -> Vec<u8> {
    match addr.parse::<std::net::IpAddr>().unwrap() {
        std::net::IpAddr::V4(a) => tlv(0x87, &a.octets()),
        std::net::IpAddr::V6(a) => tlv(0x87, &a.octets()),
    }
}
pub fn email(addr: &str) -> Vec<u8> {
    tlv(0x81, addr.as_bytes())
}
pub fn uri(u: &str) -> Vec<u8> {
    tlv(0x86, u.as_bytes())
}

/// An extension: `critical` written only when true, as DER requires.
pub fn ext(id: &str, critical: bool, value: Vec<u8>) -> Vec<u8> {
    let mut parts = vec![oid(id)];
    if critical {
        parts.push(vec![0x01, 0x01, 0xff]);
    }
    parts.push(tlv(0x04, &value));
    seq(&parts)
}

pub fn san(elements: &[Vec<u8>]) -> Vec<u8> {
    ext(SAN, false, seq(elements))
}

/// keyUsage digitalSignature.
pub fn key_usage_digital() -> Vec<u8> {
    ext(KEY_USAGE, true, vec![0x03, 0x02, 0x07, 0x80])
}

/// An extensionRequest attribute holding `exts`.
pub fn extension_request(exts: &[Vec<u8>]) -> Vec<u8> {
    seq(&[oid(EXTENSION_REQUEST), set(&[seq(exts)])])
}

/// The shape of a request: everything but the key and signature.
#[derive(Clone, Debug)]
pub struct Shape {
    pub subject: Vec<Vec<u8>>,
    /// Whole attributes (`SEQUENCE { type, SET OF value }`).
    pub attributes: Vec<Vec<u8>>,
    /// Appended after the request's outer SEQUENCE.
    pub trailing: Vec<u8>,
    /// Spoil the signature.
    pub tamper: bool,
}

impl Shape {
    /// What a kubelet sends for `node` with these SAN elements.
    pub fn kubelet(node: &str, names: &[Vec<u8>]) -> Self {
        Self {
            subject: node_subject(node),
            attributes: vec![extension_request(&[san(names)])],
            trailing: Vec::new(),
            tamper: false,
        }
    }

    /// DER of the request, signed with a new ECDSA P-256 key.
    pub fn der(&self) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        // The attributes as a [0] IMPLICIT SET: kept in the given order
        // (a forger's order), not sorted.
        let attrs = tlv(0xa0, &self.attributes.concat());
        let info = seq(&[
            vec![0x02, 0x01, 0x00],
            seq(&self.subject),
            key.subject_public_key_info(),
            attrs,
        ]);
        let mut sig = key.sign(&info).unwrap();
        if self.tamper {
            let last = sig.len() - 1;
            sig[last] ^= 0x55;
        }
        let mut bits = vec![0u8];
        bits.extend(sig);
        let mut out = seq(&[info, seq(&[oid("1.2.840.10045.4.3.2")]), tlv(0x03, &bits)]);
        out.extend_from_slice(&self.trailing);
        out
    }

    /// The request as PEM.
    pub fn pem(&self) -> String {
        pem("CERTIFICATE REQUEST", &self.der())
    }
}

pub fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

/// A name as Go's `crypto/x509` reads it from a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoName {
    Dns(String),
    Ip(std::net::IpAddr),
    Email(String),
    Uri(String),
}

/// Splits one TLV off `input` (short or long lengths, as Go's reader
/// takes them): `(tag, content, rest)`.
fn split_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |a, b| a << 8 | usize::from(*b));
        rest = &rest[n..];
        len
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The names Go's `x509.ParseCertificateRequest` reads from `der`: every
/// attribute of type extensionRequest (its first value), every SAN element
/// of the kinds it knows, elements of other kinds skipped. An empty list
/// also when Go would refuse the request (kube-apiserver would not take
/// it).
pub fn go_names(der: &[u8]) -> Vec<GoName> {
    go_names_inner(der).unwrap_or_default()
}

fn go_names_inner(der: &[u8]) -> Option<Vec<GoName>> {
    let (_, req, _) = split_tlv(der)?;
    let (_, info, _) = split_tlv(req)?;
    let (_, _, info) = split_tlv(info)?; // version
    let (_, _, info) = split_tlv(info)?; // subject
    let (_, _, info) = split_tlv(info)?; // key
    let (tag, mut attrs, _) = split_tlv(info)?;
    if tag != 0xa0 {
        return Some(Vec::new());
    }
    let ext_req = oid(EXTENSION_REQUEST);
    let san_oid = oid(SAN);
    let mut out = Vec::new();
    while !attrs.is_empty() {
        let (_, attr, rest) = split_tlv(attrs)?;
        attrs = rest;
        // The attribute's type, whole (tag and length included), then its
        // SET of values.
        let Some((_, _, values)) = split_tlv(attr) else {
            continue;
        };
        let id = &attr[..attr.len() - values.len()];
        if id != ext_req.as_slice() {
            continue;
        }
        let Some((_, set, _)) = split_tlv(values) else {
            continue;
        };
        let Some((_, mut exts, _)) = split_tlv(set) else {
            continue;
        };
        while !exts.is_empty() {
            let (_, ext, rest) = split_tlv(exts)?;
            exts = rest;
            let (_, _, after_id) = split_tlv(ext)?;
            if !ext.starts_with(&san_oid) {
                continue;
            }
            // critical BOOLEAN is optional, then the OCTET STRING.
            let (mut tag, mut value, mut rest) = split_tlv(after_id)?;
            if tag == 0x01 {
                (tag, value, rest) = split_tlv(rest)?;
            }
            let _ = (tag, rest);
            let (_, mut names, _) = split_tlv(value)?;
            while !names.is_empty() {
                let (tag, v, rest) = split_tlv(names)?;
                names = rest;
                match tag {
                    0x81 => out.push(GoName::Email(String::from_utf8_lossy(v).into())),
                    0x82 => out.push(GoName::Dns(String::from_utf8_lossy(v).into())),
                    0x86 => out.push(GoName::Uri(String::from_utf8_lossy(v).into())),
                    0x87 => match v.len() {
                        4 => out.push(GoName::Ip(<[u8; 4]>::try_from(v).ok()?.into())),
                        16 => out.push(GoName::Ip(<[u8; 16]>::try_from(v).ok()?.into())),
                        _ => return None,
                    },
                    _ => {}
                }
            }
        }
    }
    Some(out)
}
