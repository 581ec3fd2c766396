//! The OIDs of the four extensions certsync reads as what they are.

pub(super) const SAN: &str = "2.5.29.17";
pub(super) const KEY_USAGE: &str = "2.5.29.15";
pub(super) const EXT_KEY_USAGE: &str = "2.5.29.37";
pub(super) const BASIC_CONSTRAINTS: &str = "2.5.29.19";
/// The extensions certsync reads, as what they are.
pub(super) const READ: [&str; 4] = [SAN, KEY_USAGE, EXT_KEY_USAGE, BASIC_CONSTRAINTS];
/// The name of one of the four extensions read, else `oid`.
pub(super) fn extension_name(oid: &str) -> &str {
    match oid {
        SAN => "subjectAltName",
        KEY_USAGE => "keyUsage",
        EXT_KEY_USAGE => "extKeyUsage",
        BASIC_CONSTRAINTS => "basicConstraints",
        other => other,
    }
}
