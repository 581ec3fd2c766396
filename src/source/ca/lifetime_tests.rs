//! The live pair against `lifetime=`: a certificate issued with another
//! lifetime (a cautious rollout's 8 minutes, then the defaults) is issued
//! again at once, whichever way the lifetime changed; one the CA cut short
//! is not (it would be issued again at every check); every certificate
//! certsync issues passes the rule itself (no loop), `keep-key` keeps its
//! key across the change; a changed `key-alg=` (or RSA size) counts too.

use super::*;
use crate::source::csr::CsrError;

/// `issue` of `spec` as the live bundle.
fn live(spec: &CaSpec) -> Bundle {
    issue(spec, None, SKEW).unwrap().bundle
}

/// Whether `live` satisfies `spec` now, as the source's check says: why not.
fn judged(spec: &CaSpec, live: &Bundle) -> Result<Window, CaError> {
    let now = SystemTime::now();
    let w = material::wanted(spec, now, SKEW).unwrap();
    live_ok(&w, live, now, SKEW)
}

/// Whether `e` is the reason of a certificate issued with `live`, `wanted`
/// asked for (minutes).
fn changed(e: &CaError, live: u64, wanted: u64) -> bool {
    matches!(e, CaError::LifetimeOther { live: l, wanted: w }
        if *l == Duration::from_secs(live * 60) && *w == Duration::from_secs(wanted * 60))
}

/// The operator's rollout on node.sh: adopt with `lifetime=8m`, then again
/// with the defaults. The 8-minute pair passed every other check and was
/// renewed at 70-90 % of 8 minutes, with less than client-go's 5-minute
/// poll left: expired client certificates in the scheduler and
/// controller-manager. Both directions count, and the reason names both
/// lifetimes.
#[test]
fn a_live_certificate_of_another_lifetime_is_issued_again() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    let short = spec(&ca.prefix, &format!("{SERVER},lifetime=8m"));
    let year = spec(&ca.prefix, SERVER);
    let e = judged(&year, &live(&short)).unwrap_err();
    assert!(changed(&e, 8, 8760 * 60), "{e}");
    // The reason the guide and the mapping reference quote.
    assert_eq!(e.to_string(), "lifetime changed: live 8m, wanted 8760h");
    let e = judged(&short, &live(&year)).unwrap_err();
    assert!(changed(&e, 8760 * 60, 8), "{e}");
    let ten = spec(&ca.prefix, &format!("{SERVER},lifetime=10m"));
    let thirty = spec(&ca.prefix, &format!("{SERVER},lifetime=30m"));
    let e = judged(&thirty, &live(&ten)).unwrap_err();
    assert!(changed(&e, 10, 30), "{e}");
    assert!(matches!(
        judged(&ten, &live(&thirty)),
        Err(CaError::LifetimeOther { .. })
    ));
    // One minute more than a 10-minute pair's backdate (1 min) still counts.
    let twelve = spec(&ca.prefix, &format!("{SERVER},lifetime=12m"));
    assert!(matches!(
        judged(&twelve, &live(&ten)),
        Err(CaError::LifetimeOther { .. })
    ));
    assert!(matches!(
        judged(&ten, &live(&twelve)),
        Err(CaError::LifetimeOther { .. })
    ));
}

/// Whatever the lifetime, what certsync issues satisfies the mapping that
/// issued it: otherwise every check (and every restart) would issue again.
/// Includes a CA younger than the backdate, whose notBefore the
/// certificate's is clamped to.
#[test]
fn every_issued_lifetime_passes_its_own_rule() {
    let rsa8 = String::from_utf8(fixture_key(FixtureKey::RsaPkcs8)).unwrap();
    for ca_age in [time::Duration::minutes(5), time::Duration::seconds(20)] {
        let d = tempfile::tempdir().unwrap();
        let ca = ca_with(d.path(), &rsa8, &rsa8, &rcgen::PKCS_RSA_SHA256, |p| {
            p.not_before = OffsetDateTime::now_utc() - ca_age;
        });
        for lifetime in ["1s", "9s", "10m", "50m", "55m", "8760h", "87600h"] {
            let s = spec(&ca.prefix, &format!("{SERVER},lifetime={lifetime}"));
            judged(&s, &live(&s))
                .unwrap_or_else(|e| panic!("lifetime={lifetime}, CA aged {ca_age}: {e}"));
        }
        // A year's pair from a CA 20 s old (notBefore clamped to the CA's)
        // is still told apart from an 8-minute wish, and the reverse.
        let short = spec(&ca.prefix, &format!("{SERVER},lifetime=8m"));
        let year = spec(&ca.prefix, SERVER);
        assert!(
            matches!(
                judged(&short, &live(&year)),
                Err(CaError::LifetimeOther { .. })
            ),
            "CA aged {ca_age}"
        );
        assert!(
            matches!(
                judged(&year, &live(&short)),
                Err(CaError::LifetimeOther { .. })
            ),
            "CA aged {ca_age}"
        );
    }
}

