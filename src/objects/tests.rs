//! The scan against `readelf -n` and `/proc/self/maps`, and odd program
//! headers through [`parse_object`].

use super::info::{LoadSegment, ObjectInfo, ObjectKind};
use super::note::{BuildId, NoteError};
use super::problem::ProblemKind;
use super::scan::{
    Landmarks, NoteMemory, PT_LOAD, PT_NOTE, ProgramHeader, Scanned, load_counters, parse_object,
    scan,
};
use core::ops::Range;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

// ------------------------------------------------------------- helpers

/// One line of `/proc/self/maps`.
#[derive(Debug)]
struct Mapping {
    range: Range<u64>,
    perms: [u8; 4],
    inode: u64,
    path: Vec<u8>,
}

fn maps() -> Vec<Mapping> {
    let text = std::fs::read("/proc/self/maps").expect("/proc/self/maps");
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|line| {
            // start-end perms offset dev inode [path]
            let mut fields = line.splitn(6, |&b| b == b' ');
            let mut next = || std::str::from_utf8(fields.next().unwrap()).unwrap();
            let (start, end) = next().split_once('-').unwrap();
            let perms: [u8; 4] = next().as_bytes().try_into().unwrap();
            let (_offset, _dev) = (next(), next());
            let inode = next().parse().unwrap();
            let path = fields
                .next()
                .unwrap_or_default()
                .trim_ascii_start()
                .to_vec();
            Mapping {
                range: u64::from_str_radix(start, 16).unwrap()
                    ..u64::from_str_radix(end, 16).unwrap(),
                perms,
                inode,
                path,
            }
        })
        .collect()
}

fn overlaps(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

fn page_size() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).unwrap()
}

/// `readelf -n`'s build id of `file`; `None` if readelf is not installed.
fn readelf_build_id(file: &Path) -> Option<Option<String>> {
    let output = match Command::new("readelf").arg("-n").arg(file).output() {
        Ok(output) => output,
        Err(e) => {
            eprintln!("readelf cannot run ({e}): skipping the build-id comparison");
            return None;
        }
    };
    assert!(output.status.success(), "readelf -n {}", file.display());
    let text = String::from_utf8_lossy(&output.stdout);
    Some(
        text.lines()
            .find_map(|l| l.trim().strip_prefix("Build ID: "))
            .map(str::to_owned),
    )
}

fn named(scan: &[Scanned], kind: ObjectKind) -> Vec<&Scanned> {
    scan.iter().filter(|o| o.kind == kind).collect()
}

fn info(scanned: &Scanned) -> ObjectInfo {
    ObjectInfo::from_scan(scanned.clone()).0
}

fn libc_object(scan: &[Scanned]) -> &Scanned {
    scan.iter()
        .find(|o| {
            Path::new(std::ffi::OsStr::from_bytes(&o.loader_name))
                .file_name()
                .is_some_and(|n| n.as_bytes().starts_with(b"libc.so"))
        })
        .expect("libc in the scan")
}

/// A function of this test binary.
#[inline(never)]
fn probe() -> u64 {
    std::hint::black_box(42)
}

// ------------------------------------------------------------- real scan

#[test]
fn main_program_and_vdso_are_recognized() {
    let scan = scan();
    let main = named(&scan.objects, ObjectKind::MainProgram);
    assert_eq!(main.len(), 1, "{:#?}", scan.objects);
    let main = info(main[0]);
    let pc = (probe as *const ()).addr() as u64;
    assert!(main.segment_of(pc).is_some_and(LoadSegment::is_executable));
    assert_eq!(
        main.path().canonicalize().unwrap(),
        std::env::current_exe().unwrap().canonicalize().unwrap()
    );
    if Landmarks::of_this_process().vdso.is_some() {
        let vdso = named(&scan.objects, ObjectKind::Vdso);
        assert_eq!(vdso.len(), 1);
        let vdso = info(vdso[0]);
        assert_eq!(vdso.path(), Path::new("[vdso]"));
        let mapped = maps();
        let line = mapped
            .iter()
            .find(|m| m.path == b"[vdso]")
            .expect("[vdso] in maps");
        assert!(
            vdso.segments()
                .iter()
                .all(|s| line.range.start <= s.range.start && s.range.end <= line.range.end)
        );
    }
    // Every object has a path of some sort, and no two overlap.
    let mut all: Vec<Range<u64>> = scan
        .objects
        .iter()
        .flat_map(|o| o.segments.iter().map(|s| s.range.clone()))
        .collect();
    all.sort_by_key(|r| r.start);
    assert!(all.windows(2).all(|w| w[0].end <= w[1].start), "{all:x?}");
}

