//! One function per subcommand (`kubeadm adopt|revert|status` hand their
//! flags to the library: they are what it is asked to do), and the one
//! place an error becomes an exit code (docs/reference/exit-codes.md) and
//! is told to the user.

mod daemon;
mod error;

use crate::cli::{
    AdoptArgs, CheckArgs, ManArgs, RevertArgs, ReviewArgs, RevisionsArgs, RollbackArgs, StatusArgs,
    StatusOutput,
};
use crate::inspect::{REVISION_COLUMNS, render};

pub use daemon::{approve, run};
use error::print;
pub use error::{CommandError, Finished};

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

/// `certsync csr review`: pending CSRs with the approver's verdict in a
/// table on stdout, then each approval or denial on stderr. Looking
/// needs no policy flags (what they would check is marked); approving or
/// denying does.
#[tokio::main(flavor = "current_thread")]
pub async fn review(a: &ReviewArgs) -> Finished {
    if a.approve || a.deny {
        a.policy.check()?;
    }
    let settings = crate::source::client::ClientSettings {
        kubeconfig: a.kube.kubeconfig.clone(),
        context: a.kube.context.clone(),
        ..Default::default()
    };
    let (rows, done) = crate::approve::review(
        &settings,
        &a.names,
        a.policy.selector.as_deref(),
        &a.policy.policy(),
        a.approve,
        a.deny,
    )
    .await?;
    print(&render(
        &rows,
        a.output,
        crate::approve::REVIEW_COLUMNS,
        None,
    )?)?;
    for line in done {
        eprintln!("{line}");
    }
    Ok(0)
}

/// `certsync kubeadm adopt`: the plan, and what was done.
#[tokio::main(flavor = "current_thread")]
pub async fn adopt(a: &AdoptArgs) -> Finished {
    // Told as it happens: the plan before anything is written, then each
    // step and what each wait sees.
    let mut out = crate::kubeadm::Out::to(std::io::stdout());
    Box::pin(crate::kubeadm::adopt(a, &mut out)).await?;
    Ok(0)
}

/// `certsync kubeadm revert`: what was (or would be) handed back.
#[tokio::main(flavor = "current_thread")]
pub async fn revert(a: &RevertArgs) -> Finished {
    let text = crate::kubeadm::revert(a).await?;
    print(&text)?;
    Ok(0)
}

/// `certsync kubeadm status`: the report in the format asked for; 0 when
/// healthy, else the first cause's exit code.
#[tokio::main(flavor = "current_thread")]
pub async fn status(a: &StatusArgs) -> Finished {
    let s = crate::kubeadm::status(&a.kubeadm_dir).await;
    if let Some(path) = &a.textfile {
        // Complete before it replaces the last one: written whole, fsynced,
        // renamed; a status that failed before it could report says so.
        let text = match &s {
            Ok(s) => s.prometheus(),
            Err(_) => {
                let now = crate::validate::unix_seconds(std::time::SystemTime::now());
                crate::kubeadm::Status::failed_prometheus(now)
            }
        };
        crate::writer::replace_file(path, 0o644, text.as_bytes())?;
    }
    let s = s?;
    let text = match a.output {
        StatusOutput::Text => s.text(),
        StatusOutput::Json => serde_json::to_string_pretty(&s)? + "\n",
        StatusOutput::Prometheus => s.prometheus(),
    };
    print(&text)?;
    Ok(s.exit_code())
}
