//! The sampler: a `SIGPROF` timer whose handler records, for the
//! interrupted pc, `(object id, link-time address)` from
//! [`LoadedObjects::lookup`] into a preallocated lock-free ring.
//!
//! The handler does only async-signal-safe things: read one register from
//! the `ucontext`, one `lookup` (no lock, no allocation, no epoch pin, no
//! thread-local), a few atomic operations on the ring.

use crate::ring::{Ring, Sample};
use latchtree::LoadedObjects;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use std::{io, mem, ptr};

/// The process's loaded objects. A `static`, so that the handler reaches it.
pub(crate) static OBJECTS: LoadedObjects = LoadedObjects::new();

/// The samples, until the main thread drains them.
pub(crate) static RING: Ring<4096> = Ring::new();

/// Signals handled so far.
static TAKEN: AtomicUsize = AtomicUsize::new(0);

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
    let sample = match OBJECTS.lookup(pc) {
        Some(hit) => Sample {
            object: hit.id().get(),
            address: hit.link_address(),
        },
        None => Sample {
            object: 0,
            address: pc,
        },
    };
    RING.push(sample);
    TAKEN.fetch_add(1, Ordering::Relaxed);
}

/// Signals handled since the process started.
pub(crate) fn taken() -> usize {
    TAKEN.load(Ordering::Relaxed)
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

/// Starts sampling every `period` of CPU time.
pub(crate) fn start(period: Duration) -> io::Result<()> {
    set_sigprof(
        (on_sigprof as *const ()).addr(),
        libc::SA_SIGINFO | libc::SA_RESTART,
    )?;
    set_timer(period)
}

/// Stops sampling. A `SIGPROF` still pending is discarded (not `SIG_DFL`,
/// which would kill the process).
pub(crate) fn stop() -> io::Result<()> {
    set_timer(Duration::ZERO)?;
    set_sigprof(libc::SIG_IGN, 0)
}
