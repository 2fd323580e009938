//! Counters and histograms for `GET /metrics`, and the Prometheus text exposition format
//! (version 0.0.4) they are written in.
//!
//! What is counted happens on hot paths (every request, every scheduling pass, every
//! commit), so an observation is a few relaxed atomic additions: no lock, no allocation.
//! Histograms are `const`-constructible so that a crate can keep its own as a `static`
//! beside the code it measures; the exposition is written by hand (a few lines of text
//! do not need a client library).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The most buckets a histogram has (its `+Inf` bucket not counted).
pub const MAX_BUCKETS: usize = 16;

/// Bucket bounds for durations of a request or a commit: 1 ms to 10 s.
pub const LATENCY_SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Bucket bounds for a scheduling pass: 0.1 ms to 5 s.
pub const PASS_SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Bucket bounds for sizes (writes in a batch): 1 to 8192.
pub const SIZES: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
];

/// A number that only grows.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Observations counted into buckets by upper bound (cumulative only when written).
/// The sum is kept in millionths, so that it is an integer addition.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations at most `bounds[i]` and above `bounds[i - 1]`; the last used slot,
    /// `bounds.len()`, holds those above every bound.
    buckets: [AtomicU64; MAX_BUCKETS + 1],
    count: AtomicU64,
    sum_millionths: AtomicU64,
}

impl Histogram {
    /// A histogram with these upper bounds (ascending, at most [`MAX_BUCKETS`]).
    pub const fn new(bounds: &'static [f64]) -> Self {
        assert!(bounds.len() <= MAX_BUCKETS);
        Self {
            bounds,
            buckets: [const { AtomicU64::new(0) }; MAX_BUCKETS + 1],
            count: AtomicU64::new(0),
            sum_millionths: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, value: f64) {
        let slot = self
            .bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(self.bounds.len());
        self.buckets[slot].fetch_add(1, Relaxed);
        self.count.fetch_add(1, Relaxed);
        let millionths = (value.max(0.0) * 1e6) as u64;
        self.sum_millionths.fetch_add(millionths, Relaxed);
    }

    pub fn observe_duration(&self, elapsed: Duration) {
        self.observe(elapsed.as_secs_f64());
    }

    pub fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }
}

/// A metrics page under construction, in the text exposition format.
#[derive(Default)]
pub struct Exposition {
    text: String,
}

/// `name="value"` pairs of one sample.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    /// The `# HELP` and `# TYPE` lines of a family (`kind`: `counter`, `gauge`,
    /// `histogram`); its samples follow.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    /// One sample line.
    pub fn sample(&mut self, name: &str, labels: Labels<'_>, value: f64) {
        self.text.push_str(name);
        write_labels(&mut self.text, labels, None);
        let _ = writeln!(self.text, " {}", number(value));
    }

    /// The `_bucket`, `_sum` and `_count` lines of a histogram.
    pub fn histogram(&mut self, name: &str, labels: Labels<'_>, histogram: &Histogram) {
        // Read the buckets first: a concurrent observation then shows in `count` at
        // worst, never a `+Inf` bucket below a lower one.
        let mut cumulative = 0;
        for (i, bound) in histogram.bounds.iter().enumerate() {
            cumulative += histogram.buckets[i].load(Relaxed);
            self.text.push_str(name);
            self.text.push_str("_bucket");
            write_labels(&mut self.text, labels, Some(&number(*bound)));
            let _ = writeln!(self.text, " {cumulative}");
        }
        cumulative += histogram.buckets[histogram.bounds.len()].load(Relaxed);
        let count = histogram.count().max(cumulative);
        self.text.push_str(name);
        self.text.push_str("_bucket");
        write_labels(&mut self.text, labels, Some("+Inf"));
        let _ = writeln!(self.text, " {count}");
        let sum = histogram.sum_millionths.load(Relaxed) as f64 / 1e6;
        self.sample(&format!("{name}_sum"), labels, sum);
        self.sample(&format!("{name}_count"), labels, count as f64);
    }

    pub fn finish(self) -> String {
        self.text
    }
}

fn write_labels(text: &mut String, labels: Labels<'_>, le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    text.push('{');
    let mut first = true;
    for (name, value) in labels.iter().copied().chain(le.map(|le| ("le", le))) {
        if !first {
            text.push(',');
        }
        first = false;
        text.push_str(name);
        text.push_str("=\"");
        for c in value.chars() {
            match c {
                '\\' => text.push_str("\\\\"),
                '"' => text.push_str("\\\""),
                '\n' => text.push_str("\\n"),
                c => text.push(c),
            }
        }
        text.push('"');
    }
    text.push('}');
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample value as Prometheus reads it (integers without a fraction).
fn number(value: f64) -> String {
    if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_written_cumulative_with_sum_and_count() {
        static H: Histogram = Histogram::new(&[0.1, 1.0]);
        H.observe(0.05);
        H.observe(0.5);
        H.observe(3.0);
        let mut page = Exposition::new();
        page.family("x_seconds", "histogram", "what x takes");
        page.histogram("x_seconds", &[("route", "/a\"b")], &H);
        let text = page.finish();
        assert!(text.contains("# TYPE x_seconds histogram\n"));
        assert!(text.contains("x_seconds_bucket{route=\"/a\\\"b\",le=\"0.1\"} 1\n"));
        assert!(text.contains("x_seconds_bucket{route=\"/a\\\"b\",le=\"1\"} 2\n"));
        assert!(text.contains("x_seconds_bucket{route=\"/a\\\"b\",le=\"+Inf\"} 3\n"));
        assert!(text.contains("x_seconds_sum{route=\"/a\\\"b\"} 3.55\n"));
        assert!(text.contains("x_seconds_count{route=\"/a\\\"b\"} 3\n"));
    }

    #[test]
    fn samples_without_labels_and_integers_without_fractions() {
        let mut page = Exposition::new();
        page.sample("up", &[], 1.0);
        page.sample("ratio", &[("a", "b")], 0.25);
        assert_eq!(page.finish(), "up 1\nratio{a=\"b\"} 0.25\n");
    }
}
