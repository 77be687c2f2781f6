//! The sampler: a CPU-time timer per sampled thread, whose `SIGPROF`
//! handler unwinds the interrupted thread's whole stack with framehop and
//! records each frame as `(object id, link-time address)` into a
//! preallocated lock-free ring.
//!
//! Everything the handler needs of an object comes from the index: a
//! handler section finds each frame's object, and the object's payload is
//! its unwinder, built from its `.eh_frame_hdr` in memory when a refresh
//! indexes it and dropped after a grace period once the object is gone. What
//! the handler needs of its thread (where the stack ends, framehop's rule
//! cache) arrives with the signal, in the timer's value. No side table, no
//! thread-local, no lock, no allocation (framehop's `MustNotAllocate` mode).

use super::ring::{Frame, Ring, Stack};
use super::sigprof::{ThreadTimer, interrupted_registers, set_sigprof, stack_end, thread_timer};
use framehop::{CacheNative, ExplicitModuleSectionInfo, FrameAddress, Module};
use framehop::{MustNotAllocateDuringUnwind as NoAlloc, Unwinder, UnwinderNative};
use latchtree::{LoadedObjects, ObjectInfo};
use std::time::Duration;
use std::{io, ops::Range, ptr};

/// An object's unwind tables, read in place: framehop looks at them only
/// while unwinding a frame of that object, so while it is loaded.
#[derive(Default)]
pub(crate) struct Mapped(Range<u64>);

impl std::ops::Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let start = ptr::with_exposed_provenance::<u8>(self.0.start as usize);
        // SAFETY: inside a readable loaded segment of the object (below);
        // read only for a frame of the object, which is mapped while a
        // thread runs in it.
        unsafe { std::slice::from_raw_parts(start, (self.0.end - self.0.start) as usize) }
    }
}

/// The payload: one object's unwinder (`None`: no `.eh_frame_hdr`).
pub(crate) type Unwind = Option<UnwinderNative<Mapped, NoAlloc>>;

/// The process's loaded objects, each with its unwinder.
pub(crate) static OBJECTS: LoadedObjects<Unwind> = LoadedObjects::with_payload(unwinder_for);

/// The samples, until the main thread drains them.
pub(crate) static RING: Ring<1024> = Ring::new();

/// Builds the unwinder of one object from its `.eh_frame_hdr` and the
/// `.eh_frame` it points to (up to the end of that segment).
fn unwinder_for(info: &ObjectInfo) -> Unwind {
    let hdr = info.eh_frame_hdr().filter(|h| h.end - h.start >= 8)?;
    let head = Mapped(hdr.start..hdr.start + 8);
    // version 1, eh_frame_ptr encoded as DW_EH_PE_pcrel | DW_EH_PE_sdata4
    if head[..2] != [1, 0x1b] {
        return None;
    }
    let offset = i32::from_le_bytes(head[4..8].try_into().ok()?);
    let eh_frame = (hdr.start + 4).wrapping_add_signed(offset.into());
    let end = info
        .segment_of(eh_frame)
        .filter(|s| s.is_readable())?
        .range
        .end;
    let svma = |r: &Range<u64>| r.start - info.bias()..r.end - info.bias();
    let sections = ExplicitModuleSectionInfo {
        eh_frame_hdr_svma: Some(svma(&hdr)),
        eh_frame_svma: Some(svma(&(eh_frame..end))),
        eh_frame_hdr: Some(Mapped(hdr.clone())),
        eh_frame: Some(Mapped(eh_frame..end)),
        ..Default::default()
    };
    let name = info.path().display().to_string();
    let mut unwinder = UnwinderNative::new();
    unwinder.add_module(Module::new(name, info.image(), info.bias(), sections));
    Some(unwinder)
}

/// What the handler needs of a sampled thread.
struct Thread {
    index: u64,
    stack_end: u64,
    cache: CacheNative<NoAlloc>,
}

/// The `SIGPROF` handler: async-signal-safe throughout.
extern "C" fn on_sigprof(_: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let _counted = super::alloc_count::InHandler::enter();
    // SAFETY: installed with SA_SIGINFO: `info` and `context` are the
    // kernel's. SIGPROF comes from our timers, whose value is a leaked
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
    #[cfg(target_arch = "aarch64")]
    let mut regs = framehop::UnwindRegsNative::new(r.lr, r.sp, r.fp);
    let stack_end = thread.stack_end;
    // Only the interrupted frames: from its sp to where its stack ends.
    let mut read_stack = |at: u64| match at.checked_add(8) {
        // SAFETY: inside the thread's stack above the interrupted sp:
        // mapped, and nothing writes there while this handler runs.
        Some(end) if at >= r.sp && end <= stack_end => {
            Ok(unsafe { ptr::with_exposed_provenance::<u64>(at as usize).read_unaligned() })
        }
        _ => Err(()),
    };
    let section = OBJECTS.handler_section();
    let mut stack = Stack::new(thread.index);
    let mut frame = FrameAddress::from_instruction_pointer(r.pc);
    loop {
        let pc = frame.address_for_lookup();
        let object = section.lookup(pc);
        let (id, address) =
            object.map_or((0, pc), |o| (o.hit().id().get(), o.hit().link_address()));
        let recorded = stack.push(Frame {
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
    RING.push(&stack);
}

/// Samples the calling thread every `period` of its own CPU time, its
/// samples tagged `index`, until the returned timer is dropped.
pub(crate) fn sample_this_thread(index: u64, period: Duration) -> io::Result<ThreadTimer> {
    let thread = Box::leak(Box::new(Thread {
        index,
        stack_end: stack_end()?,
        cache: CacheNative::new_in(),
    }));
    thread_timer(period, ptr::from_mut(thread).cast())
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
