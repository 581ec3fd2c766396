//! What the approver's watches have seen (every CSR of its signer, every
//! Node) and which pending CSRs are to be decided (again), kept up to date
//! by a task per watch whatever a round is doing: a long round must not
//! leave a watch unread until its stall deadline (the re-list after it
//! re-decides everything). A round locks this state only to take its CSRs
//! and record what it wrote, never across an `.await`. Nothing is queued:
//! what is held is the objects themselves, as in an informer's cache (the
//! API server bounds their number and size).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::{Stream, StreamExt};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest as Csr;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::approve::api::{name_of, pending};
use crate::approve::policy;
use crate::metrics::Metrics;
use crate::source::Listed;
use crate::source::watch::WatchError;

#[derive(Default)]
pub(super) struct Seen {
    pub csrs: Listed<Csr>,
    pub nodes: Listed<Node>,
    /// What the policy reads of each Node, read when that Node changed.
    pieces: BTreeMap<String, Arc<policy::Piece>>,
    /// Those indexed, put together off the runtime and outside this lock
    /// (linear in what the Nodes list: must not hold the watches).
    node_index: Option<Arc<policy::Nodes>>,
    /// Counts changes of the Nodes: an index of older pieces is not kept.
    node_generation: u64,
    /// Names of the CSRs to decide (again).
    pub dirty: BTreeSet<String>,
}

/// Pending CSRs of one requester that are looked at; newer ones are denied
/// unread. A kubelet has one pending (two across a rotation), but one
/// whose Node is not yet registered files a new one every 15 minutes while
/// it waits: hence 10, not 2.
pub const MAX_PENDING: usize = 10;

/// The requester of a CSR, as the API server authenticated it.
pub(super) fn requester(csr: &Csr) -> &str {
    csr.spec.username.as_deref().unwrap_or_default()
}

impl Seen {
    pub fn synced(&self) -> bool {
        self.csrs.synced() && self.nodes.synced()
    }

    pub fn all_dirty(&mut self) {
        self.dirty = self.pending_names(|_| true).collect();
    }

    /// The names of the pending CSRs `which` picks.
    fn pending_names(&self, which: impl Fn(&Csr) -> bool) -> impl Iterator<Item = String> {
        let csrs = self.csrs.items().values();
        csrs.filter(move |c| pending(c) && which(c)).map(name_of)
    }

    fn csr_event(&mut self, event: watcher::Event<Csr>) {
        match self.csrs.apply(event) {
            Some(Some(name)) => {
                if self.csrs.items().get(&name).is_some_and(pending) {
                    self.dirty.insert(name);
                } else {
                    self.dirty.remove(&name);
                }
            }
            Some(None) => self.all_dirty(),
            None => {}
        }
    }

    fn node_event(&mut self, event: watcher::Event<Node>) {
        let Some(what) = self.nodes.apply(event) else {
            return;
        };
        self.node_index = None;
        self.node_generation += 1;
        let Some(node) = what else {
            self.pieces = self
                .nodes
                .items()
                .iter()
                .map(|(name, n)| (name.clone(), Arc::new(policy::Piece::of(name, n))))
                .collect();
            return self.all_dirty();
        };
        match self.nodes.items().get(&node) {
            Some(n) => self
                .pieces
                .insert(node.clone(), Arc::new(policy::Piece::of(&node, n))),
            None => self.pieces.remove(&node),
        };
        let user = format!("{}{node}", policy::NODE_PREFIX);
        let names: Vec<String> = self.pending_names(|c| requester(c) == user).collect();
        self.dirty.extend(names);
    }

