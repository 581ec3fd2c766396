//! The one PEM reader (rustls-pki-types, checked against a port of Go's
//! reader) and the one PEM writer.

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
    // [`blocks`] refuses blocks it would step over: every one is counted.
    let found = blocks(bytes).map_err(|problem| PemError::Syntax(problem.into()))?;
    let mut found = found.into_iter();
    let block = match (found.next(), found.len()) {
        (None, _) if find(bytes, BEGIN).is_some() => return Err(PemError::Outside),
        (None, _) => return Err(PemError::Empty),
        (Some(block), 0) => block,
        (Some(_), more) => return Err(PemError::Several { found: more + 1 }),
    };
    // Only white space around it ([`blocks`]: BEGIN at a line's start).
    let start = block.text.as_ptr() as usize - bytes.as_ptr() as usize;
    let end = start + block.text.len();
    if !bytes[..start].iter().all(u8::is_ascii_whitespace)
        || !bytes[end..].iter().all(u8::is_ascii_whitespace)
    {
        return Err(PemError::Outside);
    }
    if block.kind != kind {
        return Err(PemError::Kind(format!("{:?}", block.kind)));
    }
    Ok(block.der)
}

const BEGIN: &[u8] = b"-----BEGIN ";

/// The DER of every block of `bytes`, in order ([`blocks`]). Refused: no
/// block, a block of another kind (a key is never taken for a
/// certificate), and PEM Go reads other blocks from ([`go_reads_the_same`]).
pub fn certificates(bytes: &[u8]) -> Result<Vec<Vec<u8>>, PemError> {
    let found = blocks(bytes).map_err(|problem| PemError::Syntax(problem.into()))?;
    if found.is_empty() {
        return Err(PemError::Empty);
    }
    if !go_reads_the_same(bytes, found.iter().map(|b| (b.kind, b.der.as_slice()))) {
        return Err(PemError::Syntax(READ_DIFFERENTLY.into()));
    }
    found
        .into_iter()
        .map(|b| match b.kind {
            SectionKind::Certificate => Ok(b.der),
            other => Err(PemError::Kind(format!("{other:?}"))),
        })
        .collect()
}

/// The problem of PEM that Go's reader reads other blocks from.
pub const READ_DIFFERENTLY: &str =
    "Go's PEM reader (kube-apiserver's, and Go programs') reads other blocks from it";

/// Whether Go's reader ([`go_blocks`]) reads from `bytes` exactly the
/// blocks `read` (kind and DER, in order) rustls-pki-types read: where Go
/// skips one, it takes the next as the leaf, a certificate nothing judged.
/// A block Go's `tls.X509KeyPair` takes for a key (a label `PRIVATE KEY` or
/// ending in ` PRIVATE KEY`: `DSA PRIVATE KEY`) that rustls-pki-types steps
/// over is read differently too: Go loads it, not the key certsync checked.
pub fn go_reads_the_same<'a>(
    bytes: &[u8],
    read: impl IntoIterator<Item = (SectionKind, &'a [u8])>,
) -> bool {
    let mut read = read.into_iter();
    go_blocks(bytes).iter().all(
        |(label, der)| match SectionKind::try_from(label.as_slice()) {
            Ok(kind) => read.next() == Some((kind, der.as_slice())),
            Err(_) => label != b"PRIVATE KEY" && !label.ends_with(b" PRIVATE KEY"),
        },
    ) && read.next().is_none()
}

/// The first of [`certificates`] (Go's `tls.LoadX509KeyPair`'s leaf).
pub fn first_certificate(bytes: &[u8]) -> Result<Vec<u8>, PemError> {
    certificates(bytes)?
        .into_iter()
        .next()
        .ok_or(PemError::Empty)
}

/// The blocks (type, bytes) Go's `encoding/pem` reads from `data`
/// (`pem.Decode` until it finds none), as kube-apiserver and every Go
/// consumer of the published files read them. Unlike rustls-pki-types: a
/// BEGIN line must follow a `\n` (not a lone `\r`), an END line may carry
/// only spaces and tabs after its dashes, the base64 allows only spaces,
/// tabs, `\r` and `\n` besides its alphabet and needs its padding,
/// `Key: value` headers are read, and a block failing any of this is
/// skipped, not an error: Go reads the next one.
pub fn go_blocks(data: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut blocks = Vec::new();
    let mut rest = data;
    while let Some((block, next)) = go_decode(rest) {
        blocks.push(block);
        rest = next;
    }
    blocks
}

