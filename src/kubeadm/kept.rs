//! What a current certificate must be for revert to keep it in place of
//! kubeadm's copy in the backup, beyond being the node's CA's for
//! kubeadm's subject and names (checked in `handback`): what certsync
//! issues for that mapping, apart from serial, key and validity. The
//! ninth review, F3: a CA-signed pair with kubeadm's subject and names
//! was kept whatever else it said: valid only from 2036 (the node broken),
//! CA:TRUE (a sub-CA left in pki/ for a century), codeSigning or cRLSign
//! only, an unknown critical extension, name constraints, 100 years, a
//! second certificate after the leaf.

use x509_parser::certificate::X509Certificate;
use x509_parser::oid_registry::OID_X509_EXT_NAME_CONSTRAINTS;
use x509_parser::time::ASN1Time;

/// certsync's default `ca:` lifetime and kubeadm's: one year, in seconds.
pub const KUBEADM_LIFETIME: i64 = 365 * 86_400;

/// How far a certificate's validity may stretch past what was asked:
/// kubeadm and certsync both start a certificate up to 5 minutes before it
/// is made, and the node's clock may run behind the issuer's by as much
/// (certsync's default `--clock-skew`).
const SKEW: i64 = 300;

/// Checks that `cert_pem` is a certificate revert may keep in place of
/// kubeadm's `kubeadms_pem`: exactly one certificate, signed with kubeadm's
/// signature algorithm and read as Go reads it, not a CA (CA:FALSE,
/// or no basic constraints where kubeadm's has none), kubeadm's KeyUsage
/// and ExtKeyUsage, no critical extension kubeadm's lacks, no name
/// constraints, valid now (its notBefore not past now and the skew), and
/// lasting no longer than `lifetime` seconds (certsync's for the mapping)
/// and the backdate.
/// `Err` is the rule it fails, as revert shows it.
pub fn shape(cert_pem: &[u8], kubeadms_pem: &[u8], lifetime: i64) -> Result<(), String> {
    let der = crate::pem::exactly_one(cert_pem, rustls_pki_types::pem::SectionKind::Certificate)
        .map_err(|e| format!("not exactly one certificate ({e})"))?;
    let (_, ours) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| format!("not a certificate ({e})"))?;
    let (_, theirs_pem) = x509_parser::pem::parse_x509_pem(kubeadms_pem)
        .map_err(|e| format!("kubeadm's backup: not PEM ({e})"))?;
    let (_, theirs) = x509_parser::parse_x509_certificate(&theirs_pem.contents)
        .map_err(|e| format!("kubeadm's backup: not a certificate ({e})"))?;
    // Go refuses a SHA-1 signature (the ninth review's re-attack, G3: a
    // pair the container signed with SHA-1, otherwise kubeadm's, was kept
    // and the scheduler and controller-manager lost the API server): the
    // algorithm kubeadm's backup was signed with, or nothing.
    if ours.signature_algorithm.algorithm != theirs.signature_algorithm.algorithm {
        return Err(format!(
            "it is signed with {}, not kubeadm's {}",
            ours.signature_algorithm.algorithm, theirs.signature_algorithm.algorithm
        ));
    }
    crate::x509::strict_certificate(&der).map_err(|e| format!("Go would refuse it: {e}"))?;
    let bad = |e: x509_parser::error::X509Error| format!("its extensions: {e}");
    match (
        ours.basic_constraints().map_err(bad)?,
        theirs.basic_constraints().map_err(bad)?,
    ) {
        (Some(bc), _) if bc.value.ca => return Err("it is a CA certificate (CA:TRUE)".into()),
        (None, Some(_)) => {
            return Err("it has no basic constraints, where kubeadm's says CA:FALSE".into());
        }
        _ => {}
    }
    let ku = |c: &X509Certificate| c.key_usage().map(|k| k.map(|k| k.value.flags));
    if ku(&ours).map_err(bad)? != ku(&theirs).map_err(bad)? {
        return Err(format!(
            "its key usage ({}) is not kubeadm's ({})",
            shown(ours.key_usage().ok().flatten().map(|k| k.value.to_string())),
            shown(
                theirs
                    .key_usage()
                    .ok()
                    .flatten()
                    .map(|k| k.value.to_string())
            )
        ));
    }
    let eku = |c: &X509Certificate<'_>| {
        c.extended_key_usage()
            .map(|e| e.map(|e| eku_names(e.value)))
    };
    let (a, b) = (eku(&ours).map_err(bad)?, eku(&theirs).map_err(bad)?);
    if a != b {
        return Err(format!(
            "its extended key usage ({}) is not kubeadm's ({})",
            shown(a.map(|a| a.join(", "))),
            shown(b.map(|b| b.join(", ")))
        ));
    }
    if ours
        .extensions()
        .iter()
        .any(|e| e.oid == OID_X509_EXT_NAME_CONSTRAINTS)
    {
        return Err("it has name constraints".into());
    }
    if let Some(e) = ours.extensions().iter().find(|e| {
        e.critical
            && !theirs
                .extensions()
                .iter()
                .any(|t| t.critical && t.oid == e.oid)
    }) {
        return Err(format!(
            "it has a critical extension kubeadm's has not ({})",
            e.oid
        ));
    }
    let (from, to) = (
        ours.validity().not_before.timestamp(),
        ours.validity().not_after.timestamp(),
    );
    if from > ASN1Time::now().timestamp() + SKEW {
        return Err(format!(
            "it is not valid before {}",
            super::handback::until(ours.validity().not_before)
        ));
    }
    // The backdate, and as much again: kubeadm starts a kubeconfig's
    // certificate at its CA's notBefore, seconds before it backdates the
    // rest (admin.conf on a fresh node: a year, 5 minutes and 1 second).
    if to.saturating_sub(from) > lifetime.saturating_add(2 * SKEW) {
        return Err(format!(
            "it lasts {}, longer than certsync's lifetime for it ({})",
            span(to.saturating_sub(from)),
            span(lifetime)
        ));
    }
    Ok(())
}

