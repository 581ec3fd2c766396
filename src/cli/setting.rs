//! `run`'s settings read into its flags' fields from their texts (one per
//! occurrence) by each flag's own parser: a setting takes what its flag takes.

use std::fmt::Display;
use std::str::FromStr;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde::de::{Deserialize, Deserializer, Error};

use super::values;

/// The one text of a flag that takes one value (`None`: none given).
fn optional<'de, D: Deserializer<'de>, T, E: Display>(
    d: D,
    parse: impl Fn(&str) -> Result<T, E>,
) -> Result<Option<T>, D::Error> {
    match Vec::<String>::deserialize(d)?.as_slice() {
        [] => Ok(None),
        [text] => parse(text).map(Some).map_err(D::Error::custom),
        more => Err(D::Error::custom(format_args!(
            "takes one value, not a list of {}",
            more.len()
        ))),
    }
}

fn required<'de, D: Deserializer<'de>, T, E: Display>(
    d: D,
    parse: impl Fn(&str) -> Result<T, E>,
) -> Result<T, D::Error> {
    optional(d, parse)?.ok_or_else(|| D::Error::custom("takes a value, not an empty list"))
}

pub fn duration<'de, D: Deserializer<'de>, const MIN_MS: u64, const MAX_MS: u64>(
    d: D,
) -> Result<Duration, D::Error> {
    required(d, values::duration(MIN_MS, MAX_MS))
}

pub fn count<'de, D: Deserializer<'de>, const MIN: u32, const MAX: u32>(
    d: D,
) -> Result<u32, D::Error> {
    required(d, values::count(MIN, MAX))
}

pub fn cert_mode<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    required(d, values::parse_mode)
}

pub fn key_mode<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    required(d, values::key_mode)
}

pub fn fraction<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    required(d, values::parse_fraction)
}

pub fn signal<'de, D: Deserializer<'de>>(d: D) -> Result<Signal, D::Error> {
    required(d, values::parse_signal)
}

pub fn generation<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    optional(d, values::generation)
}

/// A flag whose parser is its type's own `FromStr`.
pub fn value<'de, D: Deserializer<'de>, T: FromStr<Err: Display>>(d: D) -> Result<T, D::Error> {
    required(d, T::from_str)
}

/// [`value`], for a flag without a default.
pub fn some<'de, D: Deserializer<'de>, T: FromStr<Err: Display>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    optional(d, T::from_str)
}