/// Go's `getLine`: the first `\n`- or `\r\n`-ended line without its
/// trailing spaces and tabs, what follows it, and how many bytes it took.
fn go_line(data: &[u8]) -> (&[u8], &[u8], usize) {
    let (line, taken) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => {
            let end = if i > 0 && data[i - 1] == b'\r' {
                i - 1
            } else {
                i
            };
            (&data[..end], i + 1)
        }
        None => (data, data.len()),
    };
    let kept = line
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(0, |p| p + 1);
    (&line[..kept], &data[taken..], taken)
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Go's `pem.Decode` since Go 1.25.5 / 1.24.11 (CVE-2025-61723, what
/// kube-apiserver v1.36 runs): the first END line, then the last BEGIN
/// line before it, so each byte is looked at a bounded number of times
/// (searching for an END after every BEGIN is quadratic).
#[allow(clippy::type_complexity)]
fn go_decode(data: &[u8]) -> Option<((Vec<u8>, Vec<u8>), &[u8])> {
    const START: &[u8] = b"\n-----BEGIN ";
    const END: &[u8] = b"\n-----END ";
    let mut rest = data;
    // Offsets into `rest` as Go keeps them: they go negative when the END
    // line's newline was taken by the line before it.
    let mut end_trailer: isize = 0;
    loop {
        // Skip past the END line already tried.
        let skip = usize::try_from(end_trailer)
            .ok()
            .filter(|&n| n <= rest.len())?;
        rest = &rest[skip..];
        let end = find(rest, END)?;
        end_trailer = (end + END.len()) as isize;
        let mut begins = rest[..end].windows(START.len() - 1);
        let Some(begin) = begins.rposition(|w| w == &START[1..]) else {
            continue;
        };
        if begin > 0 && rest[begin - 1] != b'\n' {
            continue;
        }
        let taken = begin + START.len() - 1;
        rest = &rest[taken..];
        let mut end = end as isize - taken as isize;
        end_trailer -= taken as isize;

        let (type_line, next, taken) = go_line(rest);
        rest = next;
        end -= taken as isize;
        end_trailer -= taken as isize;
        let Some(kind) = type_line.strip_suffix(DASHES) else {
            continue;
        };
        let mut headers = false;
        loop {
            if rest.is_empty() {
                return None;
            }
            let (line, next, taken) = go_line(rest);
            if !line.contains(&b':') {
                break;
            }
            headers = true;
            rest = next;
            end -= taken as isize;
            end_trailer -= taken as isize;
        }
        // With headers there must be a newline between them and the END.
        if headers && end < 0 {
            continue;
        }
        let trailer = usize::try_from(end_trailer)
            .ok()
            .and_then(|t| rest.get(t..));
        if !trailer.is_some_and(|t| go_closes(t, kind)) {
            continue;
        }
        let der = match usize::try_from(end) {
            Ok(end) if end > 0 => match go_base64(&rest[..end]) {
                Some(der) => der,
                None => continue,
            },
            _ => Vec::new(),
        };
        // The -1: the END may have been matched without its newline.
        let from = usize::try_from(end + END.len() as isize - 1).ok()?;
        let (_, next, _) = go_line(rest.get(from..)?);
        return Some(((kind.to_vec(), der), next));
    }
}

const DASHES: &[u8] = b"-----";

/// Whether `trailer` (after `-----END `) closes a block of `kind`:
/// `KIND-----`, then only spaces and tabs to the line's end.
fn go_closes(trailer: &[u8], kind: &[u8]) -> bool {
    let Some((end_line, after)) = trailer.split_at_checked(kind.len() + DASHES.len()) else {
        return false;
    };
    end_line.starts_with(kind) && end_line.ends_with(DASHES) && go_line(after).0.is_empty()
}

/// A block's body as Go decodes it: `StdEncoding` (padding required,
/// trailing bits allowed) without spaces, tabs, `\r` and `\n`.
fn go_base64(body: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine as _;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const GO_STD: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
    );
    let b64: Vec<u8> = body
        .iter()
        .copied()
        .filter(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        .collect();
    GO_STD.decode(&b64).ok()
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

/// One block as rustls-pki-types read it, with its text (BEGIN to END line).
#[derive(Debug)]
pub struct Block<'a> {
    pub kind: SectionKind,
    pub text: &'a [u8],
    pub der: Vec<u8>,
}

