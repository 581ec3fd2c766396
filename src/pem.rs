//! Strict PEM reading on rustls-pki-types (the project's one PEM reader):
//! input that must be exactly one block of one kind, nothing else.

use rustls_pki_types::pem::{SectionKind, SliceIter};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PemError {
    #[error("no PEM block")]
    Empty,
    #[error("not PEM: {0}")]
    Syntax(String),
    #[error("{found} PEM blocks; exactly one is allowed")]
    Several { found: usize },
    #[error("a PEM block of another kind ({0})")]
    Kind(String),
    #[error("text outside the PEM block")]
    Outside,
}

/// The DER of the one block of `kind` that `bytes` holds. Refused: no
/// block, two blocks (of any label, known to rustls or not), another kind,
/// or anything but white space before or after it. Go's `pem.Decode`
/// (what kube-apiserver uses) reads the first block and ignores the rest;
/// reading less or more than it would is an ambiguity, so both are refused.
pub fn exactly_one(bytes: &[u8], kind: SectionKind) -> Result<Vec<u8>, PemError> {
    let begins = bytes.windows(11).filter(|w| w == b"-----BEGIN ").count();
    match begins {
        0 => return Err(PemError::Empty),
        1 => {}
        found => return Err(PemError::Several { found }),
    }
    let start = bytes
        .windows(11)
        .position(|w| w == b"-----BEGIN ")
        .unwrap_or_default();
    // Only white space before it, and the BEGIN line at a line's start
    // (where Go's reader looks for it).
    if !bytes[..start].iter().all(u8::is_ascii_whitespace)
        || (start > 0 && bytes[start - 1] != b'\n')
    {
        return Err(PemError::Outside);
    }
    let mut blocks = SliceIter::<(SectionKind, Vec<u8>)>::new(bytes);
    let (found, der) = match blocks.next() {
        Some(Ok(block)) => block,
        Some(Err(e)) => return Err(PemError::Syntax(format!("{e:?}"))),
        // One BEGIN line but no block rustls knows: another kind.
        None => return Err(PemError::Syntax("a block of an unknown kind".into())),
    };
    if !blocks.remainder().iter().all(u8::is_ascii_whitespace) {
        return Err(PemError::Outside);
    }
    if found != kind {
        return Err(PemError::Kind(format!("{found:?}")));
    }
    Ok(der)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQ: &str =
        "-----BEGIN CERTIFICATE REQUEST-----\nAAEC\n-----END CERTIFICATE REQUEST-----\n";
    const CERT: &str = "-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n";

    #[test]
    fn exactly_one_block_and_nothing_else() {
        let csr = SectionKind::Csr;
        assert_eq!(exactly_one(REQ.as_bytes(), csr), Ok(vec![0, 1, 2]));
        assert_eq!(
            exactly_one(format!("\n \n{REQ}\n\n").as_bytes(), csr),
            Ok(vec![0, 1, 2])
        );
        for (bad, want) in [
            (String::new(), PemError::Empty),
            ("garbage".into(), PemError::Empty),
            (format!("{REQ}{REQ}"), PemError::Several { found: 2 }),
            (format!("{REQ}{CERT}"), PemError::Several { found: 2 }),
            (format!("hello\n{REQ}"), PemError::Outside),
            (format!("  {REQ}"), PemError::Outside),
            (format!("{REQ}trailing"), PemError::Outside),
            (CERT.into(), PemError::Kind("Certificate".into())),
        ] {
            assert_eq!(exactly_one(bad.as_bytes(), csr), Err(want), "{bad:?}");
        }
        let unknown = "-----BEGIN NEW CERTIFICATE REQUEST-----\nAAEC\n-----END NEW CERTIFICATE REQUEST-----\n";
        assert!(matches!(
            exactly_one(unknown.as_bytes(), csr),
            Err(PemError::Syntax(_))
        ));
    }
}
