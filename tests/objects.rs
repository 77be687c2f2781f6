//! `LoadedObjects` on this process's real objects: against `readelf -n`,
//! `/proc/self/maps` and glibc's `_dl_find_object`; following
//! `dlopen`/`dlclose`; and looked up from a signal handler while another
//! thread loads and unloads a library in a loop.
//!
//! The libraries loaded here are private copies of libz (a small library
//! every test machine has) in a fresh directory: a file of their own, so the
//! loader maps and unmaps them even if libz itself is loaded, and a test may
//! name them oddly or delete them.

#![cfg(all(
    feature = "objects",
    target_os = "linux",
    target_pointer_width = "64",
    not(miri)
))]

mod common;

use common::Rng;
use latchtree::{
    EhFrameError, LoadedObjects, MappedObject, ModuleId, ObjectKind, ObjectRef, ProblemKind,
    ReadError, UnindexedObject,
};
use object::{Object, ObjectSymbol};
use std::ffi::{CStr, CString, OsStr, c_int, c_void};
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

// ------------------------------------------------------------- helpers

/// The tests here load and unload libraries and expect the set of objects
/// to stay put otherwise: one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

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
            let hex = |s| u64::from_str_radix(s, 16).unwrap();
            Mapping {
                range: hex(start)..hex(end),
                perms,
                inode,
                path,
            }
        })
        .collect()
}

fn mapping_at(maps: &[Mapping], pc: u64) -> Option<&Mapping> {
    maps.iter().find(|m| m.range.contains(&pc))
}

fn overlaps(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

fn page_size() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap()
}

/// The inode of an object's file (`None` for the vDSO).
fn inode_of(object: &ObjectRef) -> Option<u64> {
    (object.info().kind() != ObjectKind::Vdso)
        .then(|| std::fs::metadata(object.info().path()).unwrap().ino())
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

/// The link-time address of the dynamic symbol `name` in `file`.
fn symbol_address(file: &Path, name: &str) -> u64 {
    let data = std::fs::read(file).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    elf.dynamic_symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("{name} not in {}", file.display()))
        .address()
}

/// A function of this test binary.
#[inline(never)]
fn probe() -> u64 {
    std::hint::black_box(42)
}

fn code_address(f: *const ()) -> u64 {
    f.addr() as u64
}

/// A private copy of libz, loaded and unloaded with `dlopen`/`dlclose`.
struct TempLibrary {
    dir: PathBuf,
    path: PathBuf,
}

impl TempLibrary {
    /// A copy named `name`; `None` (with a message) if no libz is found.
    fn new(name: &[u8]) -> Option<TempLibrary> {
        let candidates = [
            "/lib/x86_64-linux-gnu/libz.so.1",
            "/lib/aarch64-linux-gnu/libz.so.1",
            "/usr/lib/libz.so.1",
            "/lib/libz.so.1",
        ];
        let Some(source) = candidates.into_iter().map(Path::new).find(|p| p.exists()) else {
            eprintln!("no libz.so.1 to copy: skipping");
            return None;
        };
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "latchtree-objects-{}-{}",
            std::process::id(),
            N.fetch_add(1, Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(OsStr::from_bytes(name));
        std::fs::copy(source, &path).unwrap();
        Some(TempLibrary { dir, path })
    }

    fn open(&self) -> Handle {
        let c = CString::new(self.path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; libz's initializers do nothing that
        // matters to this process.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen {}", self.path.display());
        Handle(handle)
    }
}

impl Drop for TempLibrary {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `dlopen` handle, closed once by [`Handle::close`].
struct Handle(*mut c_void);

impl Handle {
    fn symbol(&self, name: &CStr) -> u64 {
        // SAFETY: a live handle, a valid C string.
        let address = unsafe { libc::dlsym(self.0, name.as_ptr()) };
        assert!(!address.is_null(), "dlsym {name:?}");
        address.addr() as u64
    }

    fn close(self) {
        // SAFETY: the handle from dlopen, closed once (consumes self);
        // nothing in the library is used afterwards.
        assert_eq!(unsafe { libc::dlclose(self.0) }, 0);
    }
}

fn added_at<'r>(refresh: &'r latchtree::Refresh, path: &Path) -> &'r ObjectRef {
    refresh
        .added
        .iter()
        .find(|o| o.info().path() == path)
        .unwrap_or_else(|| panic!("{} not added: {refresh:#?}", path.display()))
}

// ------------------------------------------------------------- the scan

#[test]
fn first_refresh_indexes_every_object_and_a_second_changes_nothing() {
    let _serial = serial();
    let objects = LoadedObjects::new();
    let first = objects.refresh();
    assert!(first.rescanned);
    assert!(first.removed.is_empty());
    assert_eq!(first.added.len(), objects.loaded_count());
    // Every object went in with one batch: one write transaction.
    assert!(first.added.len() > 2);
    assert_eq!(objects.stats().writes, 1);
    assert_eq!(objects.objects().len(), first.added.len());
    for problem in &first.problems {
        println!("problem: {problem}");
    }
    let main: Vec<_> = (first.added.iter())
        .filter(|o| o.info().kind() == ObjectKind::MainProgram)
        .collect();
    assert_eq!(main.len(), 1);
    let hit = objects.lookup(code_address(probe as *const ())).unwrap();
    assert_eq!(hit.id(), main[0].id());
    assert!(hit.is_executable());
    assert_eq!(
        main[0].info().path().canonicalize().unwrap(),
        std::env::current_exe().unwrap().canonicalize().unwrap()
    );
    let vdso: Vec<_> = (first.added.iter())
        .filter(|o| o.info().kind() == ObjectKind::Vdso)
        .collect();
    if maps().iter().any(|m| m.path == b"[vdso]") {
        assert_eq!(vdso.len(), 1);
        assert_eq!(vdso[0].info().path(), Path::new("[vdso]"));
    }

    let second = objects.refresh();
    assert!(second.added.is_empty() && second.removed.is_empty());
    assert_eq!(second.unchanged, first.added.len());
    assert_eq!(objects.stats().writes, 1, "an unchanged refresh wrote");
    if LoadedObjects::load_counters().is_some() {
        assert!(!second.rescanned, "counters unchanged, yet it rescanned");
        assert_eq!(second.counters, first.counters);
    }
}

#[test]
fn build_ids_match_readelf() {
    let _serial = serial();
    let objects = LoadedObjects::new();
    objects.refresh();
    let main = objects
        .object(
            objects
                .lookup(code_address(probe as *const ()))
                .unwrap()
                .id(),
        )
        .unwrap();
    let libc = objects
        .object(
            objects
                .lookup(code_address(libc::getpid as *const ()))
                .unwrap()
                .id(),
        )
        .unwrap();
    assert!(
        libc.info()
            .path()
            .file_name()
            .unwrap()
            .as_bytes()
            .starts_with(b"libc")
    );
    let mut compared = 0;
    for object in [&main, &libc] {
        let Some(expected) = readelf_build_id(object.info().path()) else {
            return;
        };
        let ours = object.info().build_id().map(ToString::to_string);
        println!("{}: {ours:?}", object.info().path().display());
        assert_eq!(ours, expected, "{}", object.info().path().display());
        compared += usize::from(expected.is_some());
    }
    assert!(compared >= 1, "libc has no build id?");
}

#[test]
fn every_segment_agrees_with_proc_self_maps() {
    let _serial = serial();
    let objects = LoadedObjects::new();
    objects.refresh();
    let mapped = maps();
    let page = page_size();
    let mut checked = 0;
    for object in objects.objects() {
        let inode = inode_of(&object);
        let info = object.info();
        for s in info.segments() {
            let what = |m: &Mapping| format!("{} {s:x?} vs {m:x?}", info.path().display());
            // Covered, with no gap, from the segment's first page on.
            let lines: Vec<&Mapping> = mapped
                .iter()
                .filter(|m| overlaps(&m.range, &s.range))
                .collect();
            let mut at = s.range.start & !(page - 1);
            for m in &lines {
                assert!(m.range.start <= at, "gap at {at:#x}: {}", what(m));
                at = m.range.end;
            }
            assert!(
                at >= s.range.end,
                "{}: {s:x?} mapped to {at:#x} only",
                info.path().display()
            );
            // The pages holding the segment's file bytes are its file's.
            let file_end = (s.range.start + s.file_size).next_multiple_of(page);
            for m in lines {
                match inode {
                    Some(inode) if m.range.start < file_end => {
                        assert_eq!(m.inode, inode, "{}", what(m))
                    }
                    Some(_) => assert!(m.inode == 0, "anonymous .bss expected: {}", what(m)),
                    None => assert_eq!(m.path, b"[vdso]", "{}", what(m)),
                }
                // A page shared with another segment shows the union.
                let shared = info
                    .segments()
                    .iter()
                    .any(|o| o != s && overlaps(&o.range, &m.range));
                if !shared {
                    assert_eq!(m.perms[2] == b'x', s.is_executable(), "{}", what(m));
                    assert_eq!(m.perms[0] == b'r', s.is_readable(), "{}", what(m));
                    // RELRO turns part of a writable segment read-only.
                    assert!(m.perms[1] != b'w' || s.is_writable(), "{}", what(m));
                }
                checked += 1;
            }
        }
    }
    println!("{checked} mappings checked");
    assert!(checked > 10, "only {checked} mappings checked");
}

// ------------------------------------------------------------- glibc

/// glibc's `struct dl_find_object` (2.35+; x86_64 and aarch64 have neither
/// `dlfo_eh_dbase` nor `dlfo_eh_count`), with room to spare at the end.
#[repr(C)]
struct DlFindObject {
    flags: u64,
    map_start: *mut c_void,
    map_end: *mut c_void,
    link_map: *mut c_void,
    eh_frame: *mut c_void,
    reserved: [u64; 16],
}

type DlFindObjectFn = unsafe extern "C" fn(*mut c_void, *mut DlFindObject) -> c_int;

/// `_dl_find_object`, if this libc has it (looked up, not linked: the test
/// binary must also load where it is missing).
fn dl_find_object_fn() -> Option<DlFindObjectFn> {
    // SAFETY: RTLD_DEFAULT searches the global scope; a valid C string.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_find_object".as_ptr()) };
    // SAFETY: glibc's `_dl_find_object` has exactly this signature.
    (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, DlFindObjectFn>(f) })
}

