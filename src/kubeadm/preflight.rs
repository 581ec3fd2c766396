//! What adopt judges of its own options before it writes anything, where
//! the mistake would otherwise surface only inside certsync's pod, after
//! adopt had waited its whole `--ready-timeout` with certsync down: an
//! image reference the container runtime cannot parse, and an admin
//! address the node cannot listen on (one it does not have, or a port
//! another process holds).

use std::net::SocketAddr;

/// An option adopt refuses before anything is written.
#[derive(Debug, thiserror::Error)]
pub enum Unfit {
    #[error(
        "--image {image:?} is not an image reference ({why}): NAME[:TAG][@DIGEST], e.g. \
         registry.example.com/platform/certsync:0.1.0"
    )]
    Image { image: String, why: ImageProblem },
    #[error(
        "--admin-addr {addr}: this node cannot listen there ({source}): certsync's pod would \
         exit at start; give an address the node has (ip -brief address), or 127.0.0.1"
    )]
    NoSuchAddress {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "--admin-addr {addr}: another process listens on that port, not certsync's pod: \
         certsync's pod would exit at start; choose another port (ss -ltnp shows who holds it)"
    )]
    PortTaken { addr: SocketAddr },
}

/// Why a string is no image reference (distribution's grammar:
/// `[DOMAIN/]PATH[:TAG][@DIGEST]`, as containerd and CRI-O parse it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ImageProblem {
    #[error("empty")]
    Empty,
    #[error("the name is longer than 255 characters")]
    TooLong,
    #[error("a repository path must be lowercase")]
    Uppercase,
    #[error("a path component is not [a-z0-9] joined by '.', '_', '__' or '-'")]
    Path,
    #[error("the registry is not a host name or address with an optional port")]
    Domain,
    #[error("a tag is [A-Za-z0-9_] then up to 127 of [A-Za-z0-9_.-]")]
    Tag,
    #[error("a digest is ALGORITHM:HEX with at least 32 hex digits")]
    Digest,
}

/// `image` parses as an image reference, or why not.
pub fn image(image: &str) -> Result<(), Unfit> {
    reference(image).map_err(|why| Unfit::Image {
        image: crate::escape(image).into_owned(),
        why,
    })
}

fn reference(s: &str) -> Result<(), ImageProblem> {
    if s.is_empty() {
        return Err(ImageProblem::Empty);
    }
    let (rest, digest) = match s.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (s, None),
    };
    if let Some(d) = digest {
        let (alg, hex) = d.split_once(':').ok_or(ImageProblem::Digest)?;
        let alg_ok = alg.split(['+', '.', '_', '-']).all(|c| {
            c.starts_with(|ch: char| ch.is_ascii_alphabetic())
                && c.chars().all(|ch| ch.is_ascii_alphanumeric())
        });
        if !alg_ok || hex.len() < 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(ImageProblem::Digest);
        }
    }
    // A tag follows the last ':' that comes after the last '/' (a ':'
    // before it is the registry's port).
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(t) = tag {
        let mut chars = t.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !first_ok
            || t.len() > 128
            || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        {
            return Err(ImageProblem::Tag);
        }
    }
    if name.len() > 255 {
        return Err(ImageProblem::TooLong);
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    // The first component is a registry when it looks like a host: it has
    // a '.' or a ':', or is `localhost` (distribution's rule); a path
    // otherwise.
    if parts.len() > 1
        && (parts[0].contains(['.', ':'])
            || parts[0] == "localhost"
            || parts[0] != parts[0].to_lowercase())
    {
        domain(parts.remove(0))?;
    }
    for p in parts {
        path_component(p)?;
    }
    Ok(())
}

fn domain(d: &str) -> Result<(), ImageProblem> {
    let (host, port) = match d.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || d.starts_with('[') => (h, Some(p)),
        _ => (d, None),
    };
    if let Some(p) = port
        && (p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()))
    {
        return Err(ImageProblem::Domain);
    }
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6
            .parse::<std::net::Ipv6Addr>()
            .map(drop)
            .map_err(|_| ImageProblem::Domain);
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if host.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(ImageProblem::Domain)
    }
}

/// `[a-z0-9]+` joined by `.`, `_`, `__` or any number of `-`.
fn path_component(p: &str) -> Result<(), ImageProblem> {
    if p.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(ImageProblem::Uppercase);
    }
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let bytes: Vec<char> = p.chars().collect();
    let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) else {
        return Err(ImageProblem::Path);
    };
    if !alnum(first) || !alnum(last) {
        return Err(ImageProblem::Path);
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        // A separator run: '.', '_', '__' or '-'+, between alphanumerics.
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let sep: String = bytes[start..i].iter().collect();
        let ok = sep == "." || sep == "_" || sep == "__" || sep.chars().all(|c| c == '-');
        if !ok {
            return Err(ImageProblem::Path);
        }
    }
    Ok(())
}

/// Whether the node can listen on `addr` now: `Ok(true)` when the port is
/// free, `Ok(false)` when something already listens there (certsync's
/// running pod, or another process: the caller asks it), `Err` when the
/// node has no such address. Bound with `SO_REUSEADDR` and never
/// listened on: only a listener holds the port against it, never another
/// check at the same moment.
pub fn admin_addr(addr: SocketAddr) -> Result<bool, Unfit> {
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
        Err(source) => Err(Unfit::NoSuchAddress { addr, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for (bad, why) in [
            ("", ImageProblem::Empty),
            (
                "registry.example.com/Platform/certsync",
                ImageProblem::Uppercase,
            ),
            ("certsync:", ImageProblem::Tag),
            ("certsync:-x", ImageProblem::Tag),
            ("certsync: 1", ImageProblem::Tag),
            ("certsync@sha256:abc", ImageProblem::Digest),
            ("certsync@sha256", ImageProblem::Digest),
            ("reg.example.com:port/certsync", ImageProblem::Domain),
            ("-reg.example.com/certsync", ImageProblem::Domain),
            ("a/b..c", ImageProblem::Path),
            ("a/_b", ImageProblem::Path),
            ("a/b___c", ImageProblem::Path),
            ("a//b", ImageProblem::Path),
            ("reg.example.com/certsync/", ImageProblem::Path),
            ("https://reg.example.com/certsync", ImageProblem::Domain),
        ] {
            assert_eq!(reference(bad), Err(why), "{bad:?}");
        }
        let long = format!("a/{}", "b".repeat(260));
        assert_eq!(reference(&long), Err(ImageProblem::TooLong));
        assert!(matches!(
            image("reg.example.com/Bad"),
            Err(Unfit::Image {
                why: ImageProblem::Uppercase,
                ..
            })
        ));
    }

    #[test]
    fn an_admin_address_the_node_lacks_or_a_taken_port_is_told_apart() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = held.local_addr().expect("addr");
        assert!(!admin_addr(addr).expect("in use"));
        drop(held);
        assert!(admin_addr(addr).expect("free"));
        // Another check at the same moment (another adopt, a test beside
        // this one) holds no port: its bound, unlistened socket is no
        // listener.
        let checking = tokio::net::TcpSocket::new_v4().expect("socket");
        checking.set_reuseaddr(true).expect("reuse");
        checking.bind(addr).expect("bind");
        assert!(admin_addr(addr).expect("free while another checks"));
        drop(checking);
        // TEST-NET-3: no interface of this machine has it.
        let absent: SocketAddr = "203.0.113.77:9814".parse().expect("addr");
        assert!(matches!(
            admin_addr(absent),
            Err(Unfit::NoSuchAddress { .. })
        ));
    }
}
