//! Thread CPU time: a clock for the compare binary and a criterion
//! measurement for the benches.

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use std::time::Duration;

/// Thread CPU time as a criterion measurement: time the benchmark thread
/// spent descheduled (other processes on a shared machine) does not count.
/// Set `LATCHTREE_BENCH_WALL=1` to measure wall-clock time instead.
pub struct ThreadCpu;

/// Borrowed for its nanosecond formatter.
static WALL: WallTime = WallTime;

/// CPU time consumed by the calling thread.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and the clock id is one
    // Linux supports; clock_gettime writes nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl Measurement for ThreadCpu {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu()
    }
    fn end(&self, started: Duration) -> Duration {
        thread_cpu().saturating_sub(started)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, d: &Duration) -> f64 {
        d.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        WALL.formatter()
    }
}
