//! `certsync csr review`: pending CSRs with the approver's verdict, and
//! what `--approve` or `--deny` did.

use super::error::{CommandError, Finished, print};
use crate::cli::ReviewArgs;
use crate::inspect::render;

/// The table on stdout, then each approval or denial on stderr. Looking
/// needs no policy flags (what they would check is marked); approving or
/// denying does.
pub fn review(a: &ReviewArgs) -> Finished {
    if a.approve || a.deny {
        a.policy.check()?;
    }
    let (text, done) = look(a)?;
    print(&text)?;
    for line in done {
        eprintln!("{line}");
    }
    Ok(0)
}

#[tokio::main(flavor = "current_thread")]
async fn look(a: &ReviewArgs) -> Result<(String, Vec<String>), CommandError> {
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
    let text = render(&rows, a.output, crate::approve::REVIEW_COLUMNS, None)?;
    Ok((text, done))
}
