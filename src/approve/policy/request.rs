//! Checks 1 to 7 (see [`super`]): who asks, and what the request holds.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

use super::ranges::canonical;
use super::verdict::{
    Check, Facts, MAX_REQUEST_BYTES, NODE_PREFIX, NODES_GROUP, Policy, Verdict, deny,
};
use crate::source::csr::KeyAlg;
use crate::x509::{COMMON_NAME, ORGANIZATION, Request, SERVER_AUTH};
use x509_cert::der::flagset::FlagSet;
use x509_cert::ext::pkix::KeyUsages;

/// Check 1. Returns NAME.
pub(super) fn requester<'a>(
    csr: &'a CertificateSigningRequest,
    facts: &mut Facts,
) -> Result<&'a str, Verdict> {
    let username = csr.spec.username.as_deref().unwrap_or_default();
    let Some(name) = username.strip_prefix(NODE_PREFIX).filter(|n| !n.is_empty()) else {
        return Err(deny(
            Check::Requester,
            format!("requested by {username:?}, not a node (system:node:NAME)"),
        ));
    };
    facts.node = Some(name.to_owned());
    let groups = csr.spec.groups.as_deref().unwrap_or_default();
    if !groups.iter().any(|g| g == NODES_GROUP) {
        return Err(deny(
            Check::Requester,
            format!("requester {username:?} is not in group {NODES_GROUP}"),
        ));
    }
    Ok(name)
}

/// Check 2, into `facts`; one larger than any kubelet's is refused unread
/// (kube-apiserver takes bodies up to ~3 MB).
pub(super) fn read(csr: &CertificateSigningRequest, facts: &mut Facts) -> Result<Request, Verdict> {
    let size = csr.spec.request.0.len();
    if size > MAX_REQUEST_BYTES {
        return Err(deny(
            Check::Request,
            format!("request of {size} bytes; at most {MAX_REQUEST_BYTES} read"),
        ));
    }
    let req = match Request::read(&csr.spec.request.0) {
        Ok(req) => req,
        Err(e) if e.is_san() => return Err(deny(Check::Sans, e.to_string())),
        Err(e) => return Err(deny(Check::Request, e.to_string())),
    };
    facts.key = (req.facts.key_alg).map_or_else(|| "unknown".to_owned(), |a| a.to_string());
    facts.dns = req.dns.iter().map(|d| d.to_ascii_lowercase()).collect();
    facts.ips = req.ips.iter().copied().map(canonical).collect();
    Ok(req)
}

/// Check 3, before 4: ring refuses weak RSA keys outright, which would
/// read as a forged signature.
pub(super) fn key(req: &Request) -> Result<(), Verdict> {
    match req.facts.key_alg {
        Some(KeyAlg::Rsa(bits)) if bits < 2048 => Err(deny(
            Check::Key,
            format!("RSA key of {bits} bits; at least 2048 required"),
        )),
        Some(_) => Ok(()),
        None => Err(deny(
            Check::Key,
            "key type or curve not allowed (RSA >= 2048, ECDSA P-256/P-384, Ed25519)",
        )),
    }
}

/// Check 4.
pub(super) fn signature(req: &Request) -> Result<(), Verdict> {
    req.verify_signature()
        .map_err(|e| deny(Check::Signature, e.to_string()))
}

/// Check 5.
pub(super) fn subject(req: &Request, username: &str) -> Result<(), Verdict> {
    // Two attributes, each of these (in either order).
    let want = [(COMMON_NAME, username), (ORGANIZATION, NODES_GROUP)];
    let subject = &req.facts.subject;
    let has = |(oid, value): &(&str, &str)| subject.iter().any(|(o, v)| o == oid && v == value);
    if subject.len() == 2 && want.iter().all(has) {
        return Ok(());
    }
    let subject: Vec<String> = (subject.iter())
        .map(|(oid, v)| format!("{oid}={v:?}"))
        .collect();
    Err(deny(
        Check::Subject,
        format!(
            "subject is [{}], not exactly CN={username:?}, O={NODES_GROUP}",
            subject.join(", ")
        ),
    ))
}

/// Check 6: `spec.usages` (what the signer issues) and the request's own.
pub(super) fn usages(spec: &[String], req: &Request) -> Result<(), Verdict> {
    let rsa = matches!(req.facts.key_alg, Some(KeyAlg::Rsa(_)));
    let mut usages: Vec<&str> = spec.iter().map(String::as_str).collect();
    usages.sort_unstable();
    let exact = ["digital signature", "server auth"];
    let with_ke = ["digital signature", "key encipherment", "server auth"];
    if usages != exact && !(rsa && usages == with_ke) {
        let allowed = if rsa {
            "digital signature and server auth, optionally key encipherment (RSA)"
        } else {
            "exactly digital signature and server auth"
        };
        return Err(deny(
            Check::Usages,
            format!("usages {spec:?}; a kubelet serving certificate has {allowed}"),
        ));
    }
    // The key usage bits as x509-cert names them.
    let bits = FlagSet::<KeyUsages>::new_truncated(req.facts.key_usage.unwrap_or(0));
    let key_usage: Vec<String> = bits.into_iter().map(|f| format!("{f:?}")).collect();
    let ku_ok =
        (key_usage.iter()).all(|u| u == "DigitalSignature" || (rsa && u == "KeyEncipherment"));
    let eku = req.facts.ext_key_usage.clone().unwrap_or_default();
    let ca = req.facts.basic_constraints.map(|(ca, _)| ca);
    if !ku_ok || !eku.iter().all(|o| o == SERVER_AUTH) || ca == Some(true) {
        return Err(deny(
            Check::Usages,
            format!(
                "the request itself asks for key usages {:?}, extended key usages {:?}, CA {:?}; only digital signature{}, server auth and no CA are allowed",
                key_usage,
                eku,
                ca,
                if rsa { ", key encipherment" } else { "" },
            ),
        ));
    }
    Ok(())
}

/// Check 7.
pub(super) fn expiration(csr: &CertificateSigningRequest, policy: &Policy) -> Result<(), Verdict> {
    if let (Some(max), Some(secs)) = (policy.max_expiration, csr.spec.expiration_seconds)
        && u64::try_from(secs).unwrap_or(0) > max.as_secs()
    {
        return Err(deny(
            Check::Expiration,
            format!(
                "expirationSeconds {secs} is over the maximum of {}",
                max.as_secs()
            ),
        ));
    }
    Ok(())
}
