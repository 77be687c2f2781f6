//! Odd program headers through [`parse_object`], with synthetic headers
//! and note memory. (The scan of this process's real objects is tested
//! through the public API in `tests/objects.rs`.)

use super::eh_frame::EhFrameError;
use super::hold::LoaderRef;
use super::info::ObjectInfo;
use super::note::{BuildId, NoteError};
use super::problem::ProblemKind;
use super::scan::{
    Landmarks, PT_GNU_EH_FRAME, PT_GNU_SFRAME, PT_LOAD, PT_NOTE, ProgramHeader, Scan, Scanned,
    parse_object,
};
use super::segment::{ObjectKind, ObjectMemory};
use super::{LoadedObjects, Refresh};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// `native` iterations, or `miri` under Miri.
fn size(native: u64, miri: u64) -> u64 {
    if cfg!(miri) { miri } else { native }
}

// ------------------------------------------------------------- synthetic

/// Notes "mapped" at `base`, read with bounds checks.
struct FakeMemory {
    base: u64,
    bytes: Vec<u8>,
}

impl ObjectMemory for FakeMemory {
    unsafe fn read(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(addr.checked_sub(self.base)?).ok()?;
        self.bytes.get(start..start.checked_add(len)?)
    }
}

const BIAS: u64 = 0x7f00_0000_0000;
const ID: [u8; 20] = [0x11; 20];

fn build_id_note() -> Vec<u8> {
    let mut n = Vec::new();
    for word in [4_u32, 20, 3] {
        n.extend_from_slice(&word.to_ne_bytes());
    }
    n.extend_from_slice(b"GNU\0");
    n.extend_from_slice(&ID);
    n
}

fn load(vaddr: u64, memsz: u64, flags: u32) -> ProgramHeader {
    ProgramHeader {
        p_type: PT_LOAD,
        p_flags: flags,
        p_offset: vaddr,
        p_vaddr: vaddr,
        p_filesz: memsz,
        p_memsz: memsz,
        p_align: 0x1000,
    }
}

fn note_header(vaddr: u64, memsz: u64) -> ProgramHeader {
    table(PT_NOTE, vaddr, memsz)
}

/// A read-only, non-`PT_LOAD` header of type `p_type` (a note, an unwind
/// table) at `vaddr`, mapped where it lies in the file.
fn table(p_type: u32, vaddr: u64, memsz: u64) -> ProgramHeader {
    ProgramHeader {
        p_type,
        p_flags: 4,
        p_offset: vaddr,
        p_vaddr: vaddr,
        p_filesz: memsz,
        p_memsz: memsz,
        p_align: 4,
    }
}

/// Parses synthetic headers; the note bytes sit at `BIAS + 0x200`.
fn parse(headers: &[ProgramHeader], notes: Vec<u8>) -> Scanned {
    parse_at(b"/lib/libsynthetic.so", BIAS, headers, notes)
}

/// Parses synthetic headers of an object `name` at `bias`; the note bytes
/// sit at `bias + 0x200`.
fn parse_at(name: &[u8], bias: u64, headers: &[ProgramHeader], notes: Vec<u8>) -> Scanned {
    let memory = FakeMemory {
        base: bias + 0x200,
        bytes: notes,
    };
    // SAFETY: FakeMemory's `read` is bounds-checked and sound for any input.
    unsafe {
        parse_object(
            name,
            bias,
            bias + 0x40,
            headers,
            false,
            Landmarks::default(),
            &memory,
        )
    }
}

#[test]
fn well_formed_object() {
    let note = build_id_note();
    let headers = [
        load(0, 0x1000, 4),
        load(0x1000, 0x2000, 5),
        note_header(0x200, note.len() as u64),
        load(0x4000, 0x800, 6),
    ];
    let o = parse(&headers, note);
    assert_eq!(o.problems, []);
    assert_eq!(o.build_id, BuildId::from_bytes(&ID));
    assert_eq!(o.kind, ObjectKind::Library);
    let ranges: Vec<_> = o
        .segments
        .iter()
        .map(|s| (s.range.clone(), s.flags))
        .collect();
    assert_eq!(
        ranges,
        [
            (BIAS..BIAS + 0x1000, 4),
            (BIAS + 0x1000..BIAS + 0x3000, 5),
            (BIAS + 0x4000..BIAS + 0x4800, 6)
        ]
    );
}

