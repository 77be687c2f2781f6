//! Hand timing: medians of round-robin repetitions (single thread), and
//! timed reader/writer runs (several threads).

pub(crate) use latchtree_benches::thread_cpu::thread_cpu;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

/// The clock of single-threaded measurements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Clock {
    /// CPU time of the calling thread: time the thread was descheduled
    /// (other processes on a shared machine) does not count.
    ThreadCpu,
    /// Wall-clock time.
    Wall,
}

/// A running stopwatch on a [`Clock`].
pub(crate) struct Stopwatch {
    clock: Clock,
    wall: Instant,
    cpu: Duration,
}

impl Stopwatch {
    pub(crate) fn start(clock: Clock) -> Self {
        Stopwatch {
            clock,
            wall: Instant::now(),
            cpu: if clock == Clock::ThreadCpu {
                thread_cpu()
            } else {
                Duration::ZERO
            },
        }
    }

    /// Nanoseconds since `start`, less the stopwatch's own cost (see
    /// [`overhead_ns`]), divided by `ops`.
    pub(crate) fn ns_per(&self, ops: usize) -> f64 {
        (self.raw_ns() - overhead_ns(self.clock)).max(0.0) / ops as f64
    }

    fn raw_ns(&self) -> f64 {
        let d = match self.clock {
            Clock::ThreadCpu => thread_cpu() - self.cpu,
            Clock::Wall => self.wall.elapsed(),
        };
        d.as_nanos() as f64
    }
}

/// What an empty start/stop pair measures on `clock` (median of 101): reading
/// the thread CPU clock is a system call, several hundred ns on some VMs,
/// which would otherwise inflate short timed blocks.
pub(crate) fn overhead_ns(clock: Clock) -> f64 {
    static CACHE: [OnceLock<f64>; 2] = [OnceLock::new(), OnceLock::new()];
    *CACHE[clock as usize].get_or_init(|| {
        let mut xs: Vec<f64> = (0..101).map(|_| Stopwatch::start(clock).raw_ns()).collect();
        median(&mut xs)
    })
}

/// One contender of a single-threaded measurement: `(first, iters)` runs
/// `iters` operations (lookups: of the probe addresses from `first` on) and
/// returns a checksum of their results.
pub(crate) type Run<'a> = Box<dyn FnMut(usize, usize) -> u64 + 'a>;

/// The median of `xs` (not empty).
pub(crate) fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[m]
    } else {
        (xs[m - 1] + xs[m]) / 2.0
    }
}

/// Runs every contender once untimed, then `reps` rounds in which each runs
/// `iters` operations, timed; returns each one's median ns per operation.
/// `first(rep)` is the first probe address of round `rep` (0: the untimed
/// one), the same for every contender of a round. Every contender must
/// return the same checksum as the first one (they answer the same
/// queries), otherwise this panics naming the culprit.
pub(crate) fn round_robin(
    contenders: &mut [(&'static str, Run<'_>)],
    iters: usize,
    reps: usize,
    clock: Clock,
    first: impl Fn(usize) -> usize,
) -> Vec<f64> {
    let want = (contenders[0].1)(first(0), iters);
    for (name, run) in contenders.iter_mut() {
        let got = run(first(0), iters);
        assert_eq!(
            got, want,
            "{name} disagrees with {} on the same queries",
            "the baseline"
        );
    }
    let mut samples = vec![Vec::with_capacity(reps); contenders.len()];
    for rep in 1..=reps {
        let first = first(rep);
        for (i, (_, run)) in contenders.iter_mut().enumerate() {
            let t = Stopwatch::start(clock);
            black_box(run(first, iters));
            samples[i].push(t.ns_per(iters));
        }
    }
    samples.iter_mut().map(|s| median(s)).collect()
}

/// How the writer thread of a concurrent run behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriterMode {
    /// No writer thread.
    None,
    /// Updates back to back.
    Tight,
    /// This many updates per second, evenly spread (see `concurrent`).
    Paced(u64),
}

impl WriterMode {
    pub(crate) fn label(self) -> String {
        match self {
            WriterMode::None => "no writer".into(),
            WriterMode::Tight => "tight writer".into(),
            WriterMode::Paced(r) => format!("writer {r}/s"),
        }
    }
}