#[test]
fn build_ids_match_readelf() {
    let scan = scan();
    let main = info(named(&scan.objects, ObjectKind::MainProgram)[0]);
    let libc = info(libc_object(&scan.objects));
    let mut compared = 0;
    for object in [&main, &libc] {
        let Some(expected) = readelf_build_id(object.path()) else {
            return;
        };
        let ours = object.build_id().map(BuildId::to_string);
        assert_eq!(ours, expected, "{}", object.path().display());
        println!("{}: build id {ours:?}", object.path().display());
        compared += usize::from(expected.is_some());
    }
    // libc on every distribution we run on has one.
    assert!(compared >= 1, "libc has no build id?");
}

#[test]
fn every_segment_agrees_with_proc_self_maps() {
    let scan = scan();
    let mapped = maps();
    let page = page_size();
    let mut checked = 0;
    for object in scan.objects.iter().map(info) {
        let inode = match object.kind() {
            ObjectKind::Vdso => None,
            _ => Some(std::fs::metadata(object.path()).unwrap().ino()),
        };
        for s in object.segments() {
            // The bytes of the segment that come from the file, to the page.
            let file_end = (s.range.start + s.file_size).next_multiple_of(page);
            let lines: Vec<&Mapping> = mapped
                .iter()
                .filter(|m| overlaps(&m.range, &s.range))
                .collect();
            assert!(
                !lines.is_empty(),
                "{}: {s:x?} not mapped",
                object.path().display()
            );
            // Covered, with no gap.
            let mut at = s.range.start & !(page - 1);
            for m in &lines {
                assert!(
                    m.range.start <= at,
                    "{}: gap at {at:#x} in {s:x?}",
                    object.path().display()
                );
                at = m.range.end;
            }
            assert!(
                at >= s.range.end,
                "{}: {s:x?} mapped to {at:#x} only",
                object.path().display()
            );
            for m in lines {
                let shared_page = mapped.len() > 1
                    && object
                        .segments()
                        .iter()
                        .any(|o| o != s && overlaps(&o.range, &m.range));
                let what = format!("{} {s:x?} vs {m:x?}", object.path().display());
                match inode {
                    Some(inode) if m.range.start < file_end => assert_eq!(m.inode, inode, "{what}"),
                    // Past the file's bytes: anonymous zero pages (.bss).
                    Some(_) => assert!(
                        m.inode == 0 || m.path.is_empty() || m.path == b"[heap]",
                        "{what}"
                    ),
                    None => assert_eq!(m.path, b"[vdso]", "{what}"),
                }
                if !shared_page {
                    assert_eq!(m.perms[2] == b'x', s.is_executable(), "{what}");
                    assert_eq!(m.perms[0] == b'r', s.is_readable(), "{what}");
                    // RELRO turns part of a writable segment read-only.
                    assert!(m.perms[1] != b'w' || s.is_writable(), "{what}");
                }
                checked += 1;
            }
        }
    }
    println!("{checked} mappings checked");
    assert!(checked > 10, "only {checked} mappings checked");
}

#[test]
fn counters_move_on_dlopen_and_dlclose() {
    let Some(before) = load_counters() else {
        eprintln!("this loader keeps no dlpi_adds/dlpi_subs: nothing to check");
        return;
    };
    assert_eq!(scan().counters, Some(before));
    let Some(copy) = TempLibrary::new(b"libcounted.so") else {
        return;
    };
    let handle = copy.open();
    let opened = load_counters().unwrap();
    assert!(opened.adds > before.adds, "{before:?} -> {opened:?}");
    assert_eq!(scan().counters, Some(opened));
    close(handle);
    let closed = load_counters().unwrap();
    assert!(closed.subs > opened.subs, "{opened:?} -> {closed:?}");
}

/// A copy of libz (a small library every test machine has) in a fresh
/// directory, under a name of our choosing: a file of its own, so the
/// loader maps it anew even if libz is loaded, and the test may delete it.
struct TempLibrary {
    dir: PathBuf,
    path: PathBuf,
}