#[test]
fn no_load_segment_is_reported() {
    let o = parse(&[note_header(0x200, 36)], build_id_note());
    assert_eq!(o.segments, []);
    // The note is not inside any loaded segment: not read.
    assert_eq!(
        o.problems,
        [
            ProblemKind::NoLoadSegment,
            ProblemKind::MalformedNote(NoteError::OutsideLoadSegments)
        ]
    );
    let o = parse(&[], Vec::new());
    assert_eq!(
        o.problems,
        [ProblemKind::NoLoadSegment, ProblemKind::NoBuildId]
    );
}

#[test]
fn empty_and_out_of_range_segments_are_left_out() {
    let headers = [
        load(0, 0, 4),
        load(0x1000, 0x1000, 5),
        load(u64::MAX - BIAS - 0x10, 0x100, 4),
    ];
    let o = parse(&headers, Vec::new());
    assert_eq!(o.segments.len(), 1);
    assert_eq!(o.segments[0].range, BIAS + 0x1000..BIAS + 0x2000);
    assert_eq!(
        o.problems,
        [
            ProblemKind::EmptySegment { vaddr: 0 },
            ProblemKind::SegmentOutOfRange {
                vaddr: u64::MAX - BIAS - 0x10,
                memsz: 0x100
            },
            ProblemKind::NoBuildId,
        ]
    );
}

#[test]
fn overlapping_segments_are_merged_and_reported() {
    // Out of order, too: ELF says ascending, the scan does not rely on it.
    let headers = [
        load(0x1800, 0x1000, 6),
        load(0, 0x2000, 5),
        load(0x3000, 0x100, 4),
    ];
    let o = parse(&headers, Vec::new());
    let ranges: Vec<_> = o
        .segments
        .iter()
        .map(|s| (s.range.clone(), s.flags))
        .collect();
    assert_eq!(
        ranges,
        [(BIAS..BIAS + 0x2800, 7), (BIAS + 0x3000..BIAS + 0x3100, 4)]
    );
    assert!(o.problems.contains(&ProblemKind::OverlappingSegments {
        first: BIAS..BIAS + 0x2000,
        second: BIAS + 0x1800..BIAS + 0x2800,
    }));
}

#[test]
fn malformed_notes_are_reported_and_the_object_goes_in() {
    let mut note = build_id_note();
    note[4] = 0xff; // descsz 255: runs past the segment
    let headers = [load(0, 0x1000, 5), note_header(0x200, note.len() as u64)];
    let o = parse(&headers, note);
    assert_eq!(o.build_id, None);
    assert_eq!(
        o.problems,
        [ProblemKind::MalformedNote(
            NoteError::DescriptorOutOfBounds { offset: 0 }
        )]
    );
    assert_eq!(o.segments.len(), 1);
}

#[test]
fn note_outside_readable_segments_is_not_read() {
    let note = build_id_note();
    let len = note.len() as u64;
    for headers in [
        // In a segment that is not readable.
        vec![load(0, 0x1000, 1), note_header(0x200, len)],
        // Running past the end of the only segment.
        vec![load(0, 0x210, 5), note_header(0x200, len)],
        // Bounds that overflow.
        vec![load(0, 0x1000, 5), note_header(u64::MAX - 4, len)],
    ] {
        let o = parse(&headers, note.clone());
        assert_eq!(o.build_id, None, "{headers:x?}");
        assert_eq!(
            o.problems,
            [ProblemKind::MalformedNote(NoteError::OutsideLoadSegments)],
            "{headers:x?}"
        );
    }
}

