//! What adopt's and revert's waits last saw (`Seen`), and `NotReady`. A leaf:
//! `error` holds these, so a type of `wait`'s there would close a circle.

use std::net::SocketAddr;

/// A cause kept whole (a `KubeadmError` too, which this leaf cannot name).
pub type Problem = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum Seen {
    // certsync's pod, asked at its admin port.
    #[error("no answer from {addr} within 3 s")]
    Silent { addr: SocketAddr },
    #[error("nothing answers on {addr} ({problem})")]
    Nothing { addr: SocketAddr, problem: Problem },
    /// The pod of this generation answers, not ready: why (escaped).
    #[error("certsync's pod (generation {generation}) runs but is not ready: {body}")]
    Starting { generation: String, body: String },
    #[error("an earlier certsync pod (generation {generation}) answers, not this adoption's")]
    Earlier { generation: String },
    #[error("a certsync without a generation answers (an earlier pod): {status} {body}")]
    Ungenerated { status: u16, body: String },
    /// `why` is the container's (a link's text): escaped.
    #[error(
        "certsync's pod answers ready, but target {target} holds no live pair of its CA's: {}",
        crate::escape(why)
    )]
    DeadTarget { target: String, why: String },
    #[error("{pod} still answers on {addr} {secs} s after its manifest was taken out")]
    StillAnswers {
        pod: String,
        addr: SocketAddr,
        secs: u64,
    },
    /// A file certsync's pod mounts read-only, changed since adopt wrote it.
    #[error(
        "{path} is not what adopt wrote any more: something changed it while certsync's pod \
         started; no component was pointed at it"
    )]
    Changed { path: String },
    /// Writing or reading the pod's files (paths it may have named: escaped).
    #[error("{}", crate::escape(&.0.to_string()))]
    Failed(#[source] Problem),

    // certsync's pod manifest, read for the address its probes ask.
    #[error("not UTF-8, which the kubelet does not read")]
    NotUtf8,
    #[error("not a Pod ({0})")]
    NotAPod(#[source] crate::files::YamlError),
    #[error("no container named certsync")]
    NoContainer,
    #[error("no readinessProbe httpGet")]
    NoHttpGet,
    /// `host` escaped.
    #[error("readinessProbe host {host:?} is not an IP address")]
    Host { host: String },
    #[error("readinessProbe port is not a port number")]
    Port,

    // The API server, after its manifest changed.
    #[error("{manifest} names no --advertise-address or --tls-cert-file")]
    NoAddress { manifest: String },
    #[error("{path}: {problem}")]
    Unread { path: String, problem: Problem },
    #[error("{addr} serves {served}, not {path} ({expected})")]
    NotServing {
        addr: String,
        served: String,
        path: String,
        expected: String,
    },
    #[error(
        "{addr} serves {path}, but /readyz through admin.conf: {}",
        crate::error_chain(.problem.as_ref())
    )]
    Readyz {
        addr: String,
        path: String,
        problem: Problem,
    },
    /// admin.conf unusable, or `https://ADDR: ` and why that is no URL.
    #[error("/readyz cannot be asked through admin.conf: {problem}")]
    NoAdmin { problem: Problem },
    #[error("{addr} has answered ready since the manifest changed: not restarted on it yet")]
    NotRestarted { addr: String },
}

/// adopt's gate not passed: what it saw, and what it put back.
#[derive(Debug, thiserror::Error)]
#[error(
    "certsync's pod (image {image}, generation {generation}) was not ready {when}: {seen}; its \
     state: {pod}. {undone}"
)]
pub struct NotReady {
    pub image: String,
    pub generation: String,
    /// `within 5m` after a wait; a look at an adopted node waits for nothing.
    pub when: String,
    pub seen: Seen,
    pub pod: String,
    pub undone: String,
}

#[cfg(test)]
mod tests {
    use super::Seen;

    /// What certsync's container wrote (a link's text as a target's
    /// tls.crt) reaches adopt's "still waiting" line and its error: never
    /// as terminal escapes or a forged line.
    #[test]
    fn attack_text_from_the_pods_files_is_escaped_when_shown() {
        let forged = "\u{1b}]0;owned\u{7}\u{1b}[2K\rcertsync: adopted\nadopted";
        for seen in [
            Seen::DeadTarget {
                target: "/etc/kubernetes/pki/certsync/apiserver".into(),
                why: forged.into(),
            },
            Seen::Failed(forged.into()),
        ] {
            let shown = seen.to_string();
            assert!(
                !shown.contains(['\u{1b}', '\u{7}', '\r', '\n']),
                "{shown:?}"
            );
        }
    }
}
