//! adopt's options judged before it writes anything, where a mistake would otherwise
//! surface only inside certsync's pod, after adopt waited its whole `--ready-timeout`.

use std::net::SocketAddr;
use std::path::Path;

use super::error::{KubeadmError, Refusal};

/// Why a string is no image reference, as [`Refusal::Image`] says it.
type Why = &'static str;
pub(super) const EMPTY: Why = "empty";
pub(super) const TOO_LONG: Why = "the name is longer than 255 characters";
pub(super) const UPPERCASE: Why = "a repository path must be lowercase";
pub(super) const PATH: Why = "a path component is not [a-z0-9] joined by '.', '_', '__' or '-'";
pub(super) const DOMAIN: Why = "the registry is not a host name or address with an optional port";
pub(super) const TAG: Why = "a tag is [A-Za-z0-9_] then up to 127 of [A-Za-z0-9_.-]";
pub(super) const DIGEST: Why = "a digest is ALGORITHM:HEX with at least 32 hex digits";

/// `image` parses as an image reference (`[DOMAIN/]PATH[:TAG][@DIGEST]`), or is refused.
pub fn image(dir: &Path, image: &str) -> Result<(), KubeadmError> {
    reference(image).map_err(|why| {
        let image = crate::escape(image).into_owned();
        KubeadmError::refused(dir, Refusal::Image { image, why })
    })
}

/// Whether `s` matches the whole of `re`; a pattern that does not compile matches nothing.
fn whole(re: &str, s: &str) -> bool {
    regex::Regex::new(&format!("^(?:{re})$")).is_ok_and(|r| r.is_match(s))
}

fn reference(s: &str) -> Result<(), Why> {
    if s.is_empty() {
        return Err(EMPTY);
    }
    let (rest, digest) = match s.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (s, None),
    };
    let alg = "[A-Za-z][A-Za-z0-9]*";
    if digest.is_some_and(|d| !whole(&format!("{alg}(?:[-_+.]{alg})*:[0-9A-Fa-f]{{32,}}"), d)) {
        return Err(DIGEST);
    }
    // A tag follows the last ':' after the last '/' (one before is the registry's port).
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if tag.is_some_and(|t| !whole("[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", t)) {
        return Err(TAG);
    }
    if name.len() > 255 {
        return Err(TOO_LONG);
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    // The first component is a registry when it looks like a host (distribution's rule).
    if parts.len() > 1
        && (parts[0].contains(['.', ':'])
            || parts[0] == "localhost"
            || parts[0] != parts[0].to_lowercase())
    {
        domain(parts.remove(0))?;
    }
    for p in parts {
        if p.chars().any(|c| c.is_ascii_uppercase()) {
            return Err(UPPERCASE);
        }
        if !whole("[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*", p) {
            return Err(PATH);
        }
    }
    Ok(())
}

fn domain(d: &str) -> Result<(), Why> {
    let (host, port) = match d.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || d.starts_with('[') => (h, Some(p)),
        _ => (d, None),
    };
    if port.is_some_and(|p| !whole("[0-9]+", p)) {
        return Err(DOMAIN);
    }
    let label = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?";
    let ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => whole(&format!(r"{label}(?:\.{label})*"), host),
    };
    if ok { Ok(()) } else { Err(DOMAIN) }
}

/// Whether the port at `addr` is free (`false`: something listens there); `Err` when the
/// node has no such address. Bound with `SO_REUSEADDR` and never listened on: only a
/// listener holds the port against it, never another check at the same moment.
pub fn admin_addr(dir: &Path, addr: SocketAddr) -> Result<bool, KubeadmError> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    };
    let bound = socket.and_then(|s| {
        s.set_reuseaddr(true)?;
        s.bind(addr)
    });
    match bound {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Ok(false),
        Err(source) => Err(KubeadmError::refused(
            dir,
            Refusal::NoSuchAddress { addr, source },
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The refusal of the node at `/`.
    fn refused<T: std::fmt::Debug>(r: Result<T, KubeadmError>) -> Refusal {
        match r {
            Err(KubeadmError::Refused { reason, .. }) => *reason,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn image_references_as_the_container_runtime_parses_them() {
        for ok in [
            "certsync",
            "certsync:0.1.0",
            "registry.example.com/platform/certsync:0.1.0",
            "localhost:5000/certsync",
            "localhost/certsync:dev",
            "10.0.0.1:5000/a/b__c/d-e.f:v1_2-3",
            "[fd00::1]:5000/certsync:x",
            "ghcr.io/org/certsync@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "ghcr.io/org/certsync:0.2.0@sha256:0123456789abcdef0123456789abcdef",
            "a---b/c",
        ] {
            assert!(reference(ok).is_ok(), "{ok}: {:?}", reference(ok));
        }
        let bad: [(&str, Why); 16] = [
            ("", EMPTY),
            ("registry.example.com/Platform/certsync", UPPERCASE),
            ("certsync:", TAG),
            ("certsync:-x", TAG),
            ("certsync: 1", TAG),
            ("certsync@sha256:abc", DIGEST),
            ("certsync@sha256", DIGEST),
            ("reg.example.com:port/certsync", DOMAIN),
            ("-reg.example.com/certsync", DOMAIN),
            ("a/b..c", PATH),
            ("a/_b", PATH),
            ("a/b___c", PATH),
            ("a//b", PATH),
            ("reg.example.com/certsync/", PATH),
            ("https://reg.example.com/certsync", DOMAIN),
            (&format!("a/{}", "b".repeat(260)), TOO_LONG),
        ];
        for (bad, want) in bad {
            let got = refused(image(Path::new("/"), bad));
            assert!(
                matches!(got, Refusal::Image { why, .. } if why == want),
                "{bad:?}: {got:?}"
            );
        }
        assert!(matches!(
            refused(image(Path::new("/"), "reg.example.com/Bad\x1b")),
            Refusal::Image { image, why: UPPERCASE } if image == "reg.example.com/Bad\\u{1b}"
        ));
    }

    #[test]
    fn an_admin_address_the_node_lacks_or_a_taken_port_is_told_apart() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = held.local_addr().expect("addr");
        assert!(!admin_addr(Path::new("/"), addr).expect("in use"));
        drop(held);
        assert!(admin_addr(Path::new("/"), addr).expect("free"));
        // Another check at the same moment (another adopt, a test beside
        // this one) holds no port: its bound, unlistened socket is no
        // listener.
        let checking = tokio::net::TcpSocket::new_v4().expect("socket");
        checking.set_reuseaddr(true).expect("reuse");
        checking.bind(addr).expect("bind");
        assert!(admin_addr(Path::new("/"), addr).expect("free while another checks"));
        drop(checking);
        // TEST-NET-3: no interface of this machine has it.
        let absent: SocketAddr = "203.0.113.77:9814".parse().expect("addr");
        assert!(matches!(
            refused(admin_addr(Path::new("/"), absent)),
            Refusal::NoSuchAddress { .. }
        ));
    }
}
