//! `SIGPROF` plumbing shared by the examples (`symbolize`, `profile`):
//! reading the interrupted registers from a handler's `ucontext`,
//! installing the handler, arming the process's CPU-time timer or a
//! thread's own, finding where a thread's stack ends. Included with
//! `#[path]`.

// Each example uses only part of this file.
#![allow(dead_code)]

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

/// The registers an unwinder starts from, from the signal's `ucontext_t`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Registers {
    pub(crate) pc: u64,
    pub(crate) sp: u64,
    /// The frame pointer (`rbp`, `x29`).
    pub(crate) fp: u64,
    /// The link register (`x30`; 0 on x86_64, which has none).
    pub(crate) lr: u64,
}

/// The interrupted thread's [`Registers`].
///
/// # Safety
/// `context` must be the third argument of an `SA_SIGINFO` handler.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn interrupted_registers(context: *mut libc::c_void) -> Registers {
    let uc = context.cast::<libc::ucontext_t>();
    // SAFETY: as in `interrupted_pc`: a raw place read of the saved registers.
    let gregs = unsafe { (*uc).uc_mcontext.gregs };
    Registers {
        pc: gregs[libc::REG_RIP as usize] as u64,
        sp: gregs[libc::REG_RSP as usize] as u64,
        fp: gregs[libc::REG_RBP as usize] as u64,
        lr: 0,
    }
}

/// The interrupted thread's [`Registers`].
///
/// # Safety
/// `context` must be the third argument of an `SA_SIGINFO` handler.
#[cfg(target_arch = "aarch64")]
pub(crate) unsafe fn interrupted_registers(context: *mut libc::c_void) -> Registers {
    let uc = context.cast::<libc::ucontext_t>();
    // SAFETY: as in `interrupted_pc`: a raw place read of the saved registers.
    let m = unsafe { &(*uc).uc_mcontext };
    Registers {
        pc: m.pc,
        sp: m.sp,
        fp: m.regs[29],
        lr: m.regs[30],
    }
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

/// `period` as a `timespec`.
fn timespec(period: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: period.as_secs() as libc::time_t,
        tv_nsec: period.subsec_nanos().into(),
    }
}

/// A thread's own CPU-time timer; dropping it deletes it.
#[derive(Debug)]
pub(crate) struct ThreadTimer(libc::timer_t);

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        // SAFETY: a timer `thread_timer` created, deleted once.
        unsafe { libc::timer_delete(self.0) };
    }
}

/// Sends `SIGPROF` to the calling thread every `period` of its own CPU
/// time (`timer_create(CLOCK_THREAD_CPUTIME_ID)` with `SIGEV_THREAD_ID`),
/// `value` as each signal's `si_value`, until the timer is dropped.
///
/// # Safety
/// `value` must be what the installed `SIGPROF` handler expects in
/// `si_value`, valid for as long as that handler may run: a last signal may
/// still be pending when the timer is dropped.
pub(crate) unsafe fn thread_timer(
    period: Duration,
    value: *mut libc::c_void,
) -> io::Result<ThreadTimer> {
    // SAFETY: an all-zero `sigevent` is valid; the fields set name this
    // thread and the value.
    let mut event: libc::sigevent = unsafe { mem::zeroed() };
    event.sigev_notify = libc::SIGEV_THREAD_ID;
    event.sigev_signo = libc::SIGPROF;
    // SAFETY: gettid has no preconditions.
    event.sigev_notify_thread_id = unsafe { libc::gettid() };
    event.sigev_value.sival_ptr = value;
    let mut timer = ptr::null_mut();
    // SAFETY: valid pointers to `event` and the out-parameter.
    if unsafe { libc::timer_create(libc::CLOCK_THREAD_CPUTIME_ID, &mut event, &mut timer) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let timer = ThreadTimer(timer);
    let spec = libc::itimerspec {
        it_interval: timespec(period),
        it_value: timespec(period),
    };
    // SAFETY: a live timer and a valid `itimerspec`.
    if unsafe { libc::timer_settime(timer.0, 0, &spec, ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(timer)
}

/// The calling thread's stack: its lowest address to where it ends (the
/// stack grows down from the end).
pub(crate) fn stack_bounds() -> io::Result<std::ops::Range<u64>> {
    let (mut base, mut size) = (ptr::null_mut(), 0);
    // SAFETY: `attr` is initialized by pthread_getattr_np before use and
    // destroyed once; the out-pointers are valid.
    unsafe {
        let mut attr = mem::zeroed();
        let rc = libc::pthread_getattr_np(libc::pthread_self(), &mut attr);
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        libc::pthread_attr_getstack(&attr, &mut base, &mut size);
        libc::pthread_attr_destroy(&mut attr);
    }
    Ok(base.addr() as u64..base.addr() as u64 + size as u64)
}