/// What `_dl_find_object` says of `pc`: the object's `l_addr` (its bias)
/// and the span of its mappings.
fn dl_find_object(f: DlFindObjectFn, pc: u64) -> Option<(u64, Range<u64>)> {
    // SAFETY: all-zero is a valid `DlFindObject` (integers and null pointers).
    let mut result: DlFindObject = unsafe { std::mem::zeroed() };
    // The pc is only compared, never dereferenced: no provenance needed.
    // SAFETY: `result` is a writable `struct dl_find_object` (and more).
    if unsafe { f(std::ptr::without_provenance_mut(pc as usize), &mut result) } != 0 {
        return None;
    }
    // `struct link_map` starts with `ElfW(Addr) l_addr`.
    // SAFETY: on success `dlfo_link_map` points at the object's link map,
    // which stays valid while the object is loaded (nothing unloads here).
    let l_addr = unsafe { result.link_map.cast::<u64>().read() };
    Some((
        l_addr,
        result.map_start.addr() as u64..result.map_end.addr() as u64,
    ))
}

#[test]
fn lookup_agrees_with_dl_find_object_and_proc_self_maps() {
    let _serial = serial();
    // A few more objects than the test binary links.
    let extra: Vec<TempLibrary> = (0..3)
        .filter_map(|i| TempLibrary::new(format!("libextra{i}.so").as_bytes()))
        .collect();
    let handles: Vec<Handle> = extra.iter().map(TempLibrary::open).collect();
    let objects = LoadedObjects::new();
    objects.refresh();
    let all = objects.objects();
    let mapped = maps();
    let page = page_size();
    let glibc = dl_find_object_fn();
    if glibc.is_none() {
        eprintln!("this libc has no _dl_find_object: comparing with /proc/self/maps only");
    }

    let mut rng = Rng::new(11);
    let mut pcs = Vec::new();
    for o in &all {
        for s in o.info().segments() {
            let len = s.range.end - s.range.start;
            pcs.extend([
                s.range.start,
                s.range.end - 1,
                s.range.end,
                s.range.start - 1,
            ]);
            pcs.extend((0..64).map(|_| s.range.start + rng.below(len)));
        }
    }
    // Anywhere in the user address space, the heap, the stack.
    pcs.extend((0..4000).map(|_| rng.next() & 0x7fff_ffff_ffff));
    let on_heap = Box::new(0_u8);
    pcs.extend([
        0,
        1,
        u64::MAX,
        (&raw const *on_heap).addr() as u64,
        (&raw const pcs).addr() as u64,
    ]);

    let segment_of = |pc: u64| {
        all.iter().find_map(|o| {
            Some((
                o,
                o.info().segments().iter().find(|s| s.range.contains(&pc))?,
            ))
        })
    };
    let mut disagreements = Vec::new();
    let (mut hits, mut glibc_gap_answers) = (0, 0);
    for &pc in &pcs {
        let ours = objects.lookup(pc);
        let expected = segment_of(pc);
        let glibc = glibc.and_then(|f| dl_find_object(f, pc));
        let line = mapping_at(&mapped, pc);
        let mut wrong = |why: String| disagreements.push(format!("{pc:#x}: {why}"));
        match (ours, expected) {
            (Some(hit), Some((object, segment))) => {
                hits += 1;
                if hit.id() != object.id()
                    || hit.segment() != segment.range
                    || hit.flags() != segment.flags
                {
                    wrong(format!(
                        "ours {hit:x?}, segment {segment:x?} of {}",
                        object.id()
                    ));
                }
                if hit.link_address() != pc - object.info().bias() {
                    wrong(format!("link address {:#x}", hit.link_address()));
                }
                match glibc {
                    Some((l_addr, span))
                        if l_addr == object.info().bias() && span.contains(&pc) => {}
                    // glibc may leave the vDSO out of its list.
                    None if object.info().kind() == ObjectKind::Vdso => {}
                    None if dl_find_object_fn().is_none() => {}
                    other => wrong(format!(
                        "glibc says {other:x?}, we say bias {:#x}",
                        object.info().bias()
                    )),
                }
                let file_end = (segment.range.start + segment.file_size).next_multiple_of(page);
                match (line, inode_of(object)) {
                    (Some(m), Some(inode))
                        if m.inode == inode || (pc >= file_end && m.inode == 0) => {}
                    (Some(m), None) if m.path == b"[vdso]" => {}
                    (line, _) => wrong(format!(
                        "maps says {line:x?} for {}",
                        object.info().path().display()
                    )),
                }
            }
            (None, None) => {
                // glibc may answer for the gaps inside an object's span.
                if let Some((l_addr, span)) = glibc {
                    let owner = all.iter().find(|o| o.info().bias() == l_addr);
                    match owner {
                        Some(o) if span.contains(&pc) => {
                            glibc_gap_answers += 1;
                            assert!(o.info().segment_of(pc).is_none());
                        }
                        _ => wrong(format!("glibc says {l_addr:#x} {span:x?}, we say nothing")),
                    }
                }
                // Mapped from an object's file: a PROT_NONE gap, or the
                // padding after a segment's last byte in its last page.
                if let Some(m) = line {
                    let owner = all
                        .iter()
                        .find(|o| m.inode != 0 && inode_of(o) == Some(m.inode));
                    if let Some(o) = owner {
                        let padding = o.info().segments().iter().any(|s| {
                            (s.range.start & !(page - 1)..s.range.end.next_multiple_of(page))
                                .contains(&pc)
                        });
                        if !(m.perms.starts_with(b"---") || padding) {
                            wrong(format!(
                                "maps says {m:x?} ({}), we say nothing",
                                o.info().path().display()
                            ));
                        }
                    }
                }
            }
            (ours, expected) => wrong(format!(
                "ours {ours:x?}, segments say {:?}",
                expected.map(|(o, s)| (o.id(), s))
            )),
        }
    }
    println!(
        "{} pcs, {hits} in segments of {} objects; glibc answered {glibc_gap_answers} gap pcs; {} disagreements",
        pcs.len(),
        all.len(),
        disagreements.len()
    );
    assert!(
        disagreements.is_empty(),
        "{:#?}",
        &disagreements[..disagreements.len().min(20)]
    );
    assert!(hits > 500);
    handles.into_iter().for_each(Handle::close);
}

