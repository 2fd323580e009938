//! A small seeded generator and the distributions the workload model draws from. Written
//! here rather than taken from a crate: the generated traces must stay the same for a
//! seed across dependency upgrades, and the model needs only a few distributions.

/// xoshiro256** seeded through splitmix64: fast, good enough for simulation, and fixed.
#[derive(Debug, Clone)]
pub struct Rng {
    state: [u64; 4],
}

impl Rng {
    pub fn seeded(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng {
            state: [next(), next(), next(), next()],
        }
    }

    /// An independent stream for one part of a model, so that changing how one part
    /// draws does not shift the numbers of the others.
    pub fn stream(seed: u64, part: u64) -> Rng {
        Rng::seeded(seed ^ part.wrapping_mul(0xD605_BBB5_8C8A_BD3D))
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform on the open interval (0, 1): safe to take the logarithm of.
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
    }

    pub fn between(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.uniform()
    }

    /// Standard normal (Box–Muller; one of the pair is enough here).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// Gamma with `shape` and `scale` (mean shape × scale): Marsaglia and Tsang's method,
    /// with the usual boost for shapes below 1.
    pub fn gamma(&mut self, shape: f64, scale: f64) -> f64 {
        if shape < 1.0 {
            let boost = self.uniform().powf(1.0 / shape);
            return self.gamma(shape + 1.0, scale) * boost;
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.uniform();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v * scale;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_numbers_and_streams_differ() {
        let (mut a, mut b) = (Rng::seeded(7), Rng::seeded(7));
        assert!((0..100).all(|_| a.next_u64() == b.next_u64()));
        assert_ne!(Rng::stream(7, 1).next_u64(), Rng::stream(7, 2).next_u64());
    }

    #[test]
    fn gamma_has_its_mean_and_variance() {
        let mut rng = Rng::seeded(1);
        for (shape, scale) in [(0.5, 2.0), (4.2, 0.94), (312.0, 0.03)] {
            let n = 200_000;
            let draws: Vec<f64> = (0..n).map(|_| rng.gamma(shape, scale)).collect();
            let mean = draws.iter().sum::<f64>() / n as f64;
            let variance = draws.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
            let (expected_mean, expected_variance) = (shape * scale, shape * scale * scale);
            assert!(
                (mean / expected_mean - 1.0).abs() < 0.01,
                "{shape} {scale}: {mean}"
            );
            assert!(
                (variance / expected_variance - 1.0).abs() < 0.03,
                "{shape} {scale}: {variance}"
            );
        }
    }
}
