//! How a metric is registered (`Registrar`), and the label sets the families take.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Metric, Registry, Unit};

/// A mapping's name as a label value, shared by every series of the
/// mapping (see `Metrics::name`).
pub(super) type Name = Arc<String>;

/// Labels of fixed names and values (`[("method", "signal")]`), in order;
/// with a mapping's name as their value, `[("mapping", name)]`.
pub(super) type Labels<const N: usize, V = &'static str> = [(&'static str, V); N];

/// A mapping's series: `mapping="..."`.
pub(super) type MappingLabel = Labels<1, Name>;

/// A mapping's series of one reason or result: `mapping="...",reason="..."`.
pub(super) type MappingAnd = (MappingLabel, Labels<1>);

pub(super) type FloatGauge = Gauge<f64, AtomicU64>;

/// Registers each metric where [`super::Metrics`] takes its handle, so a metric's
/// name, help and unit are written once, next to the field that keeps it.
/// The exposition lists the families in the order they are registered.
pub(super) struct Registrar<'a>(pub(super) &'a mut Registry);

impl Registrar<'_> {
    pub(super) fn add<M: Metric + Clone + Default>(&mut self, name: &str, help: &str) -> M {
        let metric = M::default();
        self.0.register(name, help, metric.clone());
        metric
    }

    pub(super) fn seconds<M: Metric + Clone + Default>(&mut self, name: &str, help: &str) -> M {
        self.seconds_of(name, help, M::default())
    }

    /// `metric`, in seconds (a histogram made with its buckets).
    pub(super) fn seconds_of<M: Metric + Clone>(&mut self, name: &str, help: &str, metric: M) -> M {
        (self.0).register_with_unit(name, help, Unit::Seconds, metric.clone());
        metric
    }
}
