//! The sampler: a `SIGPROF` timer whose handler records, for the
//! interrupted pc, `(object id, link-time address)` from
//! [`LoadedObjects::lookup`] into a preallocated lock-free ring.
//!
//! The handler does only async-signal-safe things: read one register from
//! the `ucontext`, one `lookup` (no lock, no allocation, no epoch pin, no
//! thread-local), a few atomic operations on the ring.

use super::ring::{Ring, Sample};
use super::sigprof::{interrupted_pc, set_sigprof, set_timer};
use latchtree::LoadedObjects;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The process's loaded objects. A `static`, so that the handler reaches it.
pub(crate) static OBJECTS: LoadedObjects = LoadedObjects::new();

/// The samples, until the main thread drains them.
pub(crate) static RING: Ring<4096> = Ring::new();

/// Signals handled so far.
static TAKEN: AtomicUsize = AtomicUsize::new(0);

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

/// Starts sampling every `period` of CPU time.
pub(crate) fn start(period: Duration) -> io::Result<()> {
    let handler = (on_sigprof as *const ()).addr();
    // SAFETY: `on_sigprof` has the SA_SIGINFO signature and is
    // async-signal-safe.
    unsafe { set_sigprof(handler, libc::SA_SIGINFO | libc::SA_RESTART) }?;
    set_timer(period)
}

/// Stops sampling. A `SIGPROF` still pending is discarded (not `SIG_DFL`,
/// which would kill the process).
pub(crate) fn stop() -> io::Result<()> {
    set_timer(Duration::ZERO)?;
    // SAFETY: SIG_IGN runs no code.
    unsafe { set_sigprof(libc::SIG_IGN, 0) }
}
