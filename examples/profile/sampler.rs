//! The sampler: a CPU-time timer per sampled thread, whose `SIGPROF`
//! handler unwinds the interrupted thread's whole stack with framehop and
//! records each frame as `(object id, link-time address)` into a
//! preallocated lock-free ring.
//!
//! Everything the handler needs of an object comes from the index: a
//! handler section finds each frame's object, and the object's payload is
//! its unwinder over copies of its `.eh_frame_hdr` and `.eh_frame`, which
//! the refresh that indexes it hands the builder as byte slices (it holds
//! the object mapped meanwhile), dropped after a grace period once the
//! object is gone. What the handler needs of its thread (its
//! stack's bounds, framehop's rule cache) arrives with the signal, in the
//! timer's value. No side table, no
//! thread-local, no lock, no allocation (framehop's `MustNotAllocate` mode).

use super::ring::{Frame, Ring, Stack};
use super::sigprof::{ThreadTimer, interrupted_registers, set_sigprof, stack_bounds, thread_timer};
use framehop::{CacheNative, ExplicitModuleSectionInfo, FrameAddress, Module};
use framehop::{MustNotAllocateDuringUnwind as NoAlloc, Unwinder, UnwinderNative};
use latchtree::{LoadedObjects, MappedObject};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use std::{io, ops::Range, ptr};

/// The payload: one object's unwinder over copies of its unwind tables
/// (`None`: no usable `.eh_frame_hdr`). Copies, so that a handler never
/// reads an object's memory: a stale entry (a library closed since the last
/// refresh) can only give a wrong stack, never a fault.
pub(crate) type Unwind = Option<UnwinderNative<Box<[u8]>, NoAlloc>>;

/// The process's loaded objects, each with its unwinder.
pub(crate) static OBJECTS: LoadedObjects<Unwind> = LoadedObjects::with_payload(unwinder_for);

/// The samples, until the main thread drains them.
pub(crate) static RING: Ring<1024> = Ring::new();

/// Builds the unwinder of one object from copies of its `.eh_frame_hdr`
/// and `.eh_frame` (both found by the index, with their lengths, and handed
/// over as bytes while the refresh holds the object mapped).
fn unwinder_for(object: &MappedObject<'_>) -> Unwind {
    let (hdr, eh_frame) = (object.eh_frame_hdr()?, object.eh_frame()?);
    let hdr_bytes: Box<[u8]> = object.eh_frame_hdr_bytes()?.into();
    let eh_frame_bytes: Box<[u8]> = object.eh_frame_bytes()?.into();
    let bias = object.bias();
    let svma =
        |start: u64, len: usize| start.wrapping_sub(bias)..start.wrapping_sub(bias) + len as u64;
    let sections = ExplicitModuleSectionInfo {
        eh_frame_hdr_svma: Some(svma(hdr.start, hdr_bytes.len())),
        eh_frame_svma: Some(svma(eh_frame.start, eh_frame_bytes.len())),
        eh_frame_hdr: Some(hdr_bytes),
        eh_frame: Some(eh_frame_bytes),
        ..Default::default()
    };
    let name = object.path().display().to_string();
    let mut unwinder = UnwinderNative::new();
    unwinder.add_module(Module::new(name, object.image(), bias, sections));
    Some(unwinder)
}

/// What the handler needs of a sampled thread.
struct Thread {
    index: u64,
    stack: Range<u64>,
    cache: CacheNative<NoAlloc>,
}