#[test]
fn main_program_and_vdso_by_landmarks() {
    let memory = FakeMemory {
        base: 0,
        bytes: Vec::new(),
    };
    let headers = [load(0, 0x1000, 5)];
    let marks = Landmarks {
        main_phdr: Some(0x5000_0040),
        vdso: Some(BIAS),
        page_size: 0x1000,
    };
    let parse = |name: &[u8], bias: u64, first: bool, marks: Landmarks| {
        // SAFETY: FakeMemory's `read` is bounds-checked and sound for any
        // input.
        unsafe { parse_object(name, bias, bias + 0x40, &headers, first, marks, &memory) }
    };
    let main = parse(b"", 0x5000_0000, true, marks);
    let vdso = parse(b"linux-vdso.so.1", BIAS, false, marks);
    let lib = parse(b"", 0x6000_0000, false, marks);
    let first = parse(b"", 0x6000_0000, true, Landmarks::default());
    assert_eq!(main.kind, ObjectKind::MainProgram);
    assert_eq!(vdso.kind, ObjectKind::Vdso);
    assert_eq!(lib.kind, ObjectKind::Library);
    // With no AT_PHDR, the first, nameless object is the main program.
    assert_eq!(first.kind, ObjectKind::MainProgram);
    let (lib, problems) = ObjectInfo::from_scan(lib);
    assert_eq!(lib.path(), Path::new(""));
    assert!(problems.contains(&ProblemKind::NoPath));
    let (vdso, _) = ObjectInfo::from_scan(vdso);
    assert_eq!(vdso.path(), Path::new("[vdso]"));
}

/// Unwind tables: `PT_GNU_EH_FRAME` inside a readable load segment is
/// kept, `PT_GNU_SFRAME` outside every one is not; the image spans the
/// loads, page-rounded.
#[test]
fn unwind_tables_and_image_span() {
    let headers = [
        load(0x40, 0x1000, 5),
        load(0x3000, 0x234, 6),
        table(PT_GNU_EH_FRAME, 0x800, 0x64),
        table(PT_GNU_SFRAME, 0x9000, 0x10),
    ];
    let info = parse(&headers, Vec::new()).unwind;
    assert_eq!(info.eh_frame_hdr, Some(BIAS + 0x800..BIAS + 0x864));
    assert_eq!(info.sframe, None, "outside every load segment");
    assert_eq!(info.image, BIAS..BIAS + 0x4000);
    let none = parse(&[load(0, 0x1000, 5)], Vec::new()).unwind;
    assert_eq!((none.eh_frame_hdr, none.sframe), (None, None));
}

// ------------------------------------------------------------- refresh

/// Refreshes from a synthetic scan, as `refresh` does from a real one.
fn apply<P: Send + Sync>(objects: &LoadedObjects<P>, scanned: &[&Scanned]) -> Refresh {
    let scan = Scan {
        objects: scanned.iter().map(|&s| s.clone()).collect(),
        counters: None,
    };
    // Synthetic objects are not loaded: nothing holds them mapped.
    objects.refresh_with(|| None, || scan, |_| Some(LoaderRef::unheld()))
}

