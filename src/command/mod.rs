//! One function per subcommand, and the one place an error becomes an
//! exit code (docs/reference/exit-codes.md) and is told to the user.

mod csr;
mod daemon;
mod error;
mod kubeadm;

use crate::cli::{CheckArgs, ManArgs, RevisionsArgs, RollbackArgs};
use crate::inspect::{REVISION_COLUMNS, render};

pub use csr::review;
pub use daemon::{approve, run};
use error::print;
pub use error::{CommandError, Finished};
pub use kubeadm::{adopt, revert, status};

/// `certsync check`: the report; 1 when a certificate fails.
pub fn check(a: &CheckArgs) -> Finished {
    let rows = crate::inspect::check(&a.paths, a.warn_within)?;
    let failing = rows.iter().any(|r| r.problem.is_some());
    print(&crate::inspect::render_check(&rows, a.output)?)?;
    Ok(u8::from(failing))
}

/// `certsync revisions`: a target's revisions, newest first.
pub fn revisions(a: &RevisionsArgs) -> Finished {
    let rows = crate::inspect::revisions(&a.target)?;
    print(&render(&rows, a.output, REVISION_COLUMNS, None)?)?;
    Ok(0)
}

/// `certsync rollback`: an earlier revision restored and pinned.
pub fn rollback(a: &RollbackArgs) -> Finished {
    let r = crate::inspect::rollback(&a.target, a.to)?;
    print(format!(
        "{}: restored revision {} as revision {}; pinned until the source's content changes\n",
        a.target.display(),
        r.from_history,
        r.revision
    ))?;
    Ok(0)
}

/// `certsync completion SHELL`: the script for that shell.
pub fn completion(shell: clap_complete::Shell) -> Finished {
    let mut cmd = crate::config::command();
    clap_complete::generate(shell, &mut cmd, "certsync", &mut std::io::stdout());
    Ok(0)
}

/// `certsync man`: one page to stdout, or every page into `--dir` (the
/// paths written printed).
pub fn man(a: &ManArgs) -> Finished {
    let text = match &a.dir {
        Some(dir) => crate::man::write_all(dir)?
            .iter()
            .map(|p| format!("{}\n", p.display()))
            .collect::<String>()
            .into_bytes(),
        None => crate::man::page(&a.command)?,
    };
    print(text)?;
    Ok(0)
}
