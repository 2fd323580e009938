//! Reports: samples consolidated into datapoints (spec 2.15, 4.15; decisions "Reports").
//!
//! Time is cut into fixed periods of `datapointDuration` seconds counted from the epoch;
//! a datapoint covers one period. Every sample is folded into its period's datapoint
//! as soon as it arrives, whatever its timestamp: a datapoint keeps, per key, the sum
//! and count of the numbers its samples carried, so a late or out-of-order sample
//! changes exactly the average it belongs to, and the answer never depends on arrival
//! order. `data` is each key's sum divided by its count (a key averages over the samples
//! that have it), or `null` while the datapoint has fewer than `minimumSampleSize`
//! samples. Only periods that received samples (or were given as history) have a
//! datapoint; at most `reportSize` are kept, the oldest dropped, and a sample older than
//! every kept datapoint of a full report is dropped too.
//!
//! A sample stays readable under `/samples` until its period has ended (it is then
//! consolidated for good and discarded), or forever with `keepSamples`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Store collections.
pub const REPORTS: &str = "reports";
pub const SAMPLES: &str = "report_samples";

/// Largest `reportSize` accepted (the datapoints live in the report's document).
pub const MAX_REPORT_SIZE: i64 = 100_000;

/// One period's consolidation, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Datapoint {
    /// Seconds since the epoch; `end` is `start + datapointDuration`.
    pub start: i64,
    pub end: i64,
    pub first_sample: Option<i64>,
    pub last_sample: Option<i64>,
    pub sample_count: i64,
    /// Per key: sum and count of the numbers seen.
    pub sums: Map<String, Value>,
    pub counts: Map<String, Value>,
}

impl Datapoint {
    fn new(start: i64, duration: i64) -> Self {
        Self {
            start,
            end: start + duration,
            first_sample: None,
            last_sample: None,
            sample_count: 0,
            sums: Map::new(),
            counts: Map::new(),
        }
    }

    /// `data`: the averages, or `None` (null) below `minimum` samples.
    pub fn averages(&self, minimum: i64) -> Option<Map<String, Value>> {
        if self.sample_count == 0 || self.sample_count < minimum {
            return None;
        }
        Some(
            self.sums
                .iter()
                .filter_map(|(key, sum)| {
                    let count = self.counts.get(key)?.as_f64()?;
                    let average = sum.as_f64()? / count;
                    serde_json::Number::from_f64(average).map(|n| (key.clone(), Value::Number(n)))
                })
                .collect(),
        )
    }

    fn fold(&mut self, at: i64, data: &Map<String, Value>) {
        self.sample_count += 1;
        self.first_sample = Some(self.first_sample.map_or(at, |f| f.min(at)));
        self.last_sample = Some(self.last_sample.map_or(at, |l| l.max(at)));
        for (key, value) in data {
            let Some(x) = value.as_f64() else { continue };
            add(&mut self.sums, key, x);
            add(&mut self.counts, key, 1.0);
        }
    }
}

fn add(map: &mut Map<String, Value>, key: &str, x: f64) {
    let total = map.get(key).and_then(Value::as_f64).unwrap_or(0.0) + x;
    if let Some(n) = serde_json::Number::from_f64(total) {
        map.insert(key.to_string(), Value::Number(n));
    }
}

/// A report as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub consolidation_function: String,
    pub datapoint_duration: i64,
    pub minimum_sample_size: i64,
    pub report_size: i64,
    pub keep_samples: bool,
    /// In period order, oldest first.
    pub datapoints: Vec<Datapoint>,
}

/// What became of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Folded {
    /// Folded into the datapoint starting at this second.
    Into(i64),
    /// Older than every datapoint of a full report: dropped.
    TooOld,
}

/// A historical datapoint given on creation.
#[derive(Debug, Clone, PartialEq)]
pub struct History {
    pub start: i64,
    pub first_sample: Option<i64>,
    pub last_sample: Option<i64>,
    /// `None` for `data: null`.
    pub data: Option<Map<String, Value>>,
}

impl Report {
    /// The start of the period holding `at`.
    pub fn period_of(&self, at: i64) -> i64 {
        at.div_euclid(self.datapoint_duration) * self.datapoint_duration
    }

    /// Folds one sample taken at `at` (seconds) into its datapoint.
    pub fn fold(&mut self, at: i64, data: &Map<String, Value>) -> Folded {
        let start = self.period_of(at);
        let position = match self.datapoints.binary_search_by_key(&start, |d| d.start) {
            Ok(position) => position,
            Err(position) => {
                let full = self.datapoints.len() as i64 >= self.report_size;
                if full && position == 0 {
                    return Folded::TooOld;
                }
                self.datapoints
                    .insert(position, Datapoint::new(start, self.datapoint_duration));
                if full {
                    self.datapoints.remove(0);
                    position - 1
                } else {
                    position
                }
            }
        };
        self.datapoints[position].fold(at, data);
        Folded::Into(start)
    }

