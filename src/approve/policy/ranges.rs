//! Addresses and ranges as the policy compares them.

use std::net::IpAddr;

use crate::approve::error::ApproveError;

/// A `--reserved` value: an IP address, a CIDR, or a DNS name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserved {
    Range(Cidr),
    Name(String),
}

impl std::str::FromStr for Reserved {
    type Err = ApproveError;
    fn from_str(s: &str) -> Result<Self, ApproveError> {
        if let Ok(ip) = s.parse::<IpAddr>() {
            let bits = if ip.is_ipv4() { 32 } else { 128 };
            return format!("{ip}/{bits}").parse().map(Self::Range);
        }
        if s.contains('/') {
            return s.parse().map(Self::Range);
        }
        let name = dns_name(s);
        let ok = !name.is_empty()
            && name.split('.').all(|l| {
                !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if ok {
            Ok(Self::Name(name))
        } else {
            Err(ApproveError::Reserved(s.into()))
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl std::str::FromStr for Cidr {
    type Err = ApproveError;
    fn from_str(s: &str) -> Result<Self, ApproveError> {
        let bad = || ApproveError::Cidr(s.into());
        let (addr, bits) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let bits: u8 = bits.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if bits > max {
            return Err(bad());
        }
        // An IPv4-mapped range is the IPv4 range it maps (as addresses).
        if let IpAddr::V6(v6) = addr
            && let Some(v4) = v6.to_ipv4_mapped()
            && bits >= 96
        {
            return Ok(Self {
                addr: IpAddr::V4(v4),
                bits: bits - 96,
            });
        }
        Ok(Self { addr, bits })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

impl Cidr {
    pub fn is_everything(&self) -> bool {
        self.bits == 0
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let (a, b, width) = match (self.addr, canonical(ip)) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                (u128::from(u32::from(a)), u128::from(u32::from(b)), 32)
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
            _ => return false,
        };
        let shift = width - u32::from(self.bits);
        shift >= width || (a >> shift) == (b >> shift)
    }
}

/// IPv4-mapped IPv6 addresses as the IPv4 address, one form per address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// A DNS name as names are compared: lower-case, without its final dot.
pub fn dns_name(s: &str) -> String {
    s.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `pattern`, an exact name or `*.SUFFIX` (any name under SUFFIX,
/// at any depth), covers the lower-case DNS name `name` (an `--allowed-dns`
/// pattern, or a name the API server is reached by). A requested name
/// never holds `*` nor an empty label ([`crate::x509::dns_name`]).
pub(super) fn dns_matches(pattern: &str, name: &str) -> bool {
    let pattern = pattern.to_ascii_lowercase();
    match pattern.strip_prefix("*.") {
        Some(suffix) => name
            .strip_suffix(suffix)
            .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        None => pattern == name,
    }
}
