//! Sources publish a mapping's newest content into a `watch` channel (the
//! latest wins); the sync task validates and writes.

pub mod ca;
pub mod client;
pub mod csr;
pub mod error;
pub mod hostdir;
pub mod secret;
pub mod trust_bundle;
pub mod usage;
pub mod watch;

pub use error::{SourceError, Update, publish};
pub use watch::Listed;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use kube::runtime::watcher;

    fn node(name: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n
    }

    #[test]
    fn a_relist_replaces_the_set_only_when_complete() {
        let mut l = Listed::default();
        for e in [
            watcher::Event::Init,
            watcher::Event::InitApply(node("a")),
            watcher::Event::InitApply(node("b")),
        ] {
            assert!(l.apply(e).is_none());
        }
        assert!(!l.synced() && l.items().is_empty());
        assert!(l.apply(watcher::Event::InitDone).is_some());
        assert!(l.apply(watcher::Event::Delete(node("a"))).is_some());
        assert!(l.apply(watcher::Event::Apply(node("c"))).is_some());
        assert_eq!(l.items().keys().collect::<Vec<_>>(), ["b", "c"]);

        // A re-list: until it is done, the old set stays whole.
        l.apply(watcher::Event::Init);
        l.apply(watcher::Event::InitApply(node("c")));
        assert_eq!(l.items().keys().collect::<Vec<_>>(), ["b", "c"]);
        l.apply(watcher::Event::InitApply(node("d")));
        l.apply(watcher::Event::InitDone);
        assert_eq!(l.items().keys().collect::<Vec<_>>(), ["c", "d"]);
        assert!(l.synced());
    }
}
