//! Order statistics of latency samples and how the report prints them.

use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub struct Summary {
    pub min: Duration,
    pub median: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
}

/// What a subscription's warm sends cost in calls for a credential kept until `renew_before`
/// before it expires (an `AssumeRole` session, an identity token): the one its first send
/// made, and those `warm_calls` the warm sends made after it; renewed once per `renews_every`.
pub struct Renewals {
    pub per_window: usize,
    pub renews_every: Duration,
    /// At most one call per `window`: none while warm, and kept at least that long.
    pub met: bool,
}

pub fn renewals(warm_calls: usize, lifetime: Duration, renew_before: Duration, window: Duration) -> Renewals {
    let renews_every = lifetime - renew_before;
    Renewals { per_window: 1 + warm_calls, renews_every, met: warm_calls == 0 && renews_every >= window }
}

/// Median (mean of the two middle samples for an even count) and nearest-rank percentiles.
pub fn summarize(samples: &[Duration]) -> Summary {
    assert!(!samples.is_empty(), "no samples");
    let mut sorted = samples.to_vec();
    sorted.sort();
    let n = sorted.len();
    let rank = |q: f64| sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
    let median = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2 };
    Summary { min: sorted[0], median, p90: rank(0.90), p99: rank(0.99), max: sorted[n - 1] }
}

/// `run` timed `n` times, one sample a run.
pub fn time_each(n: usize, run: &dyn Fn()) -> Summary {
    let samples: Vec<Duration> = (0..n)
        .map(|_| {
            let started = Instant::now();
            run();
            started.elapsed()
        })
        .collect();
    summarize(&samples)
}

/// The middle of counts (page faults, throttled periods), `None` for none.
pub fn middle(values: &[u64]) -> Option<u64> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied()
}

/// Milliseconds with a precision that suits the size.
pub fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.3} ms")
    } else if ms < 100.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

/// Like [`ms`], but in microseconds below a tenth of a millisecond, where a signature or an
/// AES-GCM opening lies and three decimals of a millisecond would round it away.
pub fn fine(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 100.0 {
        format!("{us:.1} µs")
    } else {
        ms(d)
    }
}

pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}