/// What a concurrent run measured.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConcResult {
    /// Wall-clock ns per lookup, averaged over the reader threads.
    pub(crate) reader_ns: f64,
    /// Thread CPU ns per lookup (excludes time descheduled or parked).
    pub(crate) reader_cpu_ns: f64,
    /// Updates per second the writer completed (0 without a writer).
    pub(crate) writer_ops_s: f64,
}

/// Runs `readers` reader threads (each built by `make_reader` on its own
/// thread, looking up `queries` cyclically from its own offset) and, unless
/// `mode` is `None`, one writer thread calling `write(i)` for `i = 0, 1, ..`
/// for `dur`.
pub(crate) fn concurrent<MR, R, W>(
    readers: usize,
    mode: WriterMode,
    dur: Duration,
    queries: &[u64],
    make_reader: MR,
    mut write: W,
) -> ConcResult
where
    MR: Fn() -> R + Sync,
    R: FnMut(u64) -> Option<u64>,
    W: FnMut(usize) + Send,
{
    let has_writer = mode != WriterMode::None;
    let barrier = Barrier::new(readers + 1 + usize::from(has_writer));
    let stop = AtomicBool::new(false);
    let (barrier, stop, make_reader) = (&barrier, &stop, &make_reader);
    let mask = queries.len() - 1;
    std::thread::scope(|s| {
        let reader_threads: Vec<_> = (0..readers)
            .map(|t| {
                s.spawn(move || {
                    let mut f = make_reader();
                    let mut i = t * 4099;
                    let mut ops = 0u64;
                    let mut acc = 0u64;
                    barrier.wait();
                    let (t0, c0) = (Instant::now(), thread_cpu());
                    // At least one block, so that a reader starved of CPU
                    // on a loaded machine still reports a finite time.
                    loop {
                        for _ in 0..256 {
                            if let Some(x) = f(black_box(queries[i & mask])) {
                                acc = acc.wrapping_add(x);
                            }
                            i += 1;
                        }
                        ops += 256;
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    let (wall, cpu) = (t0.elapsed(), thread_cpu() - c0);
                    black_box(acc);
                    (
                        wall.as_nanos() as f64 / ops as f64,
                        cpu.as_nanos() as f64 / ops as f64,
                    )
                })
            })
            .collect();
        // Not `has_writer.then(..)`: without a writer, `write` must stay
        // alive until the readers are done (left-right's write handle).
        let writer_thread = if has_writer {
            Some(s.spawn(move || {
                let mut done = 0usize;
                barrier.wait();
                let t0 = Instant::now();
                match mode {
                    WriterMode::Tight => {
                        while !stop.load(Ordering::Relaxed) {
                            write(done);
                            done += 1;
                        }
                    }
                    WriterMode::Paced(per_s) => {
                        // Evenly spread: write `i` is due at `i / per_s`
                        // seconds. Sleep while the next one is far off
                        // (Linux oversleeps by ~50 µs), yield when it is
                        // close, so that a fast rate is not turned into
                        // bursts.
                        let period_ns = 1_000_000_000 / u128::from(per_s.max(1));
                        while !stop.load(Ordering::Relaxed) {
                            let due = u128::try_from(done).unwrap_or(u128::MAX) * period_ns;
                            let now = t0.elapsed().as_nanos();
                            if now >= due {
                                write(done);
                                done += 1;
                            } else if due - now > 100_000 {
                                std::thread::sleep(Duration::from_micros(50));
                            } else {
                                std::thread::yield_now();
                            }
                        }
                    }
                    WriterMode::None => unreachable!(),
                }
                // Hand `write` back: it may own what readers read
                // (left-right's write handle), so it is dropped only after
                // every reader has stopped.
                (done as f64 / t0.elapsed().as_secs_f64(), write)
            }))
        } else {
            None
        };
        barrier.wait();
        std::thread::sleep(dur);
        stop.store(true, Ordering::Relaxed);
        let per_reader: Vec<(f64, f64)> = reader_threads
            .into_iter()
            .map(|h| h.join().expect("reader panicked"))
            .collect();
        let writer = writer_thread.map(|h| h.join().expect("writer panicked"));
        let writer_ops_s = writer.as_ref().map_or(0.0, |w| w.0);
        drop(writer);
        let k = per_reader.len() as f64;
        ConcResult {
            reader_ns: per_reader.iter().map(|r| r.0).sum::<f64>() / k,
            reader_cpu_ns: per_reader.iter().map(|r| r.1).sum::<f64>() / k,
            writer_ops_s,
        }
    })
}
