//! One pass over the process's loaded objects with `dl_iterate_phdr`.
//!
//! The callback runs with the dynamic loader's lock held, so the objects it
//! is shown cannot be unloaded while it looks at them: that is the only
//! moment their memory (the build-id notes) may be read without a
//! reference of one's own. It copies out the headers it needs, reads the
//! notes, and returns; files are looked at later (`info.rs`), outside
//! the loader's lock. It reads no `.eh_frame`: a refresh walks only the
//! objects new to the index, once it holds each one mapped (or, for one it
//! cannot hold, in a second pass over just those: [`eh_frames`]).
//!
//! Everything the callback decides is in [`parse_object`], a pure function
//! over program headers and a [`ObjectMemory`], so that odd input (no
//! `PT_LOAD`, empty or overlapping segments, broken notes) is tested with
//! synthetic headers.

use super::eh_frame::{EhFrameError, eh_frame_of};
use super::note::{BuildId, NoteError, find_build_id};
use super::problem::ProblemKind;
use super::segment::{LoadSegment, ObjectKind, ObjectMemory};
use core::ops::Range;
use std::ffi::{CStr, c_int, c_void};
use std::{mem, ptr, slice};

/// `PT_LOAD`.
pub(crate) const PT_LOAD: u32 = 1;
/// `PT_NOTE`.
pub(crate) const PT_NOTE: u32 = 4;
/// The `.eh_frame_hdr` segment.
pub(crate) const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
/// The `.sframe` segment (binutils 2.41 and later).
pub(crate) const PT_GNU_SFRAME: u32 = 0x6474_e554;

/// The dynamic loader's counters of objects loaded and unloaded since the
/// process started (glibc's `dlpi_adds` and `dlpi_subs`). While neither
/// moves, the set of loaded objects has not changed.
///
/// ```
/// use latchtree::LoadCounters;
/// let c = LoadCounters { adds: 7, subs: 1 };
/// assert_eq!(c.adds - c.subs, 6); // objects loaded now (glibc)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LoadCounters {
    /// Objects loaded so far (the initial ones included).
    pub adds: u64,
    /// Objects unloaded so far.
    pub subs: u64,
}

/// A program header, widened to 64 bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ProgramHeader {
    pub(crate) p_type: u32,
    pub(crate) p_flags: u32,
    pub(crate) p_offset: u64,
    pub(crate) p_vaddr: u64,
    pub(crate) p_filesz: u64,
    pub(crate) p_memsz: u64,
    pub(crate) p_align: u64,
}

impl From<&libc::Elf64_Phdr> for ProgramHeader {
    fn from(h: &libc::Elf64_Phdr) -> ProgramHeader {
        ProgramHeader {
            p_type: h.p_type,
            p_flags: h.p_flags,
            p_offset: h.p_offset,
            p_vaddr: h.p_vaddr,
            p_filesz: h.p_filesz,
            p_memsz: h.p_memsz,
            p_align: h.p_align,
        }
    }
}

/// Where the process's main program and vDSO are, from the auxiliary
/// vector, to recognize them among the loader's objects.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Landmarks {
    /// `AT_PHDR`: the main program's program headers.
    pub(crate) main_phdr: Option<u64>,
    /// `AT_SYSINFO_EHDR`: the vDSO's ELF header (its first `PT_LOAD`).
    pub(crate) vdso: Option<u64>,
    /// `AT_PAGESZ`: the page size; 0: 4 KiB.
    pub(crate) page_size: u64,
}

impl Landmarks {
    /// This process's landmarks.
    pub(crate) fn of_this_process() -> Landmarks {
        let aux = |kind| {
            // SAFETY: getauxval only reads the auxiliary vector; it returns
            // 0 for an entry that is absent.
            let value = unsafe { libc::getauxval(kind) };
            (value != 0).then_some(value)
        };
        Landmarks {
            main_phdr: aux(libc::AT_PHDR),
            vdso: aux(libc::AT_SYSINFO_EHDR),
            page_size: aux(libc::AT_PAGESZ).unwrap_or(0),
        }
    }
}

