//! Users' requested times, for generated traces: real estimates are inaccurate, and a
//! policy tuned on perfect ones learns the wrong lesson. A simple model after what
//! Tsafrir, Etsion and Feitelson observed in real traces ("Modeling user runtime
//! estimates", JSSPP 2005): a fraction of users ask for the maximum the site allows;
//! the others overestimate by varying amounts (the accuracy, run / request, is roughly
//! uniform), and round up to a few popular values (whole minutes, quarter hours, hours).

use super::random::Rng;

/// Requests users pick from, in seconds: 1, 5, 10, 15, 20, 30, 45 minutes; 1, 1.5, 2,
/// 3, 4, 5, 6, 8, 10, 12, 18, 24, 36, 48 hours.
pub const POPULAR_REQUESTS: [i64; 21] = [
    60, 300, 600, 900, 1200, 1800, 2700, 3600, 5400, 7200, 10_800, 14_400, 18_000, 21_600, 28_800,
    36_000, 43_200, 64_800, 86_400, 129_600, 172_800,
];

#[derive(Debug, Clone, PartialEq)]
pub struct EstimateModel {
    /// The share of jobs that request the maximum.
    pub at_maximum: f64,
    /// The lowest accuracy (run / request) of the others; theirs is uniform up to 1.
    pub lowest_accuracy: f64,
    /// The site's limit: no request is longer (and no run, in a trace it applies to).
    pub maximum: i64,
}

impl Default for EstimateModel {
    fn default() -> Self {
        EstimateModel {
            at_maximum: 0.15,
            lowest_accuracy: 0.05,
            maximum: 172_800,
        }
    }
}

impl EstimateModel {
    /// A request for a job that runs `run` seconds: never shorter than the run.
    pub fn estimate(&self, rng: &mut Rng, run: i64) -> i64 {
        let maximum = self.maximum.max(run);
        if rng.uniform() < self.at_maximum {
            return maximum;
        }
        let accuracy = rng.between(self.lowest_accuracy.clamp(0.001, 1.0), 1.0);
        let wanted = (run as f64 / accuracy).ceil() as i64;
        POPULAR_REQUESTS
            .iter()
            .copied()
            .find(|&popular| popular >= wanted)
            .unwrap_or(maximum)
            .min(maximum)
            .max(run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_cover_the_run_are_popular_and_some_at_the_maximum() {
        let model = EstimateModel::default();
        let mut rng = Rng::seeded(3);
        let n = 20_000;
        let mut at_maximum = 0;
        let mut over = 0.0;
        for i in 0..n {
            // Up to 50 minutes: only those asking for the maximum get it.
            let run = 1 + (i * 37) % 3000;
            let request = model.estimate(&mut rng, run);
            assert!(request >= run);
            assert!(POPULAR_REQUESTS.contains(&request) || request == run.max(model.maximum));
            at_maximum += usize::from(request == model.maximum);
            over += request as f64 / run as f64;
        }
        let share = at_maximum as f64 / n as f64;
        assert!((share - model.at_maximum).abs() < 0.01, "{share}");
        assert!(over / n as f64 > 2.0);
    }
}
