//! The parsers of flag values, each with its bounds.

use std::time::Duration;

use clap::ValueEnum;
use nix::sys::signal::Signal;
use tracing_subscriber::filter::{LevelFilter, Targets};

/// `--set` options adopt accepts: how a certificate is renewed, never who
/// it is for (that is kubeadm's template or the component's identity).
pub const SETTABLE: [&str; 4] = ["lifetime", "renew", "key-alg", "keep-key"];

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TextOrJson {
    Text,
    Json,
}

/// A flag's value refused, as clap and the config file show it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValueError {
    #[error(
        "log directive {directive:?}: {why} (directives are LEVEL or TARGET=LEVEL, \
         comma-separated; levels: trace, debug, info, warn or warning, error, off)"
    )]
    LogDirective {
        directive: String,
        why: &'static str,
    },
    #[error("{value:?}: {source}")]
    Duration {
        value: String,
        source: humantime::DurationError,
    },
    #[error("{value:?} is too short: at least {}", fmt_ms(*.min_ms))]
    TooShort { value: String, min_ms: u64 },
    #[error("{value:?} is too long: at most {}", fmt_ms(*.max_ms))]
    TooLong { value: String, max_ms: u64 },
    /// `value` escaped: it is shown as it was given.
    #[error("{value:?}: 1-128 letters, digits, '-', '.' or '_'")]
    Generation { value: String },
    #[error("{value:?} is not a whole number from {min} to {max}")]
    Count { value: String, min: u32, max: u32 },
    #[error("{value:?} is not a fraction in (0, 1]")]
    Fraction { value: String },
    #[error("{value:?} is not a signal name such as SIGHUP")]
    NotSignal { value: String },
    #[error(
        "{signal} cannot be used to reload a process (it cannot be caught, or stops or \
         crashes it); use one of {}",
        RELOAD_SIGNALS.map(|s| s.as_str()).join(", ")
    )]
    NotReload { signal: Signal },
    #[error("{value:?} is not an octal file mode such as 0644")]
    NotMode { value: String },
    /// `why`: what the file (or key file) mode may not do.
    #[error("mode {mode:04o} {why}")]
    Mode { mode: u32, why: &'static str },

    // A `kubeadm adopt --set` refused.
    #[error("--set {spec:?}: expected OPTION=VALUE")]
    NoValue { spec: String },
    /// An option that says who a certificate is for, or none adopt knows.
    #[error(
        "--set {option}: adopt sets only {} on its mappings (identity options such as \
         cn, o, dns, ip, usage or template come from kubeadm's certificates)",
        SETTABLE.join(", ")
    )]
    NotSettable { option: String },
    #[error("--set {option}: empty value")]
    Empty { option: String },
}

/// A log filter (`--log-level`, `RUST_LOG`) read into tracing's `Targets`
/// (each directive added as its own parser adds it), with klog's and
/// Python's `warning` spelled `warn`. Every directive must be `LEVEL` or
/// `TARGET=LEVEL` with a known level: tracing reads a bare unknown word
/// (`verbose`, `warning`) as a target name, which turns off every other log
/// line, errors included.
pub fn log_filter(s: &str) -> Result<Targets, ValueError> {
    let level = |word: &str| match word.trim().to_ascii_lowercase().as_str() {
        "trace" => Some(LevelFilter::TRACE),
        "debug" => Some(LevelFilter::DEBUG),
        "info" => Some(LevelFilter::INFO),
        "warn" | "warning" => Some(LevelFilter::WARN),
        "error" => Some(LevelFilter::ERROR),
        "off" => Some(LevelFilter::OFF),
        _ => None,
    };
    let bad = |directive: &str, why| ValueError::LogDirective {
        directive: directive.to_owned(),
        why,
    };
    let (mut out, mut any) = (Targets::new(), false);
    for d in s.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        out = match d.split_once('=') {
            None => out.with_default(level(d).ok_or_else(|| bad(d, "not a level"))?),
            Some((target, lvl)) => {
                let target = target.trim();
                let ok_target = !target.is_empty()
                    && target
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '-' | '.'));
                if !ok_target {
                    return Err(bad(d, "not a module path before `=`"));
                }
                let lvl = level(lvl).ok_or_else(|| bad(d, "not a level after `=`"))?;
                out.with_target(target, lvl)
            }
        };
        any = true;
    }
    if !any {
        return Err(bad(s, "no directive"));
    }
    Ok(out)
}

pub(crate) const MS: u64 = 1;

