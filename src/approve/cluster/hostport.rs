//! How kubeadm reads the addresses it puts in the API server's
//! certificate: `controlPlaneEndpoint` with `ParseHostPort`
//! (cmd/kubeadm/app/util/endpoint.go) and every address with
//! `netutils.ParseIPSloppy`. The approver reserves exactly what kubeadm
//! reads, so these follow Go's code, not the RFCs.

use std::net::IpAddr;

use crate::approve::error::ApproveError;

/// A host as kubeadm puts it in the API server's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Host {
    Ip(IpAddr),
    Name(String),
}

impl Host {
    pub(super) fn record(
        self,
        ips: &mut Vec<(IpAddr, String)>,
        names: &mut Vec<(String, String)>,
        what: String,
    ) {
        match self {
            Self::Ip(ip) => ips.push((ip, what)),
            Self::Name(name) => names.push((name, what)),
        }
    }
}

/// kubeadm's `ParseHostPort`: `net.SplitHostPort`, and when that fails (a
/// bare IPv6 address, `[v6]` without a port, no colon) the whole string is
/// the host; a port is checked only when present; the host is an address
/// by `ParseIPSloppy`, else a DNS-1123 subdomain, else refused. Linear.
pub(super) fn parse_host_port(endpoint: &str) -> Result<Host, ApproveError> {
    let refused = |kubeadm_says| ApproveError::Endpoint {
        endpoint: endpoint.to_owned(),
        kubeadm_says,
    };
    let (host, port) = split_host_port(endpoint).unwrap_or((endpoint, ""));
    if !port.is_empty() && !valid_port(port) {
        return Err(refused(
            "port must be a valid number between 1 and 65535, inclusive",
        ));
    }
    if let Some(ip) = parse_ip_sloppy(host) {
        return Ok(Host::Ip(ip));
    }
    if dns1123_subdomain(host) {
        return Ok(Host::Name(host.to_owned()));
    }
    Err(refused(
        "host must be a valid IP address or a valid RFC-1123 DNS subdomain",
    ))
}

/// Go's `net.SplitHostPort`: the port follows the last colon; a host with
/// a colon must be bracketed, the brackets right before that colon, and no
/// other bracket anywhere. `None` where Go returns an error.
fn split_host_port(s: &str) -> Option<(&str, &str)> {
    let colon = s.rfind(':')?;
    let (host, after_open, after_close) = if let Some(rest) = s.strip_prefix('[') {
        // The first ']' must be just before the last ':'.
        let end = rest.find(']')? + 1;
        if end + 1 != colon {
            return None;
        }
        (&s[1..end], 1, end + 1)
    } else {
        let host = &s[..colon];
        if host.contains(':') {
            return None;
        }
        (host, 0, 0)
    };
    if s[after_open..].contains('[') || s[after_close..].contains(']') {
        return None;
    }
    Some((host, &s[colon + 1..]))
}

/// A port as kubeadm v1.36 reads it: digits only, 1 to 65535 (checked
/// with kubeadm v1.36.2: `+6443`, `-1`, `0x19`, `0`, `65536` and a
/// 23-digit port are refused by ParseHostPort itself; `06443` is taken).
fn valid_port(port: &str) -> bool {
    // Rust's parser takes a leading `+`, Go's does not.
    port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok_and(|n| n >= 1)
}

/// `validation.IsDNS1123Subdomain`: at most 253 characters, labels of
/// lower-case letters, digits and '-', alphanumeric at both ends (no
/// per-label length limit, no trailing dot).
pub(crate) fn dns1123_subdomain(s: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            matches!((b.first(), b.last()), (Some(&f), Some(&l)) if alnum(f) && alnum(l))
                && b.iter().all(|&c| alnum(c) || c == b'-')
        })
}

/// `validation.IsDNS1123Label` (a namespace's rule): one label of at most 63.
pub(crate) fn dns1123_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && dns1123_subdomain(s)
}

