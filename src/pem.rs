//! PEM reading on rustls-pki-types (the project's one PEM reader): input
//! that must be exactly one block of one kind, the blocks of a combined file
//! with the text each was read from, and whether every block of any label
//! decodes.

use rustls_pki_types::pem::{self, SectionKind, SliceIter};

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

/// What is wrong with PEM input, in words that never quote it (the
/// library's own messages can quote input lines, and input may be a key).
pub fn problem(e: &pem::Error) -> &'static str {
    match e {
        pem::Error::MissingSectionEnd { .. } => "a block has no END line (truncated?)",
        pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed",
        pem::Error::Base64Decode(_) => "a block's body is not valid base64",
        pem::Error::SectionTooLarge => "a block is too large",
        _ => "unreadable",
    }
}

/// One block as rustls-pki-types read it, with its own text: from its
/// BEGIN line to the end of its END line, as it was.
#[derive(Debug)]
pub struct Block<'a> {
    pub kind: SectionKind,
    pub text: &'a [u8],
}

/// Every block of `bytes` in order, with its text; text outside blocks is
/// dropped. Refused: a syntax or base64 error (in words of [`problem`]), and
/// a block whose label rustls-pki-types does not read, which it would step
/// over unread: a combined file passes on all that it holds or fails.
pub fn blocks(bytes: &[u8]) -> Result<Vec<Block<'_>>, &'static str> {
    let mut iter = SliceIter::<(SectionKind, Vec<u8>)>::new(bytes);
    let mut out = Vec::new();
    loop {
        let before = iter.remainder();
        let next = iter.next();
        let rest = iter.remainder();
        let mut read = &before[..before.len() - rest.len()];
        let kind = match next {
            None => {
                // Blocks of unknown labels are stepped over up to the end.
                return match line_starts(read, b"-----BEGIN ").next() {
                    Some(_) => Err(UNKNOWN_LABEL),
                    None => Ok(out),
                };
            }
            Some(Err(e)) => return Err(problem(&e)),
            Some(Ok((kind, _))) => kind,
        };
        // The reader splits lines at CR or LF and consumes one: the LF of
        // an END line's CRLF is still ahead; it belongs to this block.
        if read.ends_with(b"\r") && rest.starts_with(b"\n") {
            read = &before[..read.len() + 1];
        }
        let mut begins = line_starts(read, b"-----BEGIN ");
        let (Some(start), None) = (begins.next_back(), begins.next()) else {
            // An unknown-label block was stepped over before this one.
            return Err(UNKNOWN_LABEL);
        };
        out.push(Block {
            kind,
            text: &read[start..],
        });
    }
}

const UNKNOWN_LABEL: &str =
    "a block certsync does not read (an unknown label, or a BEGIN line without its END)";

/// The offsets in `bytes` where a line starts with `prefix`, as the reader
/// sees lines (ended by CR or LF).
fn line_starts<'a>(
    bytes: &'a [u8],
    prefix: &'a [u8],
) -> impl DoubleEndedIterator<Item = usize> + 'a {
    (0..bytes.len()).filter(move |&i| {
        bytes[i..].starts_with(prefix) && (i == 0 || matches!(bytes[i - 1], b'\n' | b'\r'))
    })
}

/// Whether `bytes` hold at least one PEM block and every block, of any
/// label (DH parameters, a signature), is well formed and decodes.
/// rustls-pki-types decodes only the labels it knows and steps over the
/// others unread, so `bytes` are read twice: as they are (every block
/// closed by the END line of its own label), and with every BEGIN and END
/// line relabelled CERTIFICATE (every body valid base64, one block per
/// BEGIN line).
pub fn all_decode(bytes: &[u8]) -> bool {
    if SliceIter::<(SectionKind, Vec<u8>)>::new(bytes).any(|b| b.is_err()) {
        return false;
    }
    let mut relabelled = Vec::with_capacity(bytes.len());
    let mut begins = 0usize;
    for line in bytes.split_inclusive(|b| matches!(b, b'\n' | b'\r')) {
        let body = line.trim_ascii_end();
        let marker = |m: &[u8]| body.starts_with(m) && body.ends_with(b"-----");
        if marker(b"-----BEGIN ") {
            begins += 1;
            relabelled.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
        } else if marker(b"-----END ") {
            relabelled.extend_from_slice(b"-----END CERTIFICATE-----\n");
        } else {
            relabelled.extend_from_slice(line);
        }
    }
    let decoded: Result<Vec<_>, _> =
        SliceIter::<(SectionKind, Vec<u8>)>::new(&relabelled).collect();
    begins > 0 && decoded.is_ok_and(|d| d.len() == begins)
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

    #[test]
    fn blocks_keep_their_text_and_refuse_what_is_skipped() {
        let key = "-----BEGIN EC PRIVATE KEY-----\nAAEC\n-----END EC PRIVATE KEY-----\n";
        let text = format!("junk\n{CERT}{key}\nmore junk\n{CERT}");
        let got = blocks(text.as_bytes()).unwrap();
        let got: Vec<_> = got.iter().map(|b| (b.kind, b.text)).collect();
        assert_eq!(
            got,
            [
                (SectionKind::Certificate, CERT.as_bytes()),
                (SectionKind::EcPrivateKey, key.as_bytes()),
                (SectionKind::Certificate, CERT.as_bytes()),
            ]
        );
        let crlf = CERT.replace('\n', "\r\n");
        let two = format!("{crlf}{crlf}");
        let got = blocks(two.as_bytes()).unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|b| b.text == crlf.as_bytes()), "{got:?}");
        assert!(blocks(b"no pem here").unwrap().is_empty());

        let dh = "-----BEGIN DH PARAMETERS-----\nAAEC\n-----END DH PARAMETERS-----\n";
        let encrypted =
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAEC\n-----END ENCRYPTED PRIVATE KEY-----\n";
        for (bad, want) in [
            (format!("{dh}{CERT}"), UNKNOWN_LABEL),
            (format!("{CERT}{encrypted}"), UNKNOWN_LABEL),
            (
                format!("{CERT}-----BEGIN CERTIFICATE-----\nAAEC\n"),
                "a block has no END line (truncated?)",
            ),
            (
                "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".into(),
                "a block's body is not valid base64",
            ),
            (
                format!("-----BEGIN CERTIFICATE-----\n{CERT}"),
                UNKNOWN_LABEL,
            ),
        ] {
            assert_eq!(blocks(bad.as_bytes()).unwrap_err(), want, "{bad:?}");
        }
    }

    #[test]
    fn all_decode_reads_every_label() {
        let dh = "-----BEGIN DH PARAMETERS-----\nMAYCAQACAQI=\n-----END DH PARAMETERS-----\n";
        assert!(all_decode(dh.as_bytes()));
        assert!(all_decode(format!("{dh}\n{CERT}").as_bytes()));
        assert!(all_decode(dh.replace('\n', "\r\n").as_bytes()));
        for bad in [
            String::new(),
            "just text".into(),
            "-----BEGIN DH PARAMETERS-----\n!!!!\n-----END DH PARAMETERS-----\n".into(),
            "-----BEGIN DH PARAMETERS-----\nMAYCAQACAQI=\n".into(),
            "-----BEGIN DH PARAMETERS-----\nMAYCAQACAQI=\n-----END SIGNATURE-----\n".into(),
            format!("-----BEGIN DH PARAMETERS-----\n{dh}"),
        ] {
            assert!(!all_decode(bad.as_bytes()), "{bad:?}");
        }
    }
}