// ------------------------------------------------------------- dlopen / dlclose

#[test]
fn refresh_follows_dlopen_and_dlclose() {
    let _serial = serial();
    let Some(copy) = TempLibrary::new(b"libfollowed.so") else {
        return;
    };
    let objects = LoadedObjects::new();
    let first = objects.refresh();

    let handle = copy.open();
    let opened = objects.refresh();
    assert!(opened.rescanned);
    assert_eq!(opened.added.len(), 1, "{opened:#?}");
    assert!(opened.removed.is_empty());
    assert_eq!(opened.unchanged, first.added.len());
    if let (Some(before), Some(after)) = (first.counters, opened.counters) {
        assert!(after.adds > before.adds);
    }
    let library = added_at(&opened, &copy.path).clone();
    assert!(library.is_loaded());
    assert_eq!(library.info().kind(), ObjectKind::Library);
    assert!(opened.problems.is_empty(), "{:?}", opened.problems);
    if let Some(expected) = readelf_build_id(&copy.path) {
        assert_eq!(library.info().build_id().map(ToString::to_string), expected);
    }

    // A pc in it: the object, the segment, the link-time address the file
    // gives the symbol.
    let pc = handle.symbol(c"adler32_z");
    let hit = objects.lookup(pc).expect("adler32_z is indexed");
    assert_eq!(hit.id(), library.id());
    assert!(hit.is_executable());
    assert_eq!(hit.bias(), library.info().bias());
    assert_eq!(hit.link_address(), symbol_address(&copy.path, "adler32_z"));
    assert!(
        library
            .info()
            .segment_of(pc)
            .is_some_and(|s| s.range == hit.segment())
    );

    let writes = objects.stats().writes;
    handle.close();
    let closed = objects.refresh();
    assert!(closed.rescanned && closed.added.is_empty());
    assert_eq!(objects.stats().writes, writes + 1, "one batch per refresh");
    assert_eq!(
        closed.removed.iter().map(ObjectRef::id).collect::<Vec<_>>(),
        [library.id()]
    );
    assert!(!closed.removed[0].is_loaded());
    assert_eq!(objects.lookup(pc), None, "still indexed after dlclose");
    assert_eq!(objects.loaded_count(), first.added.len());

    // Unloaded, still resolvable by id, until forgotten.
    let late = objects
        .object(library.id())
        .expect("unloaded objects stay resolvable");
    assert!(!late.is_loaded());
    assert_eq!(late.info(), library.info());
    assert_eq!(late.info().bias() + hit.link_address(), pc);
    assert_eq!(objects.unloaded_count(), 1);
    assert!(
        objects
            .objects()
            .iter()
            .any(|o| o.id() == library.id() && !o.is_loaded())
    );
    assert!(objects.forget(library.id()));
    assert!(!objects.forget(library.id()));
    assert!(objects.object(library.id()).is_none());
    assert_eq!(objects.unloaded_count(), 0);

    // Loaded again: a new object with a new id.
    let handle = copy.open();
    let again = objects.refresh();
    let reloaded = added_at(&again, &copy.path);
    assert_ne!(reloaded.id(), library.id());
    handle.close();
    assert_eq!(objects.refresh().removed.len(), 1);
    assert_eq!(objects.forget_unloaded(), 1);
}