/// `(path, problem)` pairs of a refresh, the files' and unwind tables'
/// absence aside (none of the synthetic objects has either, unless a test
/// gives it a header).
fn problems(refresh: &Refresh) -> Vec<(String, ProblemKind)> {
    let absent = [
        ProblemKind::FileVanished,
        ProblemKind::NoEhFrame(EhFrameError::NoHeader),
    ];
    let mut all: Vec<_> = (refresh.problems.iter())
        .filter(|p| !absent.contains(p.kind()))
        .map(|p| (p.path().display().to_string(), p.kind().clone()))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

fn added_paths(refresh: &Refresh) -> Vec<String> {
    let paths = refresh
        .added
        .iter()
        .map(|o| o.info().path().display().to_string());
    paths.collect()
}

#[test]
fn odd_objects_never_stop_a_refresh_and_are_reported_once() {
    let note = build_id_note();
    let with_note = |loads: &[ProgramHeader]| {
        let mut headers = loads.to_vec();
        headers.push(note_header(0x200, note.len() as u64));
        headers
    };
    // Fine; no PT_LOAD at all; overlapping `fine`; odd segments of its own.
    let fine = parse_at(
        b"/x/libfine.so",
        0x10_0000,
        &with_note(&[load(0, 0x1000, 5)]),
        note.clone(),
    );
    let empty = parse_at(b"/x/libempty.so", 0x20_0000, &with_note(&[]), note.clone());
    let clash = parse_at(
        b"/x/libclash.so",
        0x10_0800,
        &with_note(&[load(0, 0x1000, 5)]),
        note.clone(),
    );
    let odd_segments = [
        load(0, 0x2000, 5),
        load(0x1000, 0x2000, 6),
        load(0x4000, 0, 4),
    ];
    let odd = parse_at(
        b"/x/libodd.so",
        0x30_0000,
        &with_note(&odd_segments),
        note.clone(),
    );

    let objects = LoadedObjects::new();
    let first = apply(&objects, &[&fine, &empty, &clash, &odd]);
    assert_eq!(added_paths(&first), ["/x/libfine.so", "/x/libodd.so"]);
    let fine_id = first.added[0].id();
    let clash_error = crate::addr_index::AddrIndexError::Overlap {
        range: 0x10_0800..0x10_1800,
        existing: 0x10_0000..0x10_1000,
        module: fine_id,
    };
    assert_eq!(
        problems(&first),
        [
            ("/x/libclash.so".into(), ProblemKind::Rejected(clash_error)),
            ("/x/libempty.so".into(), ProblemKind::NoLoadSegment),
            (
                "/x/libempty.so".into(),
                ProblemKind::MalformedNote(NoteError::OutsideLoadSegments)
            ),
            (
                "/x/libodd.so".into(),
                ProblemKind::EmptySegment { vaddr: 0x4000 }
            ),
            (
                "/x/libodd.so".into(),
                ProblemKind::OverlappingSegments {
                    first: 0x30_0000..0x30_2000,
                    second: 0x30_1000..0x30_3000
                }
            ),
        ]
    );
    assert_eq!(objects.lookup(0x10_0010).map(|h| h.id()), Some(fine_id));
    assert_eq!(
        objects.lookup(0x10_1400),
        None,
        "the rejected object is not in"
    );
    let merged = objects.lookup(0x30_2800).unwrap();
    assert_eq!(
        (merged.segment(), merged.flags()),
        (0x30_0000..0x30_3000, 7)
    );

    // The same objects again: nothing changes, nothing is reported again.
    let second = apply(&objects, &[&fine, &empty, &clash, &odd]);
    assert!(
        second.added.is_empty() && second.removed.is_empty(),
        "{second:#?}"
    );
    assert_eq!(second.problems, []);
    assert_eq!(second.unchanged, 2);

    // `fine` unloaded, `empty` gone: the rejected object now fits, quietly.
    let third = apply(&objects, &[&clash, &odd]);
    assert_eq!(
        third.removed.iter().map(|o| o.id()).collect::<Vec<_>>(),
        [fine_id]
    );
    assert_eq!(added_paths(&third), ["/x/libclash.so"]);
    assert_eq!(third.problems, []);
    assert_eq!(
        objects.lookup(0x10_1400).map(|h| h.id()),
        Some(third.added[0].id())
    );
    assert!(objects.object(fine_id).is_some_and(|o| !o.is_loaded()));

    // `empty` back: reported anew (it had gone).
    let fourth = apply(&objects, &[&clash, &odd, &empty]);
    assert!(fourth.added.is_empty());
    assert_eq!(problems(&fourth).len(), 2);
    assert_eq!(objects.loaded_count(), 2);
}

/// A payload that a handler section kept alive past its object's unload is
/// dropped by a later refresh that hands it out as due: after that refresh
/// released every lock of the index, also the one that serializes
/// refreshes (its `Drop` may refresh, or wait for a thread that does). It
/// was dropped inside that refresh's batch scope, with that lock held.
#[test]
fn a_payload_a_section_kept_is_dropped_after_the_later_refreshs_locks() {
    static OBJECTS: LoadedObjects<Probe> = LoadedObjects::with_payload(|_| Probe);
    static DROPPED: AtomicUsize = AtomicUsize::new(0);
    static UNDER_LOCK: AtomicUsize = AtomicUsize::new(0);
    struct Probe;
    impl Drop for Probe {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, Relaxed);
            if OBJECTS.refreshing.try_lock().is_err() {
                UNDER_LOCK.fetch_add(1, Relaxed);
            }
        }
    }
    let lib = |i: u64| {
        let name = format!("/x/lib{i}.so");
        parse_at(
            name.as_bytes(),
            (i + 1) << 20,
            &[load(0, 0x1000, 5)],
            Vec::new(),
        )
    };
    let kept = lib(0);
    apply(&OBJECTS, &[&kept]);
    let section = OBJECTS.handler_section();
    assert!(section.lookup(1 << 20).is_some());
    // Unloaded while the section is open: its payload waits for it.
    let gone = apply(&OBJECTS, &[]);
    assert_eq!(gone.removed.len(), 1);
    assert_eq!(DROPPED.load(Relaxed), 0, "a section can still see it");
    drop(section);
    // Refreshes that only add objects (so no flush after them): one of
    // their batches finds the payload due.
    let mut loaded = Vec::new();
    for i in 1..=size(400, 40) {
        if DROPPED.load(Relaxed) > 0 {
            break;
        }
        loaded.push(lib(i));
        let all: Vec<&Scanned> = loaded.iter().collect();
        assert_eq!(apply(&OBJECTS, &all).added.len(), 1);
    }
    assert_eq!(DROPPED.load(Relaxed), 1, "no refresh dropped the payload");
    assert_eq!(
        UNDER_LOCK.load(Relaxed),
        0,
        "dropped while a refresh held its lock"
    );
}