/// What an unwinder needs to find an object's unwind tables in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Unwind {
    pub(crate) eh_frame_hdr: Option<Range<u64>>,
    pub(crate) sframe: Option<Range<u64>>,
    pub(crate) image: Range<u64>,
    /// Overlapping `PT_LOAD`s were merged: a "readable" merged segment may
    /// hold unreadable pages (the loader maps the later one over the
    /// overlap), so nothing of the object's memory is read past the scan.
    pub(crate) merged: bool,
}

/// One object as the loader shows it, with what [`parse_object`] made of
/// its headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Scanned {
    /// `dlpi_name`, bytes as they are.
    pub(crate) loader_name: Box<[u8]>,
    /// `dlpi_addr`.
    pub(crate) bias: u64,
    pub(crate) kind: ObjectKind,
    /// The non-empty `PT_LOAD` segments, sorted, overlaps merged.
    pub(crate) segments: Vec<LoadSegment>,
    pub(crate) build_id: Option<BuildId>,
    /// Where the unwind tables are mapped (`PT_GNU_EH_FRAME`,
    /// `PT_GNU_SFRAME`) and the page-rounded span of the `PT_LOAD`s.
    pub(crate) unwind: Unwind,
    /// What was odd about the headers and notes.
    pub(crate) problems: Vec<ProblemKind>,
}

/// Decides what one object is from its loader name, bias, the address of
/// its program headers and the headers themselves; reads its notes through
/// `memory`. `first` says it is the first object the loader listed (on
/// glibc the main program, which is how it is recognized if the auxiliary
/// vector has no `AT_PHDR`). Never panics on any input.
///
/// # Safety
/// `memory.read` must be sound, for as long as this call runs, for every
/// range that lies inside one of the readable `PT_LOAD` segments that
/// `headers` describe at `bias`.
pub(crate) unsafe fn parse_object(
    loader_name: &[u8],
    bias: u64,
    phdr_addr: u64,
    headers: &[ProgramHeader],
    first: bool,
    landmarks: Landmarks,
    memory: &impl ObjectMemory,
) -> Scanned {
    let mut problems = Vec::new();
    let mut loads: Vec<LoadSegment> = Vec::new();
    let mut image = None; // run-time address of file offset 0
    for h in headers.iter().filter(|h| h.p_type == PT_LOAD) {
        if h.p_memsz == 0 {
            problems.push(ProblemKind::EmptySegment { vaddr: h.p_vaddr });
            continue;
        }
        let Some(range) = run_time(bias, h.p_vaddr, h.p_memsz) else {
            problems.push(ProblemKind::SegmentOutOfRange {
                vaddr: h.p_vaddr,
                memsz: h.p_memsz,
            });
            continue;
        };
        if h.p_offset == 0 {
            image.get_or_insert(range.start);
        }
        loads.push(LoadSegment {
            range,
            flags: h.p_flags,
            file_offset: h.p_offset,
            file_size: h.p_filesz,
        });
    }
    if loads.is_empty() {
        problems.push(ProblemKind::NoLoadSegment);
    }

    let kind = match landmarks.main_phdr {
        Some(main) if main == phdr_addr => ObjectKind::MainProgram,
        None if first && loader_name.is_empty() => ObjectKind::MainProgram,
        _ if image.is_some() && image == landmarks.vdso => ObjectKind::Vdso,
        _ => ObjectKind::Library,
    };

    let mut build_id: Option<BuildId> = None;
    for h in headers
        .iter()
        .filter(|h| h.p_type == PT_NOTE && h.p_memsz > 0)
    {
        let notes = run_time(bias, h.p_vaddr, h.p_memsz)
            .filter(|r| {
                loads
                    .iter()
                    .any(|s| s.is_readable() && s.range.start <= r.start && r.end <= s.range.end)
            })
            .and_then(|r| Some((r.start, usize::try_from(r.end - r.start).ok()?)));
        let Some((addr, len)) = notes else {
            problems.push(ProblemKind::MalformedNote(NoteError::OutsideLoadSegments));
            continue;
        };
        // `addr..addr + len` lies inside one of the readable PT_LOAD segments of `headers` (checked
        // just above), for which our caller guarantees that `memory.read` is sound during this
        // call.
        // SAFETY: so `memory.read` is sound for this range.
        let Some(bytes) = (unsafe { memory.read(addr, len) }) else {
            problems.push(ProblemKind::MalformedNote(NoteError::OutsideLoadSegments));
            continue;
        };
        let found = find_build_id(bytes, h.p_align);
        if let Some(error) = found.error {
            problems.push(ProblemKind::MalformedNote(error));
        }
        match (&build_id, found.build_id.and_then(BuildId::from_bytes)) {
            (None, found) => build_id = found,
            (Some(first), Some(other)) if *first != other => {
                problems.push(ProblemKind::MalformedNote(NoteError::ConflictingBuildIds {
                    offset: 0,
                }))
            }
            _ => {}
        }
    }
    let note_trouble = problems
        .iter()
        .any(|p| matches!(p, ProblemKind::MalformedNote(_)));
    if build_id.is_none() && !note_trouble {
        problems.push(ProblemKind::NoBuildId);
    }

    let segments = merge_overlaps(loads, &mut problems);
    // A table counts only inside a readable loaded segment (a handler reads
    // it from memory).
    let table = |p_type: u32| {
        let h = headers
            .iter()
            .find(|h| h.p_type == p_type && h.p_memsz > 0)?;
        run_time(bias, h.p_vaddr, h.p_memsz).filter(|r| {
            segments
                .iter()
                .any(|s| s.is_readable() && s.range.start <= r.start && r.end <= s.range.end)
        })
    };
    let page = if landmarks.page_size == 0 {
        4096
    } else {
        landmarks.page_size
    };
    let image = match (segments.first(), segments.last()) {
        (Some(f), Some(l)) => {
            let start = f.range.start & !(page - 1);
            start
                ..l.range
                    .end
                    .checked_next_multiple_of(page)
                    .unwrap_or(u64::MAX)
        }
        _ => 0..0,
    };
    // Merged overlapping segments carry the union of their flags, but the
    // loader maps the later one over the overlap.
    let merged = (problems.iter()).any(|p| matches!(p, ProblemKind::OverlappingSegments { .. }));
    let unwind = Unwind {
        eh_frame_hdr: table(PT_GNU_EH_FRAME),
        sframe: table(PT_GNU_SFRAME),
        image,
        merged,
    };
    Scanned {
        loader_name: loader_name.into(),
        bias,
        kind,
        segments,
        build_id,
        unwind,
        problems,
    }
}