#[test]
fn odd_paths_are_reported_and_indexed() {
    let _serial = serial();
    let (Some(latin1), Some(vanishing)) = (
        TempLibrary::new(b"lib\xff\xfe-latin1-\xe9.so"),
        TempLibrary::new(b"libvanishing.so"),
    ) else {
        return;
    };
    let objects = LoadedObjects::new();
    objects.refresh();
    let (a, b) = (latin1.open(), vanishing.open());
    std::fs::remove_file(&vanishing.path).unwrap();
    let refresh = objects.refresh();
    assert_eq!(refresh.added.len(), 2, "{refresh:#?}");

    let odd = added_at(&refresh, &latin1.path);
    assert_eq!(
        odd.info().path().as_os_str().as_bytes(),
        latin1.path.as_os_str().as_bytes()
    );
    assert_eq!(odd.info().loader_name(), latin1.path.as_os_str());
    let gone = added_at(&refresh, &vanishing.path);
    let mut problems: Vec<_> = refresh
        .problems
        .iter()
        .map(|p| (p.path().to_owned(), p.kind().clone()))
        .collect();
    problems.sort_by(|x, y| x.0.cmp(&y.0));
    let mut expected = vec![
        (latin1.path.clone(), ProblemKind::PathNotUtf8),
        (vanishing.path.clone(), ProblemKind::FileVanished),
    ];
    expected.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(problems, expected);
    // Both are in, fully described.
    for o in [odd, gone] {
        assert!(o.info().build_id().is_some());
        let pc = o
            .info()
            .segments()
            .iter()
            .find(|s| s.is_executable())
            .unwrap()
            .range
            .start;
        assert_eq!(objects.lookup(pc).map(|h| h.id()), Some(o.id()));
    }
    a.close();
    b.close();
}

// ------------------------------------------------------------- live, under signals

static LIVE: LoadedObjects = LoadedObjects::new();
/// A pc in the library that stays loaded, and its id.
static STAYING_PC: AtomicU64 = AtomicU64::new(0);
static STAYING_ID: AtomicU64 = AtomicU64::new(0);
/// A pc in the library being loaded and unloaded (0: none yet).
static CYCLING_PC: AtomicU64 = AtomicU64::new(0);
static HANDLED: AtomicU64 = AtomicU64::new(0);
static STAYING_WRONG: AtomicU64 = AtomicU64::new(0);
static CYCLING_MISSES: AtomicU64 = AtomicU64::new(0);
static CYCLING_LOOKUPS: AtomicU64 = AtomicU64::new(0);
/// The id of the last recorded hit on the cycling library.
static LAST_ID: AtomicU64 = AtomicU64::new(0);
/// Hits on the cycling library, one per load seen: `(id, pc, link-time
/// address)` triples.
const RECORDS: usize = 1 << 14;
static RECORDED: AtomicUsize = AtomicUsize::new(0);
static RECORD_ID: [AtomicU64; RECORDS] = [const { AtomicU64::new(0) }; RECORDS];
static RECORD_PC: [AtomicU64; RECORDS] = [const { AtomicU64::new(0) }; RECORDS];
static RECORD_ADDRESS: [AtomicU64; RECORDS] = [const { AtomicU64::new(0) }; RECORDS];

/// Async-signal-safe: lookups and atomics only.
extern "C" fn on_sigusr1(_: c_int) {
    HANDLED.fetch_add(1, Relaxed);
    let staying = LIVE.lookup(STAYING_PC.load(Relaxed));
    if staying.is_none_or(|h| h.id().get() != STAYING_ID.load(Relaxed) || !h.is_executable()) {
        STAYING_WRONG.fetch_add(1, Relaxed);
    }
    let pc = CYCLING_PC.load(Relaxed);
    if pc == 0 {
        return;
    }
    match LIVE.lookup(pc) {
        // Recorded once per load (consecutive hits on one load are alike).
        Some(hit) if LAST_ID.swap(hit.id().get(), Relaxed) != hit.id().get() => {
            let n = RECORDED.fetch_add(1, Relaxed);
            if n < RECORDS {
                RECORD_ID[n].store(hit.id().get(), Relaxed);
                RECORD_PC[n].store(pc, Relaxed);
                RECORD_ADDRESS[n].store(hit.link_address(), Relaxed);
            }
        }
        Some(_) => {}
        None => {
            CYCLING_MISSES.fetch_add(1, Relaxed);
        }
    }
    CYCLING_LOOKUPS.fetch_add(1, Relaxed);
}

fn set_sigusr1(action: libc::sighandler_t) {
    // SAFETY: an all-zero `sigaction` is valid (empty mask, no flags).
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = action;
    sa.sa_flags = libc::SA_RESTART;
    // SAFETY: a fully initialized `sigaction`; the handler is
    // async-signal-safe (or SIG_IGN).
    let installed = unsafe { libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()) };
    assert_eq!(installed, 0);
}

