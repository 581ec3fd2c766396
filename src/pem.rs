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

/// The blocks Go's `encoding/pem` reads from `data` (`pem.Decode` until it
/// finds none), as (type, bytes): a port of Go's reader, which
/// kube-apiserver and every Go consumer of the published files use
/// (`tls.LoadX509KeyPair` takes its first CERTIFICATE block). It differs
/// from rustls-pki-types': a BEGIN line must follow a `\n` (rustls also
/// takes a lone `\r`), an END line may carry only spaces and tabs after
/// its dashes, the base64 allows only spaces, tabs, `\r` and `\n` besides
/// its alphabet and needs its padding, `Key: value` header lines are read,
/// and a block that fails any of this is skipped, not an error: Go then
/// reads the next one.
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
/// trailing spaces and tabs, and what follows it.
fn go_line(data: &[u8]) -> (&[u8], &[u8]) {
    let (line, rest) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => {
            let end = if i > 0 && data[i - 1] == b'\r' {
                i - 1
            } else {
                i
            };
            (&data[..end], &data[i + 1..])
        }
        None => (data, &data[data.len()..]),
    };
    let kept = line
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(0, |p| p + 1);
    (&line[..kept], rest)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Go's `pem.Decode`.
#[allow(clippy::type_complexity)]
fn go_decode(data: &[u8]) -> Option<((Vec<u8>, Vec<u8>), &[u8])> {
    use base64::Engine as _;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const START: &[u8] = b"\n-----BEGIN ";
    const END: &[u8] = b"\n-----END ";
    const DASHES: &[u8] = b"-----";
    // Go's StdEncoding: padding required, non-zero trailing bits allowed;
    // `\r` and `\n` are skipped by its decoder, spaces and tabs before.
    let engine = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
    );
    let mut rest = data;
    loop {
        if rest.starts_with(&START[1..]) {
            rest = &rest[START.len() - 1..];
        } else if let Some(i) = find(rest, START) {
            rest = &rest[i + START.len()..];
        } else {
            return None;
        }
        let (type_line, next) = go_line(rest);
        rest = next;
        let Some(kind) = type_line.strip_suffix(DASHES) else {
            continue;
        };
        let mut headers = false;
        loop {
            if rest.is_empty() {
                return None;
            }
            let (line, next) = go_line(rest);
            if !line.contains(&b':') {
                break;
            }
            headers = true;
            rest = next;
        }
        let (end, trailer) = if !headers && rest.starts_with(&END[1..]) {
            (0, END.len() - 1)
        } else {
            match find(rest, END) {
                Some(i) => (i, i + END.len()),
                None => continue,
            }
        };
        let trailer = &rest[trailer..];
        if trailer.len() < kind.len() + DASHES.len() {
            continue;
        }
        let (end_line, after) = trailer.split_at(kind.len() + DASHES.len());
        if !end_line.starts_with(kind)
            || !end_line.ends_with(DASHES)
            || !go_line(after).0.is_empty()
        {
            continue;
        }
        let b64: Vec<u8> = rest[..end]
            .iter()
            .copied()
            .filter(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
            .collect();
        let Ok(der) = engine.decode(&b64) else {
            continue;
        };
        let (_, next) = go_line(&rest[end + END.len() - 1..]);
        return Some(((kind.to_vec(), der), next));
    }
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