/// `bias + vaddr .. bias + vaddr + memsz`, if it fits in 64 bits.
fn run_time(bias: u64, vaddr: u64, memsz: u64) -> Option<Range<u64>> {
    let start = bias.checked_add(vaddr)?;
    Some(start..start.checked_add(memsz)?)
}

/// Sorts the segments and merges the ones that overlap (reporting each
/// pair). Adjacent segments stay apart.
fn merge_overlaps(
    mut segments: Vec<LoadSegment>,
    problems: &mut Vec<ProblemKind>,
) -> Vec<LoadSegment> {
    segments.sort_by_key(|s| s.range.start);
    let mut merged: Vec<LoadSegment> = Vec::with_capacity(segments.len());
    for s in segments {
        match merged.last_mut() {
            Some(last) if s.range.start < last.range.end => {
                problems.push(ProblemKind::OverlappingSegments {
                    first: last.range.clone(),
                    second: s.range.clone(),
                });
                last.range.end = last.range.end.max(s.range.end);
                last.flags |= s.flags;
            }
            _ => merged.push(s),
        }
    }
    merged
}

/// What one `dl_iterate_phdr` pass found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// In the loader's order (the main program first on glibc).
    pub(crate) objects: Vec<Scanned>,
    /// The loader's counters during this pass, if it has them.
    pub(crate) counters: Option<LoadCounters>,
}