#[test]
fn lookups_in_a_signal_handler_while_another_thread_loads_and_unloads() {
    let _serial = serial();
    let (Some(staying), Some(cycling)) = (
        TempLibrary::new(b"libstaying.so"),
        TempLibrary::new(b"libcycling.so"),
    ) else {
        return;
    };
    let stays = staying.open();
    LIVE.refresh();
    let staying_pc = stays.symbol(c"adler32_z");
    STAYING_ID.store(LIVE.lookup(staying_pc).unwrap().id().get(), Relaxed);
    STAYING_PC.store(staying_pc, Relaxed);
    let expected_link_address = symbol_address(&cycling.path, "adler32_z");
    set_sigusr1((on_sigusr1 as extern "C" fn(c_int) as *const ()).addr());

    // The signalled thread: signals itself as fast as it can, and the
    // writer (the test thread) every few rounds.
    static DONE: AtomicBool = AtomicBool::new(false);
    // SAFETY: pthread_self has no preconditions.
    let writer = unsafe { libc::pthread_self() };
    let signaller = std::thread::spawn(move || {
        let mut round = 0_u64;
        while !DONE.load(Relaxed) {
            // SAFETY: signalling a live thread of this process (this one, or the writer, which
            // joins us before it returns), whose SIGUSR1 handler is installed.
            unsafe {
                libc::pthread_kill(libc::pthread_self(), libc::SIGUSR1);
                if round.is_multiple_of(8) {
                    libc::pthread_kill(writer, libc::SIGUSR1);
                }
            }
            round += 1;
        }
    });

    let cycles = if cfg!(debug_assertions) { 150 } else { 400 };
    // Each load's id and the pc the handler was given for it.
    let mut loads = std::collections::BTreeMap::new();
    for _ in 0..cycles {
        let handle = cycling.open();
        let refresh = LIVE.refresh();
        let loaded = added_at(&refresh, &cycling.path).clone();
        let pc = handle.symbol(c"adler32_z");
        loads.insert(loaded.id(), pc);
        CYCLING_PC.store(pc, Relaxed);
        // Give the handler a moment to see this load.
        let start = std::time::Instant::now();
        while LAST_ID.load(Relaxed) != loaded.id().get() && start.elapsed().as_millis() < 20 {
            std::thread::yield_now();
        }
        // The pc goes stale with the close. A handler that read it just
        // before this store may still look it up after the library is
        // mapped again, at another base: it then hits the new load at
        // another offset, rightly (checked below).
        CYCLING_PC.store(0, Relaxed);
        handle.close();
        let refresh = LIVE.refresh();
        assert_eq!(refresh.removed.len(), 1);
    }
    DONE.store(true, Relaxed);
    signaller.join().unwrap();
    set_sigusr1(libc::SIG_IGN);

    let handled = HANDLED.load(Relaxed);
    let recorded = RECORDED.load(Relaxed).min(RECORDS);
    println!(
        "{handled} signals; {} lookups in the cycling library over {cycles} loads: {} misses, hits on {recorded} loads",
        CYCLING_LOOKUPS.load(Relaxed),
        CYCLING_MISSES.load(Relaxed)
    );
    assert_eq!(
        STAYING_WRONG.load(Relaxed),
        0,
        "the staying library was missed or misnamed"
    );
    assert!(handled > 1000, "only {handled} signals handled");
    assert!(recorded > 0, "no hit on the cycling library");
    // Every hit names a load of the cycling library: its path, its build
    // id, the right link-time address.
    let build_id = readelf_build_id(&cycling.path).flatten();
    let mut seen = std::collections::BTreeSet::new();
    let mut stale = 0;
    for i in 0..recorded {
        let id = ModuleId::from_raw(RECORD_ID[i].load(Relaxed));
        let pc = RECORD_PC[i].load(Relaxed);
        let address = RECORD_ADDRESS[i].load(Relaxed);
        let object = LIVE
            .object(id)
            .unwrap_or_else(|| panic!("hit #{i}: {id} unknown"));
        let Some(&given) = loads.get(&id) else {
            panic!("hit #{i}: {id} is not a load of the cycling library");
        };
        assert_eq!(object.info().path(), cycling.path);
        if let Some(build_id) = &build_id {
            assert_eq!(
                object.info().build_id().map(ToString::to_string).as_ref(),
                Some(build_id)
            );
        }
        // The hit's object covers the pc, and the link-time address is
        // the pc less that object's bias.
        assert!(
            object
                .info()
                .segments()
                .iter()
                .any(|s| s.range.contains(&pc)),
            "hit #{i}: {pc:#x} is outside {id}"
        );
        assert_eq!(address, pc - object.info().bias(), "hit #{i}");
        if pc == given {
            assert_eq!(address, expected_link_address, "hit #{i}");
        } else {
            stale += 1;
        }
        seen.insert(id);
    }
    println!("{stale} of the hits on a stale pc");
    assert!(
        stale * 10 <= recorded,
        "{stale} of {recorded} hits on a stale pc"
    );
    // The writer waits (briefly) for a hit on each load.
    assert!(
        seen.len() * 10 >= cycles * 9,
        "hits on {} of {cycles} loads only",
        seen.len()
    );
    assert_eq!(LIVE.forget_unloaded(), cycles);
    stays.close();
}

/// `PT_GNU_EH_FRAME` of `file` (its `p_vaddr`, `p_memsz`), read with the
/// `object` crate.
fn file_eh_frame_hdr(file: &Path) -> Option<(u64, u64)> {
    use object::elf::{FileHeader64, PT_GNU_EH_FRAME};
    use object::read::elf::{FileHeader, ProgramHeader};
    let data = std::fs::read(file).ok()?;
    let header = FileHeader64::<object::Endianness>::parse(&*data).ok()?;
    let endian = header.endian().ok()?;
    header
        .program_headers(endian, &*data)
        .ok()?
        .iter()
        .find(|h| h.p_type(endian) == PT_GNU_EH_FRAME)
        .map(|h| (h.p_vaddr(endian), h.p_memsz(endian)))
}

/// Issue 18: every object's `.eh_frame_hdr`, read from its program headers
/// in memory, agrees with `_dl_find_object`'s `dlfo_eh_frame` (where glibc
/// has it), with `PT_GNU_EH_FRAME` read from the file by the `object`
/// crate (every object with a file: not the vDSO), and with
/// `LoadedObjects::unindexed`; the image span covers every segment.
#[test]
fn eh_frame_hdr_agrees_with_dl_find_object_and_the_file() {
    let _serial = serial();
    let objects = LoadedObjects::new();
    objects.refresh();
    let glibc = dl_find_object_fn();
    let page = page_size();
    let (mut by_glibc, mut by_file, mut vdso) = (0, 0, false);
    for o in objects.objects() {
        let info = o.info();
        let hdr = info.eh_frame_hdr();
        let image = info.image();
        assert!(
            image.start % page == 0 && image.end % page == 0,
            "{image:x?}"
        );
        for s in info.segments() {
            assert!(image.start <= s.range.start && s.range.end <= image.end);
        }
        let pc = info.segments()[0].range.start;
        if let Some(f) = glibc {
            // SAFETY: all-zero is a valid `DlFindObject`.
            let mut result: DlFindObject = unsafe { std::mem::zeroed() };
            // SAFETY: as in `dl_find_object`.
            if unsafe { f(std::ptr::without_provenance_mut(pc as usize), &mut result) } == 0 {
                let theirs = (!result.eh_frame.is_null()).then(|| result.eh_frame.addr() as u64);
                assert_eq!(
                    hdr.as_ref().map(|r| r.start),
                    theirs,
                    "{}",
                    info.path().display()
                );
                let fallback = LoadedObjects::unindexed(pc).expect("the crate finds it too");
                assert_eq!(fallback.eh_frame_hdr, theirs);
                assert!(fallback.map.start <= info.segments()[0].range.start);
                by_glibc += 1;
            }
        }
        if info.kind() == latchtree::ObjectKind::Vdso {
            vdso = true;
            let hdr = hdr.expect("the vDSO has an .eh_frame_hdr");
            // SAFETY: the vDSO is mapped for the whole process; the range is
            // inside a readable segment.
            let version = unsafe { *(hdr.start as *const u8) };
            assert_eq!(version, 1, "eh_frame_hdr version");
        } else if let Some((vaddr, memsz)) = file_eh_frame_hdr(info.path()) {
            let want = info.bias() + vaddr..info.bias() + vaddr + memsz;
            assert_eq!(hdr, Some(want), "{}", info.path().display());
            by_file += 1;
        }
    }
    eprintln!(
        "eh_frame_hdr checked against _dl_find_object for {by_glibc} objects, \
         against the file for {by_file}, vDSO seen: {vdso}"
    );
    assert!(by_file >= 2, "the program and libc at least");
    assert!(glibc.is_none() || by_glibc >= 2);
}