/// A pair the CA cut short (it ends with the CA) is not issued again: a new
/// one would end there too, at every check. Unless the lifetime asked for
/// now ends before the CA does: then the new pair is not cut, and differs.
#[test]
fn a_pair_capped_at_the_ca_is_not_issued_again() {
    let rsa8 = String::from_utf8(fixture_key(FixtureKey::RsaPkcs8)).unwrap();
    let d = tempfile::tempdir().unwrap();
    let ca = ca_with(d.path(), &rsa8, &rsa8, &rcgen::PKCS_RSA_SHA256, |p| {
        p.not_after = OffsetDateTime::now_utc() + time::Duration::hours(1);
    });
    let year = spec(&ca.prefix, SERVER);
    let capped = issue(&year, None, SKEW).unwrap();
    assert!(capped.capped);
    judged(&year, &capped.bundle).unwrap();
    let two_hours = spec(&ca.prefix, &format!("{SERVER},lifetime=2h"));
    judged(&two_hours, &capped.bundle).unwrap();
    let ten = spec(&ca.prefix, &format!("{SERVER},lifetime=10m"));
    let capped_end = capped
        .bundle
        .get(CERT_FILE)
        .and_then(validate::leaf_of)
        .map(|l| l.not_after);
    let e = judged(&ten, &capped.bundle).unwrap_err();
    assert!(
        matches!(&e, CaError::LifetimeCutByCa { ends, wanted }
            if Some(*ends) == capped_end && *wanted == Duration::from_secs(600)),
        "{e}"
    );
}

/// `keep-key` keeps the key across a change of lifetime (the identity is
/// the same, the key certified by the CA), and the new pair has the new
/// lifetime.
#[test]
fn keep_key_keeps_its_key_across_a_lifetime_change() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    let short = spec(&ca.prefix, &format!("{SERVER},lifetime=8m,keep-key"));
    let year = spec(&ca.prefix, &format!("{SERVER},keep-key"));
    let first = live(&short);
    let again = issue(&year, Some(&first), SKEW).unwrap();
    assert_eq!(again.bundle.get(KEY_FILE), first.get(KEY_FILE));
    let span = again.window.not_after - again.window.not_before;
    assert_eq!(span, 365 * 86_400 + 300);
    judged(&year, &again.bundle).unwrap();
}

/// The other `ca:` option that changes what is in the certificate beside
/// the identity, `key-alg=`, was already held against the live pair by
/// `check` (the RSA size included): checked here with the lifetime rule
/// beside it, so that a live pair is judged on all of them.
#[test]
fn a_changed_key_algorithm_or_rsa_size_is_issued_again() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    let opts = |alg: &str| spec(&ca.prefix, &format!("{SERVER},key-alg={alg}"));
    let p256 = live(&opts("ecdsa-p256"));
    let e = judged(&opts("ed25519"), &p256).unwrap_err();
    assert!(
        matches!(&e, CaError::Csr(c) if matches!(&**c, CsrError::IssuedKeyAlg { got, .. } if got.to_string() == "ecdsa-p256")),
        "{e}"
    );
    let rsa = live(&opts("rsa-2048"));
    let e = judged(&opts("rsa-3072"), &rsa).unwrap_err();
    assert!(
        matches!(&e, CaError::Csr(c) if matches!(&**c, CsrError::IssuedKeyAlg { got, .. } if got.to_string() == "rsa-2048")),
        "{e}"
    );
    judged(&opts("rsa-2048"), &rsa).unwrap();
}