impl TempLibrary {
    fn new(name: &[u8]) -> Option<TempLibrary> {
        let source = [
            "/lib/x86_64-linux-gnu/libz.so.1",
            "/lib/aarch64-linux-gnu/libz.so.1",
            "/usr/lib/libz.so.1",
            "/lib/libz.so.1",
        ]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists());
        let Some(source) = source else {
            eprintln!("no libz.so.1 to copy: skipping");
            return None;
        };
        let unique = format!(
            "latchtree-objects-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let dir = std::env::temp_dir().join(unique);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join(std::ffi::OsStr::from_bytes(name));
        std::fs::copy(source, &path).unwrap();
        Some(TempLibrary { dir, path })
    }

    fn open(&self) -> *mut libc::c_void {
        let c = CString::new(self.path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; libz's initializers do nothing that
        // matters to this process.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen {}", self.path.display());
        handle
    }
}

impl Drop for TempLibrary {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn close(handle: *mut libc::c_void) {
    // SAFETY: a handle from dlopen, closed once; nothing in it is used
    // afterwards.
    assert_eq!(unsafe { libc::dlclose(handle) }, 0);
}

/// The scan's object for the library at `path`, converted.
fn scanned_at(path: &Path) -> (ObjectInfo, Vec<ProblemKind>) {
    let scan = scan();
    let found = scan
        .objects
        .into_iter()
        .find(|o| o.loader_name.as_ref() == path.as_os_str().as_bytes())
        .unwrap_or_else(|| panic!("{} not in the scan", path.display()));
    ObjectInfo::from_scan(found)
}

#[test]
fn non_utf8_path_is_kept_exactly_and_reported() {
    let Some(copy) = TempLibrary::new(b"lib\xff\xfe-latin1-\xe9.so") else {
        return;
    };
    let handle = copy.open();
    let (object, problems) = scanned_at(&copy.path);
    close(handle);
    assert_eq!(
        object.path().as_os_str().as_bytes(),
        copy.path.as_os_str().as_bytes()
    );
    assert_eq!(object.loader_name(), copy.path.as_os_str());
    assert_eq!(problems, [ProblemKind::PathNotUtf8]);
    assert!(object.build_id().is_some());
}

#[test]
fn vanished_file_is_reported() {
    let Some(copy) = TempLibrary::new(b"libvanishing.so") else {
        return;
    };
    let handle = copy.open();
    std::fs::remove_file(&copy.path).unwrap();
    let (object, problems) = scanned_at(&copy.path);
    close(handle);
    assert_eq!(problems, [ProblemKind::FileVanished]);
    // Still fully described: it is mapped, only its file is gone.
    assert!(object.build_id().is_some());
    assert!(object.segments().iter().any(LoadSegment::is_executable));
}

// ------------------------------------------------------------- synthetic

/// Notes "mapped" at `base`, read with bounds checks.
struct FakeMemory {
    base: u64,
    bytes: Vec<u8>,
}

impl NoteMemory for FakeMemory {
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
    ProgramHeader {
        p_type: PT_NOTE,
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
    let memory = FakeMemory {
        base: BIAS + 0x200,
        bytes: notes,
    };
    // SAFETY: FakeMemory's `read` is bounds-checked and sound for any input.
    unsafe {
        parse_object(
            b"/lib/libsynthetic.so",
            BIAS,
            BIAS + 0x40,
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
    };
    // SAFETY: FakeMemory's `read` is bounds-checked and sound for any input.
    let (main, vdso, lib, first) = unsafe {
        (
            parse_object(
                b"",
                0x5000_0000,
                0x5000_0040,
                &headers,
                true,
                marks,
                &memory,
            ),
            parse_object(
                b"linux-vdso.so.1",
                BIAS,
                BIAS + 0x40,
                &headers,
                false,
                marks,
                &memory,
            ),
            parse_object(
                b"",
                0x6000_0000,
                0x6000_0040,
                &headers,
                false,
                marks,
                &memory,
            ),
            parse_object(
                b"",
                0x6000_0000,
                0x6000_0040,
                &headers,
                true,
                Landmarks::default(),
                &memory,
            ),
        )
    };
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