/// What a refresh does with objects it cannot hold: one unloaded before it
/// could be held is skipped (reported, not indexed, no payload built); one
/// indexed without a reference (another `dlmopen` namespace) gets no bytes
/// in its builder, and its `.eh_frame` is looked for under the loader's
/// lock (a synthetic object is not there: `Unloaded`, reported); one with
/// overlapping segments has its `.eh_frame` refused.
#[test]
#[cfg_attr(miri, ignore = "the unheld object's pass calls dl_iterate_phdr")]
fn objects_a_refresh_cannot_hold_are_skipped_or_get_no_bytes() {
    static BUILT: AtomicUsize = AtomicUsize::new(0);
    static HELD_OR_READ: AtomicUsize = AtomicUsize::new(0);
    fn build(object: &super::MappedObject<'_>) {
        BUILT.fetch_add(1, Relaxed);
        let read = object.read(object.segments()[0].range.clone());
        if object.is_held() || read != Err(super::ReadError::NotHeld) {
            HELD_OR_READ.fetch_add(1, Relaxed);
        }
    }
    let with_hdr = |name: &[u8], bias: u64, loads: &[ProgramHeader]| {
        let mut headers = loads.to_vec();
        headers.push(table(PT_GNU_EH_FRAME, 0x800, 0x20));
        parse_at(name, bias, &headers, Vec::new())
    };
    let gone = with_hdr(b"/x/libgone.so", 0x10_0000, &[load(0, 0x1000, 5)]);
    let elsewhere = with_hdr(b"/x/libelsewhere.so", 0x20_0000, &[load(0, 0x1000, 5)]);
    let overlapping = with_hdr(
        b"/x/liboverlap.so",
        0x30_0000,
        &[load(0, 0x2000, 5), load(0x1000, 0x2000, 4)],
    );
    let objects = LoadedObjects::with_payload(build);
    let scan = Scan {
        objects: [&gone, &elsewhere, &overlapping].map(Clone::clone).into(),
        counters: None,
    };
    let hold = |info: &ObjectInfo| (info.bias() != 0x10_0000).then(LoaderRef::unheld);
    let refresh = objects.refresh_with(|| None, || scan, hold);

    assert_eq!(refresh.skipped.len(), 1);
    assert_eq!(refresh.skipped[0].path(), Path::new("/x/libgone.so"));
    assert!(objects.lookup(0x10_0010).is_none(), "skipped: not indexed");
    assert_eq!(
        added_paths(&refresh),
        ["/x/libelsewhere.so", "/x/liboverlap.so"]
    );
    assert_eq!(BUILT.load(Relaxed), 2, "no payload for the skipped object");
    assert_eq!(
        HELD_OR_READ.load(Relaxed),
        0,
        "no bytes of an unheld object"
    );

    let eh_frame = |bias: u64| {
        let id = objects.lookup(bias + 0x10).unwrap().id();
        objects.object(id).unwrap().info().try_eh_frame()
    };
    assert_eq!(eh_frame(0x20_0000), Err(EhFrameError::Unloaded));
    assert_eq!(eh_frame(0x30_0000), Err(EhFrameError::OverlappingSegments));
    let reported: Vec<_> = (problems(&refresh).into_iter())
        .filter(|(_, kind)| matches!(kind, ProblemKind::NoEhFrame(_)))
        .collect();
    assert_eq!(
        reported,
        [
            (
                "/x/libelsewhere.so".into(),
                ProblemKind::NoEhFrame(EhFrameError::Unloaded)
            ),
            (
                "/x/liboverlap.so".into(),
                ProblemKind::NoEhFrame(EhFrameError::OverlappingSegments)
            ),
        ]
    );
}

