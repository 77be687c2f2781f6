//! `SIGPROF` plumbing shared by the examples (`symbolize`, `profile`):
//! reading the interrupted pc from a handler's `ucontext`, installing the
//! handler, arming the CPU-time timer. Included with `#[path]`.

use std::time::Duration;
use std::{io, mem, ptr};

/// The interrupted program counter, from the signal's `ucontext_t`.
///
/// # Safety
/// `context` must be the third argument of an `SA_SIGINFO` handler.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn interrupted_pc(context: *mut libc::c_void) -> u64 {
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
pub(crate) unsafe fn interrupted_pc(context: *mut libc::c_void) -> u64 {
    let uc = context.cast::<libc::ucontext_t>();
    // SAFETY: the kernel passes a valid `ucontext_t` to SA_SIGINFO handlers
    // (caller's contract); a raw place read of one saved register.
    unsafe { (*uc).uc_mcontext.pc }
}

/// Installs `action` for `SIGPROF` with `flags`.
///
/// # Safety
/// `action` must be `SIG_IGN`, `SIG_DFL`, or the address of an
/// async-signal-safe handler whose signature matches `flags` (the
/// three-argument one with `SA_SIGINFO`).
pub(crate) unsafe fn set_sigprof(action: libc::sighandler_t, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: an all-zero `sigaction` is a valid value (empty mask, no flags).
    let mut sa: libc::sigaction = unsafe { mem::zeroed() };
    sa.sa_sigaction = action;
    sa.sa_flags = flags;
    // SAFETY: `sa` is a fully initialized `sigaction` whose handler the
    // caller vouches for; we pass no pointer for the old action.
    if unsafe { libc::sigaction(libc::SIGPROF, &sa, ptr::null_mut()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Arms (`period` non-zero) or disarms the CPU-time profiling timer
/// (`ITIMER_PROF`: one `SIGPROF` per `period` of this process's CPU time).
pub(crate) fn set_timer(period: Duration) -> io::Result<()> {
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
