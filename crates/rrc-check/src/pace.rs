//! Pacing for --rate: each thread runs on its own evenly spaced schedule. A
//! thread that falls behind (the server paused) drops the missed slots
//! instead of bursting to catch up, so a failover is not followed by an
//! artificial load spike.

use std::time::{Duration, Instant};

pub struct Pacer {
    interval: Duration,
    next: Instant,
}

impl Pacer {
    /// A schedule of one op every `interval`, first one at `first`.
    pub fn new(interval: Duration, first: Instant) -> Pacer {
        Pacer { interval, next: first }
    }

    /// For `rate` ops/s in total over `threads` threads, thread `index`:
    /// threads start staggered over one interval so the total is even.
    pub fn for_thread(rate: f64, threads: u32, index: u32, start: Instant) -> Pacer {
        let interval = Duration::from_secs_f64(f64::from(threads) / rate);
        let offset = interval.mul_f64(f64::from(index) / f64::from(threads));
        Pacer::new(interval, start + offset)
    }

    /// When the next op is due, advancing the schedule. If `now` is more
    /// than one interval late, the schedule restarts at `now`.
    pub fn next_slot(&mut self, now: Instant) -> Instant {
        if now > self.next + self.interval {
            self.next = now;
        }
        let slot = self.next;
        self.next += self.interval;
        slot
    }

    /// Sleeps until the next slot, but not past `deadline`. Returns false if
    /// the deadline comes first.
    pub fn wait(&mut self, deadline: Option<Instant>) -> bool {
        let slot = self.next_slot(Instant::now());
        if deadline.is_some_and(|d| slot >= d) {
            return false;
        }
        let now = Instant::now();
        if slot > now {
            std::thread::sleep(slot - now);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_even_and_does_not_burst() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Pacer::new(ms(10), t0);
        // On time: slots 10 ms apart.
        assert_eq!(p.next_slot(t0), t0);
        assert_eq!(p.next_slot(t0 + ms(1)), t0 + ms(10));
        assert_eq!(p.next_slot(t0 + ms(12)), t0 + ms(20));
        // Slightly late (within one interval): keep the schedule.
        assert_eq!(p.next_slot(t0 + ms(35)), t0 + ms(30));
        // Far behind (a 1 s pause): restart at now, no burst of 100 slots.
        let late = t0 + ms(1000);
        assert_eq!(p.next_slot(late), late);
        assert_eq!(p.next_slot(late), late + ms(10));
    }

    #[test]
    fn threads_are_staggered() {
        let t0 = Instant::now();
        // 400 ops/s over 4 threads: 10 ms per thread, offsets 0, 2.5, 5, 7.5 ms.
        let mut p = Pacer::for_thread(400.0, 4, 2, t0);
        assert_eq!(p.next_slot(t0), t0 + Duration::from_micros(5000));
        assert_eq!(p.next_slot(t0), t0 + Duration::from_micros(15000));
    }

    #[test]
    fn wait_paces_in_real_time() {
        let t0 = Instant::now();
        let mut p = Pacer::new(Duration::from_millis(5), t0);
        for _ in 0..20 {
            assert!(p.wait(None));
        }
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(95), "{took:?}");
        assert!(!p.wait(Some(Instant::now())));
    }
}
