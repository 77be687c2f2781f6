//! Walks this thread's stack and returns the return addresses.
//!
//! `std::backtrace::Backtrace` resolves frames itself but does not expose
//! their instruction pointers on stable Rust (its `frames()` is unstable,
//! and neither `Debug` nor `Display` prints an address). So this walks the
//! stack the way std does underneath: `_Unwind_Backtrace` from the platform
//! unwinder (`libgcc_s` on glibc, the bundled libunwind on musl), which std
//! already links for panics. It reads the `.eh_frame` tables, so it needs no
//! frame pointers and works in release builds.

use std::ffi::{c_int, c_void};

/// `struct _Unwind_Context`, opaque.
#[repr(C)]
struct UnwindContext {
    _opaque: [u8; 0],
}

/// `_URC_NO_REASON`: keep walking.
const URC_NO_REASON: c_int = 0;

/// Any value but `_URC_NO_REASON` stops the walk; this is
/// `_URC_END_OF_STACK`.
const URC_STOP: c_int = 5;

unsafe extern "C" {
    /// Calls `trace` once per frame, innermost first, until it returns
    /// something other than `_URC_NO_REASON` or the stack ends.
    fn _Unwind_Backtrace(
        trace: unsafe extern "C" fn(*mut UnwindContext, *mut c_void) -> c_int,
        arg: *mut c_void,
    ) -> c_int;
    /// The frame's instruction pointer: for every frame but a signal frame,
    /// the return address, one past the call instruction.
    fn _Unwind_GetIP(context: *mut UnwindContext) -> usize;
}

/// What the walk collects.
struct Walk {
    ips: Vec<u64>,
    max: usize,
}

/// The per-frame callback.
///
/// # Safety
/// Only to be called by `_Unwind_Backtrace` with `arg` the `*mut Walk` that
/// [`return_addresses`] passed.
unsafe extern "C" fn on_frame(context: *mut UnwindContext, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `&mut Walk` passed by `return_addresses`, which is
    // blocked in `_Unwind_Backtrace` while this runs on the same thread.
    let walk = unsafe { &mut *arg.cast::<Walk>() };
    // SAFETY: `context` is the live unwind context of the current frame,
    // valid for the duration of this callback.
    let ip = unsafe { _Unwind_GetIP(context) };
    if ip == 0 || walk.ips.len() >= walk.max {
        return URC_STOP;
    }
    walk.ips.push(ip as u64);
    URC_NO_REASON
}

/// The instruction pointers of up to `max` frames of the calling thread,
/// innermost first. The first frame is `return_addresses` itself (its
/// address is just after its call to `_Unwind_Backtrace`); every one is a
/// return address, so symbolize `ip - 1` to land inside the call.
#[inline(never)]
pub(crate) fn return_addresses(max: usize) -> Vec<u64> {
    let mut walk = Walk {
        ips: Vec::with_capacity(max),
        max,
    };
    // `on_frame` has the callback signature the unwinder expects and does not
    // unwind (its only fallible step, the push, has capacity reserved).
    // SAFETY: it treats `arg` as the `*mut Walk` given here, which outlives
    // the call and is not otherwise touched until it returns.
    unsafe { _Unwind_Backtrace(on_frame, std::ptr::from_mut(&mut walk).cast()) };
    walk.ips
}