/// Issue 18, the constructor gap: an object `dlopen` mapped but no refresh
/// indexed yet is a miss for `lookup`, and `LoadedObjects::unindexed` (glibc's
/// `_dl_find_object`, looked up at refresh time) names it, with the bias the
/// next refresh indexes.
#[test]
fn an_object_not_yet_indexed_is_found_by_the_loader_fallback() {
    let _serial = serial();
    let Some(lib) = TempLibrary::new(b"libgap.so") else {
        return;
    };
    let objects = LoadedObjects::new();
    objects.refresh();
    let handle = lib.open();
    let pc = handle.symbol(c"inflate");
    assert!(
        objects.lookup(pc).is_none(),
        "not refreshed since the dlopen"
    );
    let Some(gap) = LoadedObjects::unindexed(pc) else {
        assert!(
            dl_find_object_fn().is_none(),
            "glibc has _dl_find_object: the fallback must find it"
        );
        eprintln!("no _dl_find_object here: the gap stays a miss");
        handle.close();
        return;
    };
    assert!(gap.map.contains(&pc));
    objects.refresh();
    let hit = objects.lookup(pc).expect("indexed by the refresh");
    assert_eq!(gap.map.start, hit.bias(), "libz's first PT_LOAD is at 0");
    let info = objects.object(hit.id()).unwrap().info().clone();
    assert_eq!(gap.eh_frame_hdr, info.eh_frame_hdr().map(|r| r.start));
    // What a sample ring keeps of it (plain numbers), rebuilt on a normal
    // thread, still names the object.
    let stored = (gap.map.start, gap.map.end, gap.eh_frame_hdr);
    let again = UnindexedObject::new(stored.0..stored.1, stored.2);
    assert_eq!(again, gap);
    assert!(again.matches(&info));
    let elsewhere = UnindexedObject::new(stored.0 + 0x1000..stored.1, stored.2);
    assert!(!elsewhere.matches(&info));
    handle.close();
    objects.refresh();
    assert!(objects.lookup(pc).is_none() && LoadedObjects::unindexed(pc).is_none());
}

/// Issue 18: a per-object payload, built at refresh time, read in place
/// through a handler section, and (issue 25) dropped by the refresh that
/// finds the object unloaded, its info kept until forgotten.
#[test]
fn payloads_are_built_per_object_and_dropped_at_unload() {
    static BUILT: AtomicUsize = AtomicUsize::new(0);
    static DROPPED: AtomicUsize = AtomicUsize::new(0);
    struct Unwinder(PathBuf);
    impl Drop for Unwinder {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, Relaxed);
        }
    }
    let _serial = serial();
    let Some(lib) = TempLibrary::new(b"libpayload.so") else {
        return;
    };
    let objects: LoadedObjects<Unwinder> = LoadedObjects::with_payload(|info| {
        BUILT.fetch_add(1, Relaxed);
        Unwinder(info.path().to_owned())
    });
    let handle = lib.open();
    let first = objects.refresh();
    assert_eq!(
        BUILT.load(Relaxed),
        first.added.len(),
        "one payload per indexed object"
    );
    let pc = handle.symbol(c"inflate");
    let id = {
        let section = objects.handler_section();
        let object = section.lookup(pc).unwrap();
        assert_eq!(object.payload().0, lib.path);
        assert_eq!(object.info().path(), lib.path);
        assert!(object.info().eh_frame_hdr().is_some() && object.info().image().contains(&pc));
        let [a, b] = section.lookup_many([pc, 0]);
        assert_eq!(
            (a.map(|o| o.hit().id()), b.is_none()),
            (Some(object.hit().id()), true)
        );
        object.hit().id()
    };
    handle.close();
    objects.refresh();
    // Issue 25: the payload goes at unload (no section or guard open), the
    // info stays for late samples until forgotten.
    assert_eq!(
        DROPPED.load(Relaxed),
        1,
        "dropped by the refresh that found the object unloaded"
    );
    let unloaded = objects.object(id).expect("resolvable until forgotten");
    assert!(!unloaded.is_loaded() && unloaded.info().path() == lib.path);
    assert!(objects.forget(id));
    assert!(objects.object(id).is_none());
    assert_eq!(DROPPED.load(Relaxed), 1, "dropped once");
    drop(objects);
    assert_eq!(
        DROPPED.load(Relaxed),
        BUILT.load(Relaxed),
        "every payload dropped once"
    );
}

// ------------------------------------------------------------- issue 25

/// The `.eh_frame` section of `file` (its address, its size), read with
/// the `object` crate.
fn file_eh_frame(file: &Path) -> Option<(u64, u64)> {
    use object::ObjectSection;
    let data = std::fs::read(file).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let s = file.section_by_name(".eh_frame")?;
    Some((s.address(), s.size()))
}

/// `ObjectInfo::eh_frame`, found in memory from the header and the
/// records, is the file's `.eh_frame` section, for every object with a
/// file; the vDSO's lies in its image.
#[test]
fn eh_frame_agrees_with_the_file() {
    let _serial = serial();
    let objects = LoadedObjects::new();
    objects.refresh();
    let mut checked = 0;
    for o in objects.objects() {
        let info = o.info();
        if info.kind() == ObjectKind::Vdso {
            let e = info.eh_frame().expect("the vDSO has an .eh_frame");
            assert!(info.image().start <= e.start && e.end <= info.image().end);
            continue;
        }
        let Some((address, size)) = file_eh_frame(info.path()) else {
            continue;
        };
        let e = info.eh_frame().expect("an .eh_frame_hdr points at it");
        // The walk ends at the terminator: the section's end, or before
        // padding the linker put after it.
        assert_eq!(e.start, info.bias() + address, "{}", info.path().display());
        assert!(
            e.end <= info.bias() + address + size && e.end + 16 > info.bias() + address + size,
            "{}: {e:x?} against {size:#x} bytes",
            info.path().display()
        );
        checked += 1;
    }
    assert!(checked >= 2, "the program and libc at least");
}

