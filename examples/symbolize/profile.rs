//! A tiny sampling profiler: `SIGPROF` every millisecond of CPU time, and a
//! handler that reads the interrupted program counter and calls
//! [`LoadedObjects::lookup`](latchtree::LoadedObjects::lookup) on the live index,
//! inside the signal handler.
//!
//! The handler does only async-signal-safe things: one `lookup` (no lock, no
//! allocation, no epoch pin, no thread-local) and a few atomic operations on
//! a fixed buffer. It records `(module id, address)`; symbols are looked up
//! later, outside the handler, by `Symbolizer::resolve_sample`.
//!
//! The example is single-threaded, so every `SIGPROF` lands on the sampling
//! thread and has run by the time the timer is disarmed.

use crate::sigprof::{interrupted_pc, set_sigprof, set_timer};
use std::hint::black_box;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Samples the buffer holds; later ones are counted but dropped.
const CAPACITY: usize = 512;

/// Samples taken so far.
static TAKEN: AtomicUsize = AtomicUsize::new(0);
/// Per sample: the interrupted program counter.
static PCS: [AtomicU64; CAPACITY] = [const { AtomicU64::new(0) }; CAPACITY];
/// Per sample: the id of the module containing it, 0 if none.
static IDS: [AtomicU64; CAPACITY] = [const { AtomicU64::new(0) }; CAPACITY];

/// One sample: where the thread was, and in which module.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    /// The interrupted program counter.
    pub(crate) pc: u64,
    /// The number of the module `lookup` found it in (`ModuleId::get`),
    /// if any.
    pub(crate) module: Option<u64>,
}

/// The `SIGPROF` handler: async-signal-safe throughout.
extern "C" fn on_sigprof(
    _signal: libc::c_int,
    _info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: installed with SA_SIGINFO, so `context` is the kernel's
    // `ucontext_t` of the interrupted code.
    let pc = unsafe { interrupted_pc(context) };
    let id = crate::OBJECTS.lookup(pc).map_or(0, |hit| hit.id().get());
    let n = TAKEN.fetch_add(1, Ordering::Relaxed);
    if n < CAPACITY {
        PCS[n].store(pc, Ordering::Relaxed);
        IDS[n].store(id, Ordering::Relaxed);
    }
}

/// Burns CPU in a function of its own, so the profile has a clear winner.
#[inline(never)]
fn busy_work(rounds: u64) -> u64 {
    let mut x = black_box(0x9e37_79b9_7f4a_7c15_u64);
    for i in 0..rounds {
        x = (x ^ (x >> 31))
            .wrapping_mul(0xbf58_476d_1ce4_e5b9)
            .wrapping_add(i);
    }
    x
}

/// Runs [`busy_work`] under a `SIGPROF` timer firing every millisecond of
/// CPU time until `wanted` samples were taken or `deadline` of wall time has
/// passed (on a busy machine this process gets less CPU), and returns the
/// samples (at most `CAPACITY`) and how many were taken in all.
pub(crate) fn sample(wanted: usize, deadline: Duration) -> io::Result<(Vec<Sample>, usize)> {
    TAKEN.store(0, Ordering::Relaxed);
    let handler = (on_sigprof as *const ()).addr();
    // SAFETY: `on_sigprof` has the SA_SIGINFO signature and is
    // async-signal-safe.
    unsafe { set_sigprof(handler, libc::SA_SIGINFO | libc::SA_RESTART) }?;
    set_timer(Duration::from_millis(1))?;
    let start = Instant::now();
    let mut sink = 0;
    while TAKEN.load(Ordering::Relaxed) < wanted && start.elapsed() < deadline {
        sink ^= busy_work(20_000);
    }
    black_box(sink);
    set_timer(Duration::ZERO)?;
    // Not SIG_DFL: a SIGPROF still pending would kill the process. SIG_IGN
    // discards it.
    // SAFETY: SIG_IGN runs no code.
    unsafe { set_sigprof(libc::SIG_IGN, 0) }?;
    let taken = TAKEN.load(Ordering::Relaxed);
    let samples = (0..taken.min(CAPACITY))
        .map(|i| {
            let id = IDS[i].load(Ordering::Relaxed);
            Sample {
                pc: PCS[i].load(Ordering::Relaxed),
                module: (id != 0).then_some(id),
            }
        })
        .collect();
    Ok((samples, taken))
}
