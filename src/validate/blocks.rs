//! A file's PEM sections, an encrypted key refused by name first.

use rustls::pki_types::pem::{PemObject, SectionKind};

use super::error::ValidationError;
use crate::pem::READ_DIFFERENTLY;

/// Splits `bytes` into PEM sections. Sections with labels pki-types does not
/// know are skipped by it, so encrypted keys are detected here first: skipping
/// them silently would turn "encrypted key" into a vaguer "no key".
pub(super) fn pem_blocks(
    file: &str,
    bytes: &[u8],
) -> Result<Vec<(SectionKind, Vec<u8>)>, ValidationError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ValidationError::Empty { file: file.into() });
    }
    let contains = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    if contains(b"-----BEGIN ENCRYPTED PRIVATE KEY-----") || contains(b"Proc-Type: 4,ENCRYPTED") {
        return Err(ValidationError::EncryptedKey { file: file.into() });
    }
    let pem_err = |problem| ValidationError::Pem {
        file: file.into(),
        problem,
    };
    let blocks = <(SectionKind, Vec<u8>)>::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(crate::pem::problem(&e)))?;
    if blocks.is_empty() {
        return Err(pem_err("no PEM blocks found"));
    }
    if !crate::pem::go_reads_the_same(bytes, blocks.iter().map(|(k, d)| (*k, d.as_slice()))) {
        return Err(pem_err(READ_DIFFERENTLY));
    }
    Ok(blocks)
}