/// An object a refresh indexes without a reference that keeps it mapped
/// (`hold.rs`: another `dlmopen` namespace, or a loader that cannot tell):
/// its `.eh_frame` is walked under the loader's lock, by [`eh_frames`].
#[derive(Debug)]
pub(crate) struct Unheld<'a> {
    pub(crate) loader_name: &'a [u8],
    pub(crate) bias: u64,
    /// As the scan found them: the object must still have exactly these.
    pub(crate) segments: &'a [LoadSegment],
    pub(crate) eh_frame_hdr: Range<u64>,
    /// What the pass found: [`EhFrameError::Unloaded`] if the object is
    /// gone.
    pub(crate) eh_frame: Result<Range<u64>, EhFrameError>,
    found: bool,
}

impl<'a> Unheld<'a> {
    /// One to look for.
    pub(crate) fn new(
        loader_name: &'a [u8],
        bias: u64,
        segments: &'a [LoadSegment],
        eh_frame_hdr: Range<u64>,
    ) -> Self {
        Unheld {
            loader_name,
            bias,
            segments,
            eh_frame_hdr,
            eh_frame: Err(EhFrameError::Unloaded),
            found: false,
        }
    }
}

/// What a pass does with each object.
enum Mode<'w, 'a> {
    /// Read the loader's counters (at the first object) and stop.
    Counters,
    /// Parse every object into the scan.
    Objects,
    /// Walk the `.eh_frame` of these objects only.
    EhFrames(&'w mut [Unheld<'a>]),
}

/// The callback's state.
struct Pass<'w, 'a> {
    scan: Scan,
    mode: Mode<'w, 'a>,
    /// How many objects the loader showed so far.
    seen: usize,
    landmarks: Landmarks,
    /// Reused for each object's headers.
    headers: Vec<ProgramHeader>,
}

/// Reads straight from this process's memory.
pub(crate) struct LoadedMemory;

impl ObjectMemory for LoadedMemory {
    unsafe fn read(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let addr = usize::try_from(addr).ok()?;
        // The address comes from the loader, not from a Rust allocation:
        // exposed provenance.
        // SAFETY: the caller guarantees `len` readable bytes there that stay
        // mapped while the slice lives.
        Some(unsafe { slice::from_raw_parts(ptr::with_exposed_provenance::<u8>(addr), len) })
    }
}

/// Reads `dlpi_adds`/`dlpi_subs` if the loader's `dl_phdr_info` has them.
///
/// # Safety
/// `info` must be the pointer `dl_iterate_phdr` passed to its callback, and
/// `size` the size it passed with it, during that callback.
unsafe fn counters_of(info: *const libc::dl_phdr_info, size: usize) -> Option<LoadCounters> {
    let needed = mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + mem::size_of::<u64>();
    if size < needed {
        return None;
    }
    // `size` says the loader's struct extends past `dlpi_subs`, and the
    // caller guarantees `info` points at it for the callback's duration.
    // SAFETY: so these raw place reads (no reference to the possibly shorter
    // whole struct) read initialized fields.
    let (adds, subs) = unsafe { ((*info).dlpi_adds, (*info).dlpi_subs) };
    Some(LoadCounters { adds, subs })
}