/// A span of seconds: in days from a day on (what a lifetime is usually
/// given in), else as `--set lifetime=` takes it.
fn span(secs: i64) -> String {
    if secs >= 86_400 {
        format!("{} days", secs / 86_400)
    } else {
        humantime::format_duration(std::time::Duration::from_secs(secs.max(0).unsigned_abs()))
            .to_string()
    }
}

fn shown(what: Option<String>) -> String {
    what.unwrap_or_else(|| "none".into())
}

/// An ExtKeyUsage's purposes, by name (an unnamed one by OID), sorted.
fn eku_names(e: &x509_parser::extensions::ExtendedKeyUsage) -> Vec<String> {
    let mut names: Vec<String> = [
        (e.any, "any"),
        (e.server_auth, "serverAuth"),
        (e.client_auth, "clientAuth"),
        (e.code_signing, "codeSigning"),
        (e.email_protection, "emailProtection"),
        (e.time_stamping, "timeStamping"),
        (e.ocsp_signing, "OCSPSigning"),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, n)| n.to_owned())
    .chain(e.other.iter().map(|o| o.to_string()))
    .collect();
    names.sort();
    names.dedup();
    names
}

/// certsync's lifetime (seconds) for the mapping whose `field`
/// (`update-pair` or `update-kubeconfig`) is `value`, in certsync's
/// configuration `config` (YAML, as adopt wrote it): its `lifetime`, or
/// certsync's default year when it has none; kubeadm's year when the
/// configuration or the value cannot be read.
pub fn lifetime(config: Option<&[u8]>, field: &str, value: &str) -> i64 {
    let found = || -> Option<i64> {
        let text = std::str::from_utf8(config?).ok()?;
        let doc: serde_yaml_ng::Value = crate::files::parse_yaml(text).ok()?;
        let mapping = doc
            .get("mappings")?
            .as_sequence()?
            .iter()
            .find(|m| m.get(field).and_then(|v| v.as_str()) == Some(value))?;
        match mapping.get("lifetime") {
            None => Some(KUBEADM_LIFETIME),
            Some(v) => {
                let d = crate::cli::duration(0, crate::cli::YEAR * 100)(v.as_str()?).ok()?;
                i64::try_from(d.as_secs()).ok()
            }
        }
    };
    found().unwrap_or(KUBEADM_LIFETIME)
}
