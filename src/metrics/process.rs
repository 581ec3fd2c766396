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

/// Reads `/proc/self` when scraped.
#[derive(Debug)]
pub(super) struct ProcessCollector;

/// Every family this collector exposes, as `# TYPE` names it (a counter
/// without `_total`), with its help and what one scrape read (`None`
/// where `/proc` did not answer). The first is a counter, the rest gauges.
pub(super) fn sample() -> [(&'static str, &'static str, Option<f64>); 6] {
    let me = Process::myself().ok();
    let stat = me.as_ref().and_then(|me| me.stat().ok());
    let ticks = procfs::ticks_per_second() as f64;
    // starttime counts clock ticks since boot; btime is boot in Unix time.
    let boot = procfs::boot_time_secs().ok();
    let start = stat.as_ref().zip(boot);
    let max_fds = me.as_ref().and_then(|me| me.limits().ok());
    [
        (
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            stat.as_ref().map(|s| (s.utime + s.stime) as f64 / ticks),
        ),
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            stat.as_ref().map(|s| s.rss_bytes().get() as f64),
        ),
        (
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            stat.as_ref().map(|s| s.vsize as f64),
        ),
        (
            "process_open_fds",
            "Number of open file descriptors.",
            me.as_ref()
                .and_then(|me| me.fd_count().ok())
                .map(|n| n as f64),
        ),
        (
            "process_max_fds",
            "Maximum number of open file descriptors.",
            max_fds.map(|l| match l.max_open_files.soft_limit {
                LimitValue::Value(v) => v as f64,
                LimitValue::Unlimited => f64::INFINITY,
            }),
        ),
        (
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            start.map(|(s, boot)| boot as f64 + s.starttime as f64 / ticks),
        ),
    ]
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let [(name, help, cpu), gauges @ ..] = sample();
        if let Some(v) = cpu {
            let c = ConstCounter::new(v);
            c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)?;
        }
        for (name, help, value) in gauges {
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
        let s: std::collections::HashMap<&str, f64> = sample()
            .into_iter()
            .map(|(n, _, v)| (n, v.unwrap()))
            .collect();
        let rss = s["process_resident_memory_bytes"];
        assert!(rss > 0.0 && s["process_virtual_memory_bytes"] >= rss);
        assert!(s["process_open_fds"] >= 3.0);
        assert!(s["process_max_fds"] > s["process_open_fds"]);
        assert!(s["process_cpu_seconds"] >= 0.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = s["process_start_time_seconds"];
        assert!(start <= now + 1.0 && start > now - 3600.0, "{start} {now}");
    }
}