/// An IP address as kubeadm reads certSANs and controlPlaneEndpoint
/// (`k8s.io/utils/net.ParseIPSloppy`, Go's `net.ParseIP` before 1.17): an
/// IPv4 octet is any run of decimal digits worth at most 255, leading
/// zeros and all; an IPv6 group any run of hex digits worth at most
/// 0xffff, the form perhaps ending in an IPv4 part. A reader taking fewer
/// forms leaves addresses of the API server's certificate free for a node.
/// Linear; the first `.` or `:` picks the family, as Go's does.
pub(super) fn parse_ip_sloppy(s: &str) -> Option<IpAddr> {
    match s.bytes().find(|b| *b == b'.' || *b == b':')? {
        b'.' => sloppy_v4(s.as_bytes()).map(IpAddr::from),
        _ => sloppy_v6(s.as_bytes()).map(IpAddr::from),
    }
}

/// A run of digits in `radix` at the start of `s`: its value (at most
/// `max`, else `None`) and its length (at least one).
fn number(s: &[u8], radix: u32, max: u32) -> Option<(u32, usize)> {
    let mut n: u32 = 0;
    let mut len = 0;
    for d in s.iter().map_while(|b| char::from(*b).to_digit(radix)) {
        n = n * radix + d;
        if n > max {
            return None;
        }
        len += 1;
    }
    (len > 0).then_some((n, len))
}

fn sloppy_v4(mut s: &[u8]) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    for (i, octet) in out.iter_mut().enumerate() {
        if i > 0 {
            s = s.strip_prefix(b".")?;
        }
        let (n, len) = number(s, 10, 0xff)?;
        *octet = u8::try_from(n).ok()?;
        s = &s[len..];
    }
    s.is_empty().then_some(out)
}

