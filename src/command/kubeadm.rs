//! `certsync kubeadm adopt|revert|status`: each command's flags handed to
//! the library (they are what it is asked to do), and what it printed.

use super::error::{Finished, print};
use crate::cli::{AdoptArgs, RevertArgs, StatusArgs, StatusOutput};

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