/// Every block of `bytes` in order, with its text. Refused: a syntax or
/// base64 error ([`problem`]), and a block whose label rustls-pki-types
/// would step over unread: a combined file passes on all it holds or fails.
pub fn blocks(bytes: &[u8]) -> Result<Vec<Block<'_>>, &'static str> {
    let mut iter = SliceIter::<(SectionKind, Vec<u8>)>::new(bytes);
    let mut out = Vec::new();
    loop {
        let before = iter.remainder();
        let next = iter.next();
        let rest = iter.remainder();
        let mut read = &before[..before.len() - rest.len()];
        let (kind, der) = match next {
            None => {
                // Blocks of unknown labels are stepped over up to the end.
                return match line_starts(read, BEGIN).next() {
                    Some(_) => Err(UNKNOWN_LABEL),
                    None => Ok(out),
                };
            }
            Some(Err(e)) => return Err(problem(&e)),
            Some(Ok(block)) => block,
        };
        // The reader splits lines at CR or LF and consumes one: the LF of
        // an END line's CRLF is still ahead; it belongs to this block.
        if read.ends_with(b"\r") && rest.starts_with(b"\n") {
            read = &before[..read.len() + 1];
        }
        let mut begins = line_starts(read, BEGIN);
        let (Some(start), None) = (begins.next_back(), begins.next()) else {
            // An unknown-label block was stepped over before this one.
            return Err(UNKNOWN_LABEL);
        };
        out.push(Block {
            kind,
            text: &read[start..],
            der,
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

/// Whether `bytes` hold a PEM block and every block, of any label (DH
/// parameters), decodes. rustls-pki-types steps over unknown labels, so
/// `bytes` are read as they are (each block closed by its own label's
/// END) and with every BEGIN and END relabelled CERTIFICATE (each body
/// valid base64, one block per BEGIN).
pub fn all_decode(bytes: &[u8]) -> bool {
    if SliceIter::<(SectionKind, Vec<u8>)>::new(bytes).any(|b| b.is_err()) {
        return false;
    }
    let mut relabelled = Vec::with_capacity(bytes.len());
    let mut begins = 0usize;
    for line in bytes.split_inclusive(|b| matches!(b, b'\n' | b'\r')) {
        let body = line.trim_ascii_end();
        let marker = |m: &[u8]| body.starts_with(m) && body.ends_with(b"-----");
        if marker(BEGIN) {
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

/// `label` PEM of `der`, LF line endings (cannot fail for a fixed label).
pub fn encode(label: &'static str, der: &[u8]) -> String {
    x509_cert::der::pem::encode_string(label, x509_cert::der::pem::LineEnding::LF, der)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's reader, as `encoding/pem`'s own tests and source read these.
    #[test]
    fn go_blocks_read_as_go_does() {
        let block = |body: &str| {
            format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n")
        };
        let read = |s: &str| -> Vec<Vec<u8>> {
            go_blocks(s.as_bytes())
                .into_iter()
                .map(|(_, d)| d)
                .collect()
        };
        assert_eq!(read(&block("AAEC")), [vec![0, 1, 2]]);
        assert_eq!(read(&block("AAEC").replace('\n', "\r\n")), [vec![0, 1, 2]]);
        assert_eq!(
            read(&format!("text\n{}{}", block("AAEC"), block("AwQF"))),
            [vec![0, 1, 2], vec![3, 4, 5]]
        );
        // Skipped: text after an END line, a vertical tab, missing
        // padding, a BEGIN after a lone CR; the next block is read.
        let next = block("AwQF");
        for skipped in [
            block("AAEC").replace("CERTIFICATE-----\n", "CERTIFICATE----- x\n"),
            block("AA\u{b}EC"),
            block("AAE"),
        ] {
            assert_eq!(
                read(&format!("{skipped}{next}")),
                [vec![3, 4, 5]],
                "{skipped:?}"
            );
        }
        assert!(read(&format!("x\r{}", block("AAEC"))).is_empty());
        assert_eq!(read(&block("AA EC\t")), [vec![0, 1, 2]]);
        // Headers are read, not decoded.
        assert_eq!(read(&block("Proc-Type: 4\n\nAAEC")), [vec![0, 1, 2]]);
    }

    const REQ: &str =
        "-----BEGIN CERTIFICATE REQUEST-----\nAAEC\n-----END CERTIFICATE REQUEST-----\n";
    const CERT: &str = "-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n";

    /// Certificates only: text around them dropped (openssl's `Bag
    /// Attributes`), a key or request beside them refused, none refused.
    #[test]
    fn certificates_are_every_block_and_only_certificates() {
        let two = format!("Bag Attributes\n{CERT}{}", CERT.replace("AAEC", "AwQF"));
        assert_eq!(
            certificates(two.as_bytes()),
            Ok(vec![vec![0, 1, 2], vec![3, 4, 5]])
        );
        assert_eq!(first_certificate(two.as_bytes()), Ok(vec![0, 1, 2]));
        assert_eq!(
            certificates(format!("{CERT}{REQ}").as_bytes()),
            Err(PemError::Kind("Csr".into()))
        );
        assert_eq!(
            first_certificate(REQ.as_bytes()),
            Err(PemError::Kind("Csr".into()))
        );
        assert_eq!(certificates(b"no PEM here\n"), Err(PemError::Empty));
        assert!(matches!(
            first_certificate(b"-----BEGIN CERTIFICATE-----\nAA\n"),
            Err(PemError::Syntax(_))
        ));
        // A first block Go steps over (after a lone CR; without its
        // base64 padding): Go takes the second as the leaf.
        let second = CERT.replace("AAEC", "AwQF");
        for hidden in [
            format!("x\r{CERT}{second}"),
            format!("{}{second}", CERT.replace("AAEC", "AAE")),
        ] {
            assert_eq!(
                first_certificate(hidden.as_bytes()),
                Err(PemError::Syntax(READ_DIFFERENTLY.into())),
                "{hidden:?}"
            );
        }
    }

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