/// The `dl_iterate_phdr` callback. It runs with the loader's lock held: it
/// only copies and parses memory, and cannot panic except on allocation
/// failure (which aborts; an `extern "C"` function never unwinds).
///
/// # Safety
/// Only to be called by `dl_iterate_phdr`, with `data` the `*mut Pass` that
/// [`pass`] gave it.
unsafe extern "C" fn on_object(
    info: *mut libc::dl_phdr_info,
    size: usize,
    data: *mut c_void,
) -> c_int {
    // `data` is the `&mut Pass` that `pass` handed to dl_iterate_phdr, which calls back
    // synchronously on this thread while `pass` is blocked in it; nothing else touches the `Pass`
    // meanwhile.
    // SAFETY: so this is the only reference to the `Pass`.
    let pass = unsafe { &mut *data.cast::<Pass<'_, '_>>() };
    let first = pass.seen == 0;
    pass.seen += 1;
    if first {
        // SAFETY: `info` and `size` come straight from dl_iterate_phdr.
        pass.scan.counters = unsafe { counters_of(info, size) };
    }
    if matches!(pass.mode, Mode::Counters) {
        return 1; // non-zero stops the iteration
    }
    // SAFETY: `info` is valid for the callback; these four fields are the first of `dl_phdr_info`,
    // present in every version of it. Raw place reads, no reference to the struct.
    let (bias, name, phdr, phnum) = unsafe {
        (
            (*info).dlpi_addr,
            (*info).dlpi_name,
            (*info).dlpi_phdr,
            (*info).dlpi_phnum,
        )
    };
    let name: &[u8] = if name.is_null() {
        &[]
    } else {
        // SAFETY: `dlpi_name` is a NUL-terminated string owned by the
        // loader, alive while the object is loaded, so for this callback.
        unsafe { CStr::from_ptr(name) }.to_bytes()
    };
    let wanted = match &mut pass.mode {
        Mode::EhFrames(wanted) => {
            let i =
                (wanted.iter()).position(|w| !w.found && w.bias == bias && w.loader_name == name);
            match i {
                Some(i) => Some(&mut wanted[i]),
                None => return 0, // not one of those
            }
        }
        _ => None,
    };
    let headers: &[libc::Elf64_Phdr] = if phdr.is_null() || phnum == 0 {
        &[]
    } else {
        // `dlpi_phdr` points at the object's `dlpi_phnum` program headers, mapped with the object
        // and unchanged while it is loaded, so for this callback; the slice does not outlive it.
        // SAFETY: so the slice is valid for this callback.
        unsafe { slice::from_raw_parts(phdr, usize::from(phnum)) }
    };
    pass.headers.clear();
    pass.headers.extend(headers.iter().map(ProgramHeader::from));
    // `LoadedMemory` reads this process's memory; the object's readable PT_LOAD segments are mapped
    // readable and stay so while the loader's lock, held during this callback, keeps the object
    // loaded.
    // SAFETY: so reading those segments is sound during the callback.
    let object = unsafe {
        parse_object(
            name,
            bias,
            phdr.addr() as u64,
            &pass.headers,
            first,
            pass.landmarks,
            &LoadedMemory,
        )
    };
    match wanted {
        None => pass.scan.objects.push(object),
        Some(w) if object.segments == w.segments && !object.unwind.merged => {
            w.found = true;
            // `eh_frame_of` reads only inside readable segments of `object.segments`, each exactly
            // one readable PT_LOAD of this object's headers (none was merged), which the loader's
            // lock keeps mapped during this callback, as for `parse_object` above.
            // SAFETY: so `LoadedMemory`'s reads are sound during the walk.
            w.eh_frame = unsafe { eh_frame_of(&w.eh_frame_hdr, &object.segments, &LoadedMemory) };
        }
        Some(_) => {} // another object now has its name and bias
    }
    0
}

/// One `dl_iterate_phdr` pass.
fn pass(mode: Mode<'_, '_>) -> Scan {
    let mut pass = Pass {
        scan: Scan::default(),
        // Unused when only the counters are read.
        landmarks: match mode {
            Mode::Counters => Landmarks::default(),
            _ => Landmarks::of_this_process(),
        },
        mode,
        seen: 0,
        headers: Vec::new(),
    };
    // `on_object` has the callback type dl_iterate_phdr expects and never
    // unwinds.
    // SAFETY: it treats `data` as the `*mut Pass` given here,
    // exclusively borrowed and alive until dl_iterate_phdr returns.
    unsafe { libc::dl_iterate_phdr(Some(on_object), ptr::from_mut(&mut pass).cast()) };
    pass.scan
}

/// Every loaded object, with the loader's counters of the same instant.
pub(crate) fn scan() -> Scan {
    pass(Mode::Objects)
}

/// The loader's counters now (one `dl_iterate_phdr` callback); `None` if
/// this loader does not keep them (musl).
pub(crate) fn load_counters() -> Option<LoadCounters> {
    pass(Mode::Counters).counters
}

/// Walks the `.eh_frame` of each of `wanted` that is still loaded as the
/// scan saw it (the same name, bias and segments), under the loader's lock:
/// one more pass, for the objects a refresh indexes without holding them.
pub(crate) fn eh_frames(wanted: &mut [Unheld<'_>]) {
    if !wanted.is_empty() {
        pass(Mode::EhFrames(wanted));
    }
}