fn sloppy_v6(mut s: &[u8]) -> Option<[u8; 16]> {
    let mut ip = [0u8; 16];
    let mut ellipsis = None;
    if let Some(rest) = s.strip_prefix(b"::") {
        ellipsis = Some(0);
        s = rest;
        if s.is_empty() {
            return Some(ip);
        }
    }
    let mut i = 0;
    while i < 16 {
        let (n, len) = number(s, 16, 0xffff)?;
        if s.get(len) == Some(&b'.') {
            // A trailing IPv4 part, where there is room for it.
            if (ellipsis.is_none() && i != 12) || i + 4 > 16 {
                return None;
            }
            ip[i..i + 4].copy_from_slice(&sloppy_v4(s)?);
            s = &[];
            i += 4;
            break;
        }
        ip[i..i + 2].copy_from_slice(&u16::try_from(n).ok()?.to_be_bytes());
        i += 2;
        s = &s[len..];
        if s.is_empty() {
            break;
        }
        s = s.strip_prefix(b":").filter(|r| !r.is_empty())?;
        if let Some(rest) = s.strip_prefix(b":") {
            if ellipsis.is_some() {
                return None;
            }
            ellipsis = Some(i);
            s = rest;
            if s.is_empty() {
                break;
            }
        }
    }
    if !s.is_empty() {
        return None;
    }
    match ellipsis {
        // The ellipsis stands for the groups not written (at least one).
        Some(at) if i < 16 => {
            let gap = 16 - i;
            ip.copy_within(at..i, at + gap);
            ip[at..at + gap].fill(0);
            Some(ip)
        }
        None if i == 16 => Some(ip),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Host {
        Host::Ip(s.parse().unwrap())
    }

    fn name(s: &str) -> Host {
        Host::Name(s.to_owned())
    }

    /// Every spelling of an endpoint, read as kubeadm v1.36's
    /// `ParseHostPort` reads it (one read otherwise left an address in the
    /// API server's certificate free for a node). Every row was
    /// checked with kubeadm v1.36.2 (`kubeadm init phase certs apiserver`
    /// with each endpoint): what is read here is what it put in the API
    /// server's certificate, and what is refused here it refused. A bare
    /// IPv6 address is no host:port, so SplitHostPort fails and the whole
    /// string is the host.
    #[test]
    fn control_plane_endpoints_are_read_as_kubeadm_reads_them() {
        let read = [
            // Bare IPv6, long zero runs, upper case.
            ("fd00:1::141", ip("fd00:1::141")),
            ("fd00:1:0:0:0:0:0:141", ip("fd00:1::141")),
            ("FD00:0001:0000::0141", ip("fd00:1::141")),
            ("fd00:1::141:6443", ip("fd00:1::141:6443")),
            ("::1", ip("::1")),
            // Mapped IPv4: each is 192.168.1.x in the certificate.
            ("::ffff:192.168.1.146", ip("::ffff:192.168.1.146")),
            ("::FFFF:192.168.1.100", ip("::ffff:192.168.1.100")),
            ("0000000000::ffff:192.168.1.101", ip("::ffff:192.168.1.101")),
            ("::ffff:00000c0a8:0166", ip("::ffff:192.168.1.102")),
            ("::0:0:ffff:192.168.1.103", ip("::ffff:192.168.1.103")),
            ("0:0:0:0:0:ffff:c0a8:0168", ip("::ffff:192.168.1.104")),
            ("::ffff:192.168.1.0000105", ip("::ffff:192.168.1.105")),
            // Not mapped: kubeadm wrote these v6 addresses.
            ("::ffff:0:192.168.1.106", ip("::ffff:0:c0a8:16a")),
            ("::192.168.1.107", ip("::c0a8:16b")),
            // Brackets with a port, or with an empty one.
            ("[fd00:1::142]:6443", ip("fd00:1::142")),
            ("[fd00:1::142]:", ip("fd00:1::142")),
            ("[::ffff:192.168.1.1]:6443", ip("::ffff:192.168.1.1")),
            ("[192.168.1.2]:6443", ip("192.168.1.2")),
            // IPv4 with and without a port, leading zeros (decimal).
            ("192.168.1.66", ip("192.168.1.66")),
            ("192.168.001.066:6443", ip("192.168.1.66")),
            ("0192.0168.01.074:06443", ip("192.168.1.74")),
            ("192.168.1.66:", ip("192.168.1.66")),
            ("192.168.1.66:65535", ip("192.168.1.66")),
            // DNS-1123 subdomains, with and without a port.
            ("api.example.com", name("api.example.com")),
            ("api.example.com:6443", name("api.example.com")),
            ("[api.example.com]:6443", name("api.example.com")),
            ("api:", name("api")),
            ("0x7f000001", name("0x7f000001")),
            ("1.2.3", name("1.2.3")),
            ("1.2.3.4.5", name("1.2.3.4.5")),
            ("192.168.1.256", name("192.168.1.256")),
        ];
        for (endpoint, host) in read {
            assert_eq!(parse_host_port(endpoint).ok(), Some(host), "{endpoint:?}");
        }
        // What kubeadm refuses: no certificate, nothing certsync could
        // reserve with certainty (the caller decides nothing).
        let long_label = format!("{}.example", "a".repeat(250));
        let refused = [
            // Brackets without a port: SplitHostPort fails, `[...]` is
            // neither an address nor a name.
            "[fd00:1::142]",
            "[192.168.1.2]",
            // Ports: not digits worth 1 to 65535.
            "192.168.1.66:0",
            "192.168.1.66:65536",
            "192.168.1.66:+6443",
            "192.168.1.66:-1",
            "192.168.1.66:0x19",
            "192.168.1.66:http",
            "[fd00::1]:6443x",
            "[fd00::1]:99999999999999999999999",
            // Neither an address nor a lower-case DNS-1123 subdomain.
            "API.example.com",
            "api.example.com.",
            "*.example.com",
            "api..example.com",
            "-api.example.com",
            "api-.example.com",
            "api_x.example.com",
            &long_label,
            "fe80::1%eth0",
            "::ffff:192.168.1.108/32",
            "1::2::3",
            " fd00::1",
            "fd00::1 ",
            "1.2.3.4:5:6",
            "[fd00::1]x:6443",
            "[fd00::1]:64:43",
            "[fd00::1",
            "fd00::1]",
            "[[fd00::1]]:6443",
            ":6443",
            "[]:6443",
            "https://api.example.com:6443",
            "api.example.com:6443/",
        ];
        for endpoint in refused {
            let got = parse_host_port(endpoint);
            assert!(
                matches!(&got, Err(ApproveError::Endpoint { endpoint: e, .. }) if e == endpoint),
                "{endpoint:?} read as {got:?}"
            );
        }
        // The longest name kubeadm takes: 253 characters.
        let longest = format!("{}.{}", "a".repeat(126), "b".repeat(126));
        assert_eq!(parse_host_port(&longest).ok(), Some(name(&longest)));
    }
}