/// Issue 25, 2: a payload builder that calls back into its own
/// `LoadedObjects` (every query) no longer deadlocks the refresh.
#[test]
fn a_payload_builder_may_query_its_own_index() {
    static OBJECTS: LoadedObjects<usize> = LoadedObjects::with_payload(build);
    fn build(info: &latchtree::MappedObject<'_>) -> usize {
        let known = OBJECTS.objects().len() + OBJECTS.unloaded_count() + OBJECTS.loaded_count();
        let _ = OBJECTS.object(ModuleId::from_raw(1));
        assert!(!OBJECTS.forget(ModuleId::from_raw(u64::MAX)));
        let _ = OBJECTS.stats();
        known + info.segments().len()
    }
    let _serial = serial();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let refresh = OBJECTS.refresh();
        done_tx.send(refresh.added.len()).unwrap();
    });
    let added = done_rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("refresh deadlocked in a builder that queries its index");
    assert!(added >= 2);
    assert_eq!(OBJECTS.loaded_count(), added);
}

/// The first bytes of the page holding `addr`, if it is mapped (`mincore`
/// says so without touching it).
fn is_mapped(addr: u64) -> bool {
    let page = page_size();
    let mut vec = [0u8; 1];
    // SAFETY: `mincore` only looks the page up; `vec` holds one entry.
    let r = unsafe {
        libc::mincore(
            std::ptr::without_provenance_mut((addr & !(page - 1)) as usize),
            page as usize,
            vec.as_mut_ptr(),
        )
    };
    r == 0
}

/// What the builder below saw for the library it `dlclose`d.
static CLOSED_IN_BUILD: Mutex<Option<(bool, u8)>> = Mutex::new(None);
/// The `dlopen` handle that builder closes, and the path it is for.
static TO_CLOSE: Mutex<Option<(usize, PathBuf)>> = Mutex::new(None);

/// Issue 25, 6: the library is `dlclose`d (the last user reference) while
/// its payload is built; the refresh's own loader reference keeps it
/// mapped, so a builder that copies its tables reads mapped memory.
#[test]
fn a_payload_builder_reads_a_library_closed_meanwhile() {
    fn build(info: &latchtree::MappedObject<'_>) {
        let mut to_close = TO_CLOSE.lock().unwrap();
        if to_close.as_ref().is_none_or(|(_, p)| p != info.path()) {
            return;
        }
        let (handle, _) = to_close.take().unwrap();
        let handle = std::ptr::with_exposed_provenance_mut(handle);
        // SAFETY: the test's own handle, closed once; nothing of the
        // library is used through it afterwards.
        let closed = unsafe { libc::dlclose(handle) };
        assert_eq!(closed, 0);
        let hdr = info.eh_frame_hdr().unwrap();
        let mapped = is_mapped(hdr.start);
        // The refresh's own reference keeps the header mapped: a safe slice.
        let version = if mapped {
            info.eh_frame_hdr_bytes().map_or(0, |b| b[0])
        } else {
            0
        };
        *CLOSED_IN_BUILD.lock().unwrap() = Some((mapped, version));
    }
    let _serial = serial();
    let Some(lib) = TempLibrary::new(b"libclosedinbuild.so") else {
        return;
    };
    let objects: LoadedObjects<()> = LoadedObjects::with_payload(build);
    let handle = lib.open();
    let pc = handle.symbol(c"inflate");
    *TO_CLOSE.lock().unwrap() = Some((handle.0.expose_provenance(), lib.path.clone()));
    // Closed by the builder (`Handle` closes only through `close`).
    let _ = handle;
    objects.refresh();
    assert_eq!(
        *CLOSED_IN_BUILD.lock().unwrap(),
        Some((true, 1)),
        "the builder saw the library unmapped (or never ran for it)"
    );
    // The refresh let go of it after its batch: unloaded now, and the next
    // refresh takes it out.
    assert!(!is_mapped(pc), "the refresh kept a reference");
    objects.refresh();
    assert!(objects.lookup(pc).is_none());
}

/// Issue 25, 4: after `dlclose` and before the next refresh a handler
/// section still finds the object, and its in-place tables are unmapped:
/// the docs say so, and a payload that copied them at build time (while
/// the refresh held the object) is what a handler reads.
#[test]
fn after_dlclose_a_handler_reads_the_payloads_copy_not_the_unmapped_tables() {
    struct Tables {
        eh_frame_hdr: Vec<u8>,
    }
    fn build(object: &latchtree::MappedObject<'_>) -> Tables {
        // The refresh holds the object mapped while it builds.
        let bytes = object.eh_frame_hdr_bytes().unwrap_or_default();
        Tables {
            eh_frame_hdr: bytes.to_vec(),
        }
    }
    let _serial = serial();
    let Some(lib) = TempLibrary::new(b"libcopied.so") else {
        return;
    };
    let objects: LoadedObjects<Tables> = LoadedObjects::with_payload(build);
    let handle = lib.open();
    let pc = handle.symbol(c"inflate");
    objects.refresh();
    handle.close();
    let section = objects.handler_section();
    let object = section.lookup(pc).expect("indexed until the next refresh");
    let hdr = object.info().eh_frame_hdr().unwrap();
    assert!(!is_mapped(hdr.start), "dlclose unmapped the library");
    assert_eq!(object.payload().eh_frame_hdr.first(), Some(&1), "the copy");
    assert_eq!(
        object.payload().eh_frame_hdr.len() as u64,
        hdr.end - hdr.start
    );
    drop(section);
    objects.refresh();
    assert!(objects.lookup(pc).is_none());
}

/// A payload whose `Drop` calls back into its `LoadedObjects`: the refresh
/// that finds its object unloaded drops it after its own locks (review of
/// issue 25's fix: it ran under the state lock and deadlocked).
#[test]
fn a_payload_drop_may_query_its_own_index() {
    static OBJECTS: LoadedObjects<Probe> = LoadedObjects::with_payload(|_| Probe);
    static DROPS_SAW: AtomicUsize = AtomicUsize::new(0);
    struct Probe;
    impl Drop for Probe {
        fn drop(&mut self) {
            let seen = OBJECTS.objects().len() + OBJECTS.unloaded_count();
            DROPS_SAW.fetch_add(seen.min(1), Relaxed);
        }
    }
    let _serial = serial();
    let Some(lib) = TempLibrary::new(b"libdropquery.so") else {
        return;
    };
    let handle = lib.open();
    OBJECTS.refresh();
    handle.close();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        OBJECTS.refresh();
        done_tx.send(()).unwrap();
    });
    done_rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("refresh deadlocked in a payload's Drop that queries its index");
    assert_eq!(
        DROPS_SAW.load(Relaxed),
        1,
        "the unloaded object's payload dropped once"
    );
}