/// The `SIGPROF` handler: async-signal-safe throughout.
extern "C" fn on_sigprof(_: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let _counted = super::alloc_count::InHandler::enter();
    // SAFETY: installed with SA_SIGINFO: `info` and `context` are the
    // kernel's. This program owns SIGPROF: a SIGPROF with SI_TIMER comes
    // from our timers (`sample_this_thread`), whose value is a leaked
    // `Thread` (never freed: a last signal may be pending when its timer is
    // deleted) of the thread the timer signals; only its handler touches it,
    // and SIGPROF is blocked while that runs.
    let (thread, r) = unsafe {
        let value = (*info).si_value().sival_ptr.cast::<Thread>();
        if (*info).si_code != libc::SI_TIMER || value.is_null() {
            return;
        }
        (&mut *value, interrupted_registers(context))
    };
    #[cfg(target_arch = "x86_64")]
    let mut regs = framehop::UnwindRegsNative::new(r.pc, r.sp, r.fp);
    // Return addresses may carry pointer-authentication bits above the
    // address space, whose top the stack (mapped highest) gives.
    #[cfg(target_arch = "aarch64")]
    let mut regs = framehop::UnwindRegsNative::new_with_ptr_auth_mask(
        framehop::aarch64::PtrAuthMask::from_max_known_address(thread.stack.end),
        r.lr,
        r.sp,
        r.fp,
    );
    let stack = thread.stack.clone();
    if !stack.contains(&r.sp) {
        return; // on an alternate signal stack: not this thread's frames
    }
    // Only the interrupted frames: from its sp to where its stack ends.
    // Atomic loads: other threads may share data that lives on this stack.
    let mut read_stack = |at: u64| match at.checked_add(8) {
        Some(end) if at >= r.sp && end <= stack.end && at.is_multiple_of(8) => {
            let word = ptr::with_exposed_provenance_mut::<u64>(at as usize);
            // SAFETY: an aligned word of the thread's stack above the
            // interrupted sp: mapped, and read atomically.
            Ok(unsafe { AtomicU64::from_ptr(word) }.load(Ordering::Relaxed))
        }
        _ => Err(()),
    };
    let section = OBJECTS.handler_section();
    let mut sample = Stack::new(thread.index);
    let mut frame = FrameAddress::from_instruction_pointer(r.pc);
    loop {
        let pc = frame.address_for_lookup();
        let object = section.lookup(pc);
        let (id, address) =
            object.map_or((0, pc), |o| (o.hit().id().get(), o.hit().link_address()));
        let recorded = sample.push(Frame {
            object: id,
            address,
        });
        let Some(unwinder) = object.and_then(|o| o.payload().as_ref()) else {
            break;
        };
        match unwinder.unwind_frame(frame, &mut regs, &mut thread.cache, &mut read_stack) {
            Ok(Some(ra)) if recorded => match FrameAddress::from_return_address(ra) {
                Some(caller) => frame = caller,
                None => break,
            },
            _ => break,
        }
    }
    drop(section);
    RING.push(&sample);
}

/// Samples the calling thread every `period` of its own CPU time, its
/// samples tagged `index`, until the returned timer is dropped.
pub(crate) fn sample_this_thread(index: u64, period: Duration) -> io::Result<ThreadTimer> {
    let thread = Box::leak(Box::new(Thread {
        index,
        stack: stack_bounds()?,
        cache: CacheNative::new_in(),
    }));
    // SAFETY: the value is a leaked `Thread`, what the handler expects, valid
    // for the rest of the process.
    unsafe { thread_timer(period, ptr::from_mut(thread).cast()) }
}

/// Installs the handler (before any thread starts its timer).
pub(crate) fn install() -> io::Result<()> {
    let handler = (on_sigprof as *const ()).addr();
    // SAFETY: `on_sigprof` has the SA_SIGINFO signature and is
    // async-signal-safe.
    unsafe { set_sigprof(handler, libc::SA_SIGINFO | libc::SA_RESTART) }
}

/// Uninstalls it, once every timer is dropped. A `SIGPROF` still pending is
/// discarded (not `SIG_DFL`, which would kill the process).
pub(crate) fn uninstall() -> io::Result<()> {
    // SAFETY: SIG_IGN runs no code.
    unsafe { set_sigprof(libc::SIG_IGN, 0) }
}
