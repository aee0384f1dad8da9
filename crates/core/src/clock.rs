//! Where iar's code asks what time it is: a [`Clock`], the real one
//! ([`RealClock`]) in production and a [`ManualClock`] that tests step, so
//! that a test of something timed (a rescan period, a lease, an expiry)
//! moves time forward instead of sleeping and never depends on how fast
//! the machine was.
//!
//! Only [`ManifestCluster`](crate::ManifestCluster)'s rescan period reads
//! it today; the rest of iar still calls `Instant::now()` and
//! `SystemTime::now()` directly.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// What time it is: monotonic time for periods and timeouts, wall-clock
/// time for what is written down (expiries, timestamps).
pub trait Clock: Send + Sync {
    /// Monotonic now, as [`Instant::now`].
    fn now(&self) -> Instant;
    /// Wall-clock now, as [`SystemTime::now`].
    fn system_now(&self) -> SystemTime;
}

/// The machine's clocks.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn system_now(&self) -> SystemTime {
        SystemTime::now()
    }
}

impl RealClock {
    /// The real clock, shared.
    pub fn shared() -> Arc<dyn Clock> {
        Arc::new(RealClock)
    }
}

#[cfg(any(test, feature = "test-support"))]
pub use manual::ManualClock;

#[cfg(any(test, feature = "test-support"))]
mod manual {
    use super::Clock;
    use std::sync::Mutex;
    use std::time::{Duration, Instant, SystemTime};

    /// A clock that stands still until [`advance`](ManualClock::advance)d:
    /// both of its times move together, by exactly what the test says.
    #[derive(Debug)]
    pub struct ManualClock {
        start: Instant,
        start_system: SystemTime,
        elapsed: Mutex<Duration>,
    }

    impl Default for ManualClock {
        fn default() -> Self {
            ManualClock::new()
        }
    }

    impl ManualClock {
        /// Stopped at the real time it was made.
        pub fn new() -> ManualClock {
            ManualClock {
                start: Instant::now(),
                start_system: SystemTime::now(),
                elapsed: Mutex::new(Duration::ZERO),
            }
        }

        /// Moves both times forward by `by`.
        pub fn advance(&self, by: Duration) {
            *self.elapsed.lock().unwrap() += by;
        }

        /// How far it was advanced since it was made.
        pub fn elapsed(&self) -> Duration {
            *self.elapsed.lock().unwrap()
        }
    }

    impl Clock for ManualClock {
        fn now(&self) -> Instant {
            self.start + self.elapsed()
        }

        fn system_now(&self) -> SystemTime {
            self.start_system + self.elapsed()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let clock = ManualClock::new();
        let (t0, s0) = (clock.now(), clock.system_now());
        assert_eq!(clock.now(), t0);
        clock.advance(Duration::from_millis(250));
        assert_eq!(clock.now() - t0, Duration::from_millis(250));
        assert_eq!(
            clock.system_now().duration_since(s0).unwrap(),
            Duration::from_millis(250)
        );
    }
}
