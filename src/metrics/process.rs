//! Prometheus' standard process metrics, as client_golang's process
//! collector defines them (names, types, units), read from `/proc/self`
//! on every scrape: dashboards and alerts written for any Prometheus
//! client work unchanged. A value that cannot be read is left out of that
//! scrape rather than reported as 0.

use procfs::WithCurrentSystemInfo;
use procfs::process::{LimitValue, Process};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Every family this collector exposes, as `# TYPE` names it (a counter
/// without `_total`); the docs test checks them.
#[cfg(test)]
pub(super) const NAMES: [&str; 6] = [
    "process_cpu_seconds",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
];

/// Reads `/proc/self` when scraped.
#[derive(Debug)]
pub(super) struct ProcessCollector;

/// What one scrape read; `None` where `/proc` did not answer.
#[derive(Debug, Default, PartialEq)]
struct Sample {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<f64>,
    virtual_bytes: Option<f64>,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
    start_time: Option<f64>,
}

fn sample() -> Sample {
    let Ok(me) = Process::myself() else {
        return Sample::default();
    };
    let mut s = Sample::default();
    if let Ok(stat) = me.stat() {
        let ticks = procfs::ticks_per_second() as f64;
        s.cpu_seconds = Some((stat.utime + stat.stime) as f64 / ticks);
        s.resident_bytes = Some(stat.rss_bytes().get() as f64);
        s.virtual_bytes = Some(stat.vsize as f64);
        // starttime counts clock ticks since boot; btime is boot in Unix time.
        s.start_time = procfs::boot_time_secs()
            .ok()
            .map(|boot| boot as f64 + stat.starttime as f64 / ticks);
    }
    s.open_fds = me.fd_count().ok().map(|n| n as f64);
    s.max_fds = me.limits().ok().map(|l| match l.max_open_files.soft_limit {
        LimitValue::Value(v) => v as f64,
        LimitValue::Unlimited => f64::INFINITY,
    });
    s
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = sample();
        if let Some(v) = s.cpu_seconds {
            let c = ConstCounter::new(v);
            c.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                c.metric_type(),
            )?)?;
        }
        for (name, help, value) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                s.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                s.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                s.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                s.max_fds,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                s.start_time,
            ),
        ] {
            if let Some(v) = value {
                let g = ConstGauge::new(v);
                g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let s = sample();
        let rss = s.resident_bytes.unwrap();
        assert!(rss > 0.0 && s.virtual_bytes.unwrap() >= rss);
        assert!(s.open_fds.unwrap() >= 3.0);
        assert!(s.max_fds.unwrap() > s.open_fds.unwrap());
        assert!(s.cpu_seconds.unwrap() >= 0.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = s.start_time.unwrap();
        assert!(start <= now + 1.0 && start > now - 3600.0, "{start} {now}");
    }
}
