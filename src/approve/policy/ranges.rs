//! Addresses and ranges as the policy compares them: `--reserved` values,
//! CIDRs, and one form per address.

use std::net::IpAddr;

use crate::approve::error::ApproveError;

/// A name or range that is never a node's, as `--reserved` takes it: an
/// IP address, a CIDR, or a DNS name.
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

/// An IP range `ADDR/BITS`.
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
        // An IPv4-mapped range (`::ffff:10.0.0.0/104`) is the IPv4 range
        // it maps: addresses are compared in their IPv4 form.
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
    /// `0.0.0.0/0` or `::/0`.
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

/// IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`) as the IPv4 address they
/// are, so one address has one form.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// A DNS name in the one form names are compared in: lower-case, without
/// its final dot (`Web1.Example.` is `web1.example`).
pub fn dns_name(s: &str) -> String {
    s.trim_end_matches('.').to_ascii_lowercase()
}