// ------------------------------------------------------------- issue 42

/// The file's bytes of `section`, if it has one.
fn file_section(file: &Path, section: &str) -> Option<Vec<u8>> {
    use object::ObjectSection;
    let data = std::fs::read(file).ok()?;
    let file = object::File::parse(&*data).ok()?;
    Some(file.section_by_name(section)?.data().ok()?.to_vec())
}

/// What the builder below copied, per path: `.eh_frame_hdr` and
/// `.eh_frame` bytes, whether a writable segment was refused, and whether
/// the object was held.
#[derive(Debug, Default)]
struct Copied {
    eh_frame_hdr: Vec<u8>,
    eh_frame: Vec<u8>,
    writable_refused: bool,
    held: bool,
}

/// The builder gets the object's unwind tables as safe slices while the
/// refresh holds it, the same bytes as the file's sections; a writable
/// segment is refused with a reason. No `unsafe` in the builder.
#[test]
fn a_payload_builder_reads_the_tables_as_slices() {
    fn build(object: &MappedObject<'_>) -> Copied {
        let writable = object.segments().iter().find(|s| s.is_writable());
        let writable_refused = writable.is_none_or(|s| {
            let refused = object.read(s.range.clone());
            refused == Err(ReadError::NotReadOnly(s.range.clone()))
        });
        Copied {
            eh_frame_hdr: object.eh_frame_hdr_bytes().unwrap_or_default().to_vec(),
            eh_frame: object.eh_frame_bytes().unwrap_or_default().to_vec(),
            writable_refused,
            held: object.is_held(),
        }
    }
    let _serial = serial();
    let Some(lib) = TempLibrary::new(b"libslices.so") else {
        return;
    };
    let objects: LoadedObjects<Copied> = LoadedObjects::with_payload(build);
    let handle = lib.open();
    let pc = handle.symbol(c"inflate");
    objects.refresh();
    let mut checked = 0;
    for object in objects.objects() {
        let (info, copied) = (object.info(), object.payload().unwrap());
        assert!(copied.held && copied.writable_refused, "{copied:?}");
        if let Some(hdr) = info.eh_frame_hdr() {
            assert_eq!(copied.eh_frame_hdr.len() as u64, hdr.end - hdr.start);
            assert_eq!(copied.eh_frame_hdr[0], 1, "version 1");
        }
        if info.kind() == ObjectKind::Vdso {
            continue;
        }
        let Some(eh_frame) = file_section(info.path(), ".eh_frame") else {
            continue;
        };
        // The walk ends at the terminator: the section, or less its padding.
        assert!(!copied.eh_frame.is_empty(), "{}", info.path().display());
        assert_eq!(
            copied.eh_frame[..],
            eh_frame[..copied.eh_frame.len()],
            "{}",
            info.path().display()
        );
        checked += 1;
    }
    assert!(checked >= 3, "the program, libc and the library at least");
    let id = objects.lookup(pc).unwrap().id();
    let copied = objects.object(id).unwrap();
    let hdr = file_section(&lib.path, ".eh_frame_hdr").unwrap();
    assert_eq!(copied.payload().unwrap().eh_frame_hdr, hdr);
    handle.close();
    objects.refresh();
}

/// `ObjectRef::payload` on a normal thread: the payload of a loaded
/// object (kept alive by the `ObjectRef`, also past the unload), none for
/// an unloaded one, none in a `Refresh`'s report.
#[test]
fn object_refs_carry_the_payload_of_loaded_objects() {
    static ALIVE: AtomicUsize = AtomicUsize::new(0);
    struct Named(PathBuf);
    impl Drop for Named {
        fn drop(&mut self) {
            ALIVE.fetch_sub(1, Relaxed);
        }
    }
    let _serial = serial();
    let Some(lib) = TempLibrary::new(b"libpayloadref.so") else {
        return;
    };
    let objects: LoadedObjects<Named> = LoadedObjects::with_payload(|object| {
        ALIVE.fetch_add(1, Relaxed);
        Named(object.path().to_owned())
    });
    let handle = lib.open();
    let pc = handle.symbol(c"inflate");
    let first = objects.refresh();
    let id = objects.lookup(pc).unwrap().id();
    let reported = first.added.iter().find(|o| o.id() == id).unwrap();
    assert!(
        reported.is_loaded() && reported.payload().is_none(),
        "a report keeps no payload"
    );
    let loaded = objects.object(id).unwrap();
    assert_eq!(loaded.payload().map(|p| &p.0), Some(&lib.path));
    assert!(
        objects
            .objects()
            .iter()
            .all(|o| o.payload().is_some_and(|p| p.0 == o.info().path()))
    );
    handle.close();
    let before = ALIVE.load(Relaxed);
    let second = objects.refresh();
    assert_eq!(
        second.removed.iter().map(ObjectRef::id).collect::<Vec<_>>(),
        [id]
    );
    // The `ObjectRef` made while it was loaded keeps the payload.
    assert_eq!(ALIVE.load(Relaxed), before);
    assert_eq!(loaded.payload().map(|p| &p.0), Some(&lib.path));
    let unloaded = objects.object(id).unwrap();
    assert!(!unloaded.is_loaded() && unloaded.payload().is_none());
    drop(loaded);
    assert_eq!(
        ALIVE.load(Relaxed),
        before - 1,
        "dropped with the last ObjectRef"
    );
    drop(first);
    drop(objects);
    assert_eq!(ALIVE.load(Relaxed), 0);
}

/// Every real object has an `.eh_frame` or says why not; a refresh reports
/// none for objects that have one (this process's all do).
#[test]
fn try_eh_frame_gives_a_reason_and_a_refresh_reports_it() {
    let _serial = serial();
    let objects = LoadedObjects::new();
    let refresh = objects.refresh();
    for object in objects.objects() {
        let info = object.info();
        match info.try_eh_frame() {
            Ok(range) => assert_eq!(info.eh_frame(), Some(range)),
            Err(why) => {
                assert_eq!(info.eh_frame(), None);
                let reported = ProblemKind::NoEhFrame(why);
                assert!(
                    refresh
                        .problems
                        .iter()
                        .any(|p| p.path() == info.path() && *p.kind() == reported),
                    "{}: {why} not reported",
                    info.path().display()
                );
            }
        }
    }
    let none = refresh
        .problems
        .iter()
        .filter(|p| matches!(p.kind(), ProblemKind::NoEhFrame(_)));
    assert_eq!(none.count(), 0, "{:#?}", refresh.problems);
    assert!(refresh.skipped.is_empty());
    let _ = EhFrameError::NoHeader.to_string();
}
