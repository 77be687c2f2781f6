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

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use std::{io, mem, ptr};

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

/// The interrupted program counter, from the signal's `ucontext_t`.
///
/// # Safety
/// `context` must be the third argument of an `SA_SIGINFO` handler.
#[cfg(target_arch = "x86_64")]
unsafe fn interrupted_pc(context: *mut libc::c_void) -> u64 {
    let uc = context.cast::<libc::ucontext_t>();
    // SAFETY: the kernel passes a valid `ucontext_t` to SA_SIGINFO handlers
    // (caller's contract); a raw place read of one saved register.
    let rip = unsafe { (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] };
    rip as u64
}

/// The interrupted program counter, from the signal's `ucontext_t`.
///
/// # Safety
/// `context` must be the third argument of an `SA_SIGINFO` handler.
#[cfg(target_arch = "aarch64")]
unsafe fn interrupted_pc(context: *mut libc::c_void) -> u64 {
    let uc = context.cast::<libc::ucontext_t>();
    // SAFETY: the kernel passes a valid `ucontext_t` to SA_SIGINFO handlers
    // (caller's contract); a raw place read of one saved register.
    unsafe { (*uc).uc_mcontext.pc }
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

/// Installs `action` for `SIGPROF`.
fn set_sigprof(action: libc::sighandler_t, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: an all-zero `sigaction` is a valid value (empty mask, no flags).
    let mut sa: libc::sigaction = unsafe { mem::zeroed() };
    sa.sa_sigaction = action;
    sa.sa_flags = flags;
    // SAFETY: `sa` is a fully initialized `sigaction`; `action` is SIG_IGN or
    // `on_sigprof`, whose signature matches SA_SIGINFO and which is
    // async-signal-safe. We pass no pointer for the old action.
    if unsafe { libc::sigaction(libc::SIGPROF, &sa, ptr::null_mut()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Arms (`period` non-zero) or disarms the CPU-time profiling timer.
fn set_timer(period: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: period.as_secs() as libc::time_t,
        tv_usec: libc::suseconds_t::from(period.subsec_micros()),
    };
    let timer = libc::itimerval {
        it_interval: tv,
        it_value: tv,
    };
    // SAFETY: `timer` is a valid `itimerval`; no old value is requested.
    if unsafe { libc::setitimer(libc::ITIMER_PROF, &timer, ptr::null_mut()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
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
    set_sigprof(
        (on_sigprof as *const ()).addr(),
        libc::SA_SIGINFO | libc::SA_RESTART,
    )?;
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
    set_sigprof(libc::SIG_IGN, 0)?;
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
