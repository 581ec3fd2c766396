//! The process's resource limits (a leaf: it imports nothing of
//! certsync's).

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Raises the soft limit on open files to the hard limit, as Go's runtime
/// does at start, and says so once. systemd gives services a soft limit of
/// 1024 (and a hard one of 524288) so that old `select(2)` programs keep
/// working; certsync never uses `select`, and a daemon of many mappings,
/// or one whose admin port is busy, needs more than 1024 descriptors
/// (1,020 idle admin connections held by a local user stopped a rotation
/// under 1024; the admin port's own cap is what bounds those). Programs
/// certsync starts (a kubeconfig's exec credential plugin) inherit the
/// raised limit: Rust cannot restore it for a child without `pre_exec`,
/// and the plugins in use (Go programs) raise it themselves anyway.
pub fn raise_open_files() {
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => tracing::info!(
                from = soft,
                to = hard,
                "raised the open-file limit to its hard limit"
            ),
            Err(e) => {
                tracing::warn!(soft, hard, error = %e, "cannot raise the open-file limit; keeping the soft one")
            }
        },
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read the open-file limit"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After the call the soft limit is the hard one (whatever they were).
    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        raise_open_files();
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(soft, hard);
    }
}
