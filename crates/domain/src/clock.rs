//! Where the engine's time comes from. Everything the engine records or decides by time
//! asks a [`Clock`], so tests (and the simulator to come) can move time themselves.

use std::sync::Mutex;

/// Seconds since the Unix epoch, the engine's unit of time.
pub type Seconds = i64;

pub trait Clock: Send + Sync {
    fn now(&self) -> Seconds;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Seconds {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to.
#[derive(Debug)]
pub struct ManualClock(Mutex<Seconds>);

impl ManualClock {
    pub fn new(start: Seconds) -> Self {
        ManualClock(Mutex::new(start))
    }

    pub fn advance(&self, seconds: Seconds) {
        *self.0.lock().unwrap() += seconds;
    }

    pub fn set(&self, now: Seconds) {
        *self.0.lock().unwrap() = now;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Seconds {
        *self.0.lock().unwrap()
    }
}