pub(crate) const YEAR: u64 = 365 * 24 * 3600 * 1000;

/// A duration parser with bounds in milliseconds: no zero where it makes no
/// sense, and a bound so deadline arithmetic can never overflow.
pub(crate) fn duration(
    min_ms: u64,
    max_ms: u64,
) -> impl Fn(&str) -> Result<Duration, ValueError> + Clone {
    move |s: &str| {
        let d = humantime::parse_duration(s).map_err(|source| ValueError::Duration {
            value: s.to_owned(),
            source,
        })?;
        let ms = d.as_millis();
        let value = s.to_owned();
        if ms < u128::from(min_ms) {
            Err(ValueError::TooShort { value, min_ms })
        } else if ms > u128::from(max_ms) {
            Err(ValueError::TooLong { value, max_ms })
        } else {
            Ok(d)
        }
    }
}

pub(crate) fn fmt_ms(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// `run --generation`: a short token fit for an HTTP header as it is.
pub(crate) fn generation(s: &str) -> Result<String, ValueError> {
    let fits = !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if fits {
        Ok(s.to_owned())
    } else {
        Err(ValueError::Generation {
            value: crate::escape(s).into_owned(),
        })
    }
}

pub(crate) fn count(min: u32, max: u32) -> impl Fn(&str) -> Result<u32, ValueError> + Clone {
    move |s: &str| match s.parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ValueError::Count {
            value: s.to_owned(),
            min,
            max,
        }),
    }
}

pub(crate) fn parse_fraction(s: &str) -> Result<f64, ValueError> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(ValueError::Fraction {
            value: s.to_owned(),
        }),
    }
}
/// Signals a process can catch and treat as "reload" (or "restart"):
/// never KILL or STOP (which cannot be handled), job control or faults.
pub(crate) const RELOAD_SIGNALS: [Signal; 7] = [
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
];

pub(crate) fn parse_signal(s: &str) -> Result<Signal, ValueError> {
    let name = s.to_ascii_uppercase();
    let name = if name.starts_with("SIG") {
        name
    } else {
        format!("SIG{name}")
    };
    let signal: Signal = name.parse().map_err(|_| ValueError::NotSignal {
        value: s.to_owned(),
    })?;
    if RELOAD_SIGNALS.contains(&signal) {
        Ok(signal)
    } else {
        Err(ValueError::NotReload { signal })
    }
}

/// Parses an octal file mode such as `0644` or `640`: read and write
/// bits only (no setuid/setgid/sticky, no execute), writable by the owner
/// alone, readable by the owner.
pub fn parse_mode(s: &str) -> Result<u32, ValueError> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    let mode = match u32::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o7777 => m,
        _ => {
            return Err(ValueError::NotMode {
                value: s.to_owned(),
            });
        }
    };
    let why = if mode & 0o7000 != 0 {
        "sets setuid, setgid or sticky bits"
    } else if mode & 0o111 != 0 {
        "makes a certificate file executable"
    } else if mode & 0o022 != 0 {
        "lets users other than the owner write the file"
    } else if mode & 0o400 == 0 {
        "does not let the owner read the file"
    } else {
        return Ok(mode);
    };
    Err(ValueError::Mode { mode, why })
}

/// A key mode: a valid mode that is not readable by every user.
pub fn key_mode(s: &str) -> Result<u32, ValueError> {
    let mode = parse_mode(s)?;
    if mode & 0o007 != 0 {
        let why = "would make the private key readable by every user";
        return Err(ValueError::Mode { mode, why });
    }
    Ok(mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The filter is the one tracing's own parser makes of the same
    /// directives written out (`warning` as `warn`, spaces trimmed).
    #[test]
    fn a_log_filter_is_what_tracing_parses_from_its_directives() {
        for (given, written) in [
            ("info", "info"),
            ("WARNING", "warn"),
            (" info , certsync=trace ,", "info,certsync=trace"),
            (
                "certsync::sync=debug,notify=warning,off",
                "certsync::sync=debug,notify=warn,off",
            ),
            ("debug,error", "debug,error"),
            ("a-b.c=trace,a-b.c=error", "a-b.c=trace,a-b.c=error"),
        ] {
            let want: Targets = written.parse().unwrap();
            let got = log_filter(given).unwrap();
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "{given}");
        }
        for bad in ["", " , ", "verbose", "x=loud", "=info", "a b=info"] {
            assert!(log_filter(bad).is_err(), "{bad:?}");
        }
    }
}