    /// The Nodes for the policy and their generation: indexed already, or
    /// when called (call it off the runtime). Cheap: an `Arc` per Node.
    pub fn node_index(&self) -> impl FnOnce() -> (u64, Arc<policy::Nodes>) + Send + 'static {
        let (generation, built) = (self.node_generation, self.node_index.clone());
        let pieces: Vec<_> = match built {
            Some(_) => Vec::new(),
            None => self.pieces.values().cloned().collect(),
        };
        move || {
            let index = built.unwrap_or_else(|| Arc::new(policy::Nodes::from_pieces(pieces)));
            (generation, index)
        }
    }

    /// Keeps `index` ([`Self::node_index`]) unless the Nodes changed since.
    pub fn keep_index(&mut self, generation: u64, index: Arc<policy::Nodes>) {
        if generation == self.node_generation {
            self.node_index = Some(index);
        }
    }

    /// The next CSRs to decide: each requester's oldest to decide, with
    /// its pending count when it is beyond its oldest [`MAX_PENDING`].
    pub fn next_round(&mut self) -> Vec<(Csr, Option<usize>)> {
        let mut by_requester: BTreeMap<&str, Vec<&Csr>> = BTreeMap::new();
        for csr in self.csrs.items().values().filter(|c| pending(c)) {
            by_requester.entry(requester(csr)).or_default().push(csr);
        }
        let mut round = Vec::new();
        for list in by_requester.values_mut() {
            list.sort_by(|a, b| {
                (&a.metadata.creation_timestamp, &a.metadata.name)
                    .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
            });
            let Some((i, csr)) = list
                .iter()
                .enumerate()
                .find(|(_, c)| self.dirty.contains(&name_of(c)))
            else {
                continue;
            };
            round.push(((*csr).clone(), (i >= MAX_PENDING).then_some(list.len())));
        }
        for (csr, _) in &round {
            self.dirty.remove(&name_of(csr));
        }
        let items = self.csrs.items();
        self.dirty
            .retain(|name| items.get(name).is_some_and(pending));
        round
    }

    /// `written`, what the server stored for `decided`, kept now unless
    /// the watch already brought a later version.
    pub fn written(&mut self, decided: &Csr, written: Csr) {
        let name = name_of(decided);
        let unchanged = self
            .csrs
            .items()
            .get(&name)
            .is_some_and(|c| c.metadata.resource_version == decided.metadata.resource_version);
        if unchanged {
            self.csrs.insert(name.clone(), written);
            self.dirty.remove(&name);
        }
    }
}

/// The two watches, each read by a task of its own into one [`Seen`];
/// the tasks end when this is dropped.
pub(super) struct Watches {
    seen: Arc<Mutex<Seen>>,
    changed: Arc<Notify>,
    _tasks: JoinSet<()>,
}

impl Watches {
    pub fn start(
        csrs: impl Stream<Item = Result<watcher::Event<Csr>, WatchError>> + Send + 'static,
        nodes: impl Stream<Item = Result<watcher::Event<Node>, WatchError>> + Send + 'static,
        metrics: &Arc<Metrics>,
    ) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let changed = Arc::new(Notify::new());
        let mut tasks = JoinSet::new();
        let read = (Arc::clone(&seen), Arc::clone(&changed), Arc::clone(metrics));
        tasks.spawn(read_into(read.clone(), csrs, "CSR", Seen::csr_event));
        tasks.spawn(read_into(read, nodes, "Node", Seen::node_event));
        Self {
            seen,
            changed,
            _tasks: tasks,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Seen> {
        // A panic while it was held left it as it was between two events.
        crate::lock(&self.seen)
    }

    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

/// Applies every event of `events` to `seen` as it arrives, forever (the
/// watch loop retries by itself).
async fn read_into<K: Send + 'static>(
    (seen, changed, metrics): (Arc<Mutex<Seen>>, Arc<Notify>, Arc<Metrics>),
    events: impl Stream<Item = Result<watcher::Event<K>, WatchError>> + Send + 'static,
    what: &'static str,
    apply: fn(&mut Seen, watcher::Event<K>),
) {
    let mut events = std::pin::pin!(events);
    while let Some(e) = events.next().await {
        match e {
            Ok(e) => {
                let backlog = {
                    let mut seen = crate::lock(&seen);
                    apply(&mut seen, e);
                    seen.dirty.len()
                };
                metrics.csr_backlog(backlog);
                changed.notify_one();
            }
            Err(e) => {
                tracing::warn!(error = %crate::error_chain(&e), "{what} watch failed; retrying");
            }
        }
    }
}