/// An object "mapped" in a buffer of this test, held (never unmapped): the
/// refresh walks its `.eh_frame` in place, and the builder reads its
/// tables as slices of that memory; a writable segment is refused. Under
/// Miri this runs both `unsafe` reads of mapped memory (the walk's, and
/// `MappedObject::read`'s).
#[test]
fn a_held_object_is_walked_in_place_and_read_as_slices() {
    /// The header's and the section's bytes, and whether the writable
    /// segment was refused.
    type Seen = (Vec<u8>, Vec<u8>, bool);
    static SEEN: std::sync::Mutex<Option<Seen>> = std::sync::Mutex::new(None);
    fn build(object: &super::MappedObject<'_>) {
        let data = object.segments()[1].range.clone();
        let refused = object.read(data.clone()) == Err(super::ReadError::NotReadOnly(data));
        *SEEN.lock().unwrap() = Some((
            object.eh_frame_hdr_bytes().unwrap_or_default().to_vec(),
            object.eh_frame_bytes().unwrap_or_default().to_vec(),
            refused,
        ));
    }
    // 0x00: .eh_frame_hdr (version 1, pcrel sdata4 pointer to 0x40);
    // 0x40: .eh_frame: a 12-byte record, then the terminator; then a
    // writable segment at 0x80.
    let mut image = vec![0u8; 0x100];
    image[..4].copy_from_slice(&[1, 0x1b, 0x03, 0x3b]);
    image[4..8].copy_from_slice(&(0x40i32 - 4).to_ne_bytes());
    image[0x40..0x44].copy_from_slice(&12u32.to_ne_bytes());
    image[0x44..0x50].fill(0xaa);
    let image: &'static [u8] = Box::leak(image.into_boxed_slice());
    let bias = image.as_ptr().expose_provenance() as u64;
    let headers = [
        load(0, 0x80, 4),
        load(0x80, 0x80, 6),
        table(PT_GNU_EH_FRAME, 0, 0x10),
    ];
    let object = parse_at(b"/x/libinmemory.so", bias, &headers, Vec::new());
    let objects = LoadedObjects::with_payload(build);
    let scan = Scan {
        objects: vec![object],
        counters: None,
    };
    let refresh = objects.refresh_with(|| None, || scan, |_| Some(LoaderRef::permanent()));
    assert_eq!(added_paths(&refresh), ["/x/libinmemory.so"]);
    let id = objects.lookup(bias).unwrap().id();
    let info = objects.object(id).unwrap().info().clone();
    assert_eq!(info.try_eh_frame(), Ok(bias + 0x40..bias + 0x54));
    let (hdr, eh_frame, refused) = SEEN.lock().unwrap().take().unwrap();
    assert_eq!(hdr, image[..0x10]);
    assert_eq!(eh_frame, image[0x40..0x54]);
    assert!(refused, "a writable segment is not handed out");
}
