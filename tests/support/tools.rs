//! System tools some end-to-end tests drive: nginx (a real TLS server that
//! reloads), openssl (reads what is served, independently of certsync) and
//! strace (the syscalls that create key files).
//!
//! Without one of them a test skips and says what to install, so `cargo
//! test` on a fresh machine reports instead of panicking. CI must not pass
//! on skipped tests: with `CI=true` or `CERTSYNC_REQUIRE_TOOLS=1` a missing
//! tool fails the test (`.ci/run` installs them all and sets `CI`).

use std::io::Write;
use std::path::Path;

/// Whether a missing tool is a failure rather than a skip.
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
        || std::env::var("CERTSYNC_REQUIRE_TOOLS").is_ok_and(|v| v == "1" || v == "true")
}

/// The `tools` that are not an executable file in any directory of
/// `path` (a `PATH` value). No shell: finding out must not need `sh`.
pub fn missing_in<'a>(tools: &[&'a str], path: &std::ffi::OsStr) -> Vec<&'a str> {
    use std::os::unix::fs::PermissionsExt;
    let found = |tool: &str| {
        std::env::split_paths(path).any(|dir| {
            Path::new(&dir)
                .join(tool)
                .metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    };
    tools.iter().copied().filter(|t| !found(t)).collect()
}

/// The line a test prints when `missing` tools keep it from running,
/// with the Debian packages that have them.
pub fn message(missing: &[&str]) -> String {
    fn package<'a>(tool: &&'a str) -> &'a str {
        match *tool {
            "bwrap" => "bubblewrap",
            "ip" => "iproute2",
            "xz" => "xz-utils",
            other => other,
        }
    }
    format!(
        "needs {} (apt-get install {}; .ci/run installs them)",
        missing.join(" and "),
        missing.iter().map(package).collect::<Vec<_>>().join(" ")
    )
}

/// `true` when every tool in `tools` is on `PATH`. Otherwise the test
/// should return: this prints `skipped: needs ...` and returns `false`, or
/// panics with the same words when `required`.
pub fn have_all(tools: &[&str], required: bool, out: &mut dyn Write) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let missing = missing_in(tools, &path);
    if missing.is_empty() {
        return true;
    }
    let msg = message(&missing);
    assert!(
        !required,
        "{msg}; a missing tool fails under CI=true or CERTSYNC_REQUIRE_TOOLS=1"
    );
    let _ = writeln!(out, "skipped: {msg}");
    false
}

/// [`have_all`] with the environment's rule (see [`required`]), telling
/// the person running `cargo test`: straight to the stderr handle, not
/// `eprintln!`, whose output the harness hides for a passing test.
pub fn have(tools: &[&str]) -> bool {
    have_all(tools, required(), &mut std::io::stderr())
}

/// A test that cannot run here for `why` (not root, a file a package
/// provides): says `skipped: WHY` on stderr, or fails under the same rule as
/// a missing tool ([`required`]): CI runs as root with every package.
pub fn skip(why: &str) {
    assert!(
        !required(),
        "{why}; a skipped test fails under CI=true or CERTSYNC_REQUIRE_TOOLS=1"
    );
    let _ = writeln!(std::io::stderr(), "skipped: {why}");
}