    /// Adds datapoints given on creation: each counts as one sample of its values (a
    /// `null` one as none), in the period its start falls in. Two in one period are a
    /// problem, as is a report given more than `reportSize` of them (the newest are kept
    /// otherwise).
    pub fn add_history(&mut self, history: Vec<History>) -> Result<(), String> {
        for item in history {
            let start = self.period_of(item.start);
            let Err(position) = self.datapoints.binary_search_by_key(&start, |d| d.start) else {
                return Err(format!(
                    "two datapoints fall in the period starting at second {start}"
                ));
            };
            let mut datapoint = Datapoint::new(start, self.datapoint_duration);
            datapoint.first_sample = item.first_sample;
            datapoint.last_sample = item.last_sample;
            if let Some(data) = &item.data {
                datapoint.sample_count = self.minimum_sample_size.max(1);
                for (key, value) in data {
                    if let Some(x) = value.as_f64() {
                        add(&mut datapoint.sums, key, x * datapoint.sample_count as f64);
                        add(&mut datapoint.counts, key, datapoint.sample_count as f64);
                    }
                }
            }
            self.datapoints.insert(position, datapoint);
        }
        let excess = self
            .datapoints
            .len()
            .saturating_sub(self.report_size as usize);
        self.datapoints.drain(..excess);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(duration: i64, size: i64, minimum: i64) -> Report {
        Report {
            id: "r".into(),
            name: "r".into(),
            description: None,
            consolidation_function: "average".into(),
            datapoint_duration: duration,
            minimum_sample_size: minimum,
            report_size: size,
            keep_samples: false,
            datapoints: Vec::new(),
        }
    }

    fn data(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn averages(r: &Report) -> Vec<(i64, Option<Map<String, Value>>)> {
        r.datapoints
            .iter()
            .map(|d| (d.start, d.averages(r.minimum_sample_size)))
            .collect()
    }

    #[test]
    fn averages_per_key_whatever_the_arrival_order() {
        let samples = [
            (100, json!({"cpu": 1, "mem": 10})),
            (105, json!({"cpu": 2})),
            (161, json!({"cpu": 9, "name": "x"})),
            (119, json!({"cpu": 6, "mem": 20})),
        ];
        let mut forward = report(60, 10, 1);
        let mut backward = report(60, 10, 1);
        for (at, d) in &samples {
            forward.fold(*at, &data(d.clone()));
        }
        for (at, d) in samples.iter().rev() {
            backward.fold(*at, &data(d.clone()));
        }
        assert_eq!(averages(&forward), averages(&backward));
        let a = averages(&forward);
        assert_eq!(a[0].0, 60);
        assert_eq!(a[0].1.as_ref().unwrap()["cpu"], json!(3.0));
        assert_eq!(a[0].1.as_ref().unwrap()["mem"], json!(15.0));
        assert_eq!(a[1].1.as_ref().unwrap()["cpu"], json!(9.0));
        assert!(a[1].1.as_ref().unwrap().get("name").is_none());
        assert_eq!(forward.datapoints[0].first_sample, Some(100));
        assert_eq!(forward.datapoints[0].last_sample, Some(119));
    }

    #[test]
    fn too_few_samples_give_null_and_the_oldest_datapoints_go() {
        let mut r = report(10, 2, 2);
        r.fold(5, &data(json!({"x": 1})));
        assert_eq!(averages(&r)[0].1, None);
        r.fold(6, &data(json!({"x": 3})));
        assert_eq!(averages(&r)[0].1.as_ref().unwrap()["x"], json!(2.0));
        r.fold(15, &data(json!({"x": 1})));
        r.fold(25, &data(json!({"x": 1})));
        assert_eq!(
            r.datapoints.iter().map(|d| d.start).collect::<Vec<_>>(),
            [10, 20]
        );
        assert_eq!(r.fold(1, &data(json!({"x": 1}))), Folded::TooOld);
        // A late sample for a kept period still counts.
        assert_eq!(r.fold(12, &data(json!({"x": 5}))), Folded::Into(10));
        assert_eq!(averages(&r)[0].1.as_ref().unwrap()["x"], json!(3.0));
    }

    #[test]
    fn history_is_placed_by_period_and_cut_to_size() {
        let mut r = report(10, 2, 1);
        let h = |start, x: Option<Value>| History {
            start,
            first_sample: None,
            last_sample: None,
            data: x.map(data),
        };
        r.add_history(vec![
            h(0, Some(json!({"x": 1}))),
            h(10, None),
            h(20, Some(json!({"x": 4}))),
        ])
        .unwrap();
        assert_eq!(
            averages(&r),
            vec![(10, None), (20, Some(data(json!({"x": 4.0}))))]
        );
        r.fold(21, &data(json!({"x": 6})));
        assert_eq!(averages(&r)[1].1.as_ref().unwrap()["x"], json!(5.0));
        assert!(r.add_history(vec![h(22, None)]).is_err());
    }
}
