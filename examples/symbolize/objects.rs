//! The loaded ELF objects of this process and their symbol tables, kept in a
//! [`latchtree::AddrIndex`] that follows `dlopen` and `dlclose`.
//!
//! Shared by `examples/symbolize` and `tests/symbolize_nm.rs` (which includes
//! this file with `#[path]`), so it holds nothing that only one of them needs.
//!
//! # What goes into the index
//!
//! One module per object that `dl_iterate_phdr` reports, with one range per
//! non-empty `PT_LOAD` segment: `[bias + p_vaddr, bias + p_vaddr + p_memsz)`,
//! **exactly** as the program header says, not rounded out to pages. Rounding
//! would claim padding bytes in which no symbol lives, and two segments of one
//! object may share a page when the runtime page size is larger than the
//! linker's `max-page-size` (4 KiB-aligned objects on 16/64 KiB-page kernels),
//! so rounded ranges could overlap, which the index rightly rejects. Segments
//! of one object that overlap anyway (a malformed object) are merged.
//!
//! The module value is an [`Arc<Module>`]: name, load bias, segments and the
//! symbol table read with the `object` crate from the file on disk
//! (`/proc/self/exe` for the main program; the vDSO from memory). A file that
//! cannot be read or parsed gives a module with no symbols, never a panic.
//!
//! Symbol addresses in an ELF file are link-time addresses; the loader adds
//! the object's *bias* (`dlpi_addr`). So `address - bias` is both the
//! "offset within the module" and the key for the symbol table's binary
//! search, and it is what `nm` prints for the same file.

use latchtree::{AddrIndex, AddrIndexError, ModuleId};
use object::{Object, ObjectSymbol, SymbolKind};
use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, c_int, c_void};
use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::{mem, ptr, slice};

/// The dynamic loader's global counters of objects loaded and unloaded so far
/// (`dlpi_adds`, `dlpi_subs`). If neither moved, the set of objects did not
/// change, and a refresh can skip the full scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LoadCounters {
    /// Objects loaded since the process started.
    pub(crate) adds: u64,
    /// Objects unloaded since the process started.
    pub(crate) subs: u64,
}

/// One object as `dl_iterate_phdr` reports it.
#[derive(Debug)]
struct LoadedObject {
    /// `dlpi_name`: empty for the main program.
    loader_name: String,
    /// `dlpi_addr`: what the loader added to every link-time address.
    bias: u64,
    /// The non-empty `PT_LOAD` segments, at run-time addresses.
    segments: Vec<Range<u64>>,
    /// Run-time address and file size of the `PT_LOAD` that maps file offset
    /// 0, i.e. where the ELF image itself is in memory (used for the vDSO).
    image: Option<(u64, u64)>,
}

/// What one `dl_iterate_phdr` pass collects.
#[derive(Debug, Default)]
struct Scan {
    objects: Vec<LoadedObject>,
    counters: Option<LoadCounters>,
    /// Only read the counters (from the first object) and stop.
    counters_only: bool,
}

/// Reads `dlpi_adds`/`dlpi_subs` if the loader's `dl_phdr_info` has them.
///
/// # Safety
/// `info` must be the pointer `dl_iterate_phdr` passed to its callback, and
/// `size` the size it passed with it, during that callback.
unsafe fn counters_of(info: *const libc::dl_phdr_info, size: usize) -> Option<LoadCounters> {
    let needed =
        mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + mem::size_of::<libc::c_ulonglong>();
    if size < needed {
        return None;
    }
    // SAFETY: `size` says the loader's struct extends past `dlpi_subs`, and
    // the caller guarantees `info` points at it for the callback's duration.
    // Raw place reads: no reference to the (possibly shorter) whole struct.
    let (adds, subs) = unsafe { ((*info).dlpi_adds, (*info).dlpi_subs) };
    Some(LoadCounters { adds, subs })
}

/// The `dl_iterate_phdr` callback: copies out what it needs and returns. It
/// runs with the loader's lock held, so it reads no files (that happens
/// after the scan) and cannot panic except on allocation failure.
///
/// # Safety
/// Only to be called by `dl_iterate_phdr`, with `data` the `*mut Scan` that
/// [`scan`] passed to it.
unsafe extern "C" fn scan_one(
    info: *mut libc::dl_phdr_info,
    size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is the `&mut Scan` that `scan` passed to
    // dl_iterate_phdr, which calls back synchronously on the same thread
    // while `scan` is blocked in it; nothing else uses the `Scan` meanwhile.
    let scan = unsafe { &mut *data.cast::<Scan>() };
    if scan.counters.is_none() {
        // SAFETY: `info` and `size` come straight from dl_iterate_phdr.
        scan.counters = unsafe { counters_of(info, size) };
    }
    if scan.counters_only {
        return 1; // non-zero stops the iteration
    }
    // SAFETY: `info` is valid for the callback; these four fields are the
    // first of `dl_phdr_info` and present in every version of it (`size`
    // covers at least them). Raw place reads, no reference to the struct.
    let (bias, name, phdr, phnum) = unsafe {
        (
            (*info).dlpi_addr,
            (*info).dlpi_name,
            (*info).dlpi_phdr,
            (*info).dlpi_phnum,
        )
    };
    let loader_name = if name.is_null() {
        String::new()
    } else {
        // SAFETY: `dlpi_name` is a NUL-terminated string owned by the loader
        // that lives as long as the object stays loaded, which it does while
        // the loader lock is held for this callback. We copy it out.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    };
    let headers: &[libc::Elf64_Phdr] = if phdr.is_null() || phnum == 0 {
        &[]
    } else {
        // SAFETY: `dlpi_phdr` points at the object's `dlpi_phnum` program
        // headers, mapped with the object and unchanged while it is loaded
        // (so for this callback); the slice does not outlive the callback.
        unsafe { slice::from_raw_parts(phdr, usize::from(phnum)) }
    };
    let mut segments = Vec::new();
    let mut image = None;
    for h in headers
        .iter()
        .filter(|h| h.p_type == libc::PT_LOAD && h.p_memsz > 0)
    {
        let Some(start) = bias.checked_add(h.p_vaddr) else {
            continue;
        };
        let Some(end) = start.checked_add(h.p_memsz) else {
            continue;
        };
        segments.push(start..end);
        if h.p_offset == 0 {
            image = Some((start, h.p_filesz));
        }
    }
    if !segments.is_empty() {
        scan.objects.push(LoadedObject {
            loader_name,
            bias,
            segments,
            image,
        });
    }
    0
}

/// One pass of `dl_iterate_phdr`.
fn scan(counters_only: bool) -> Scan {
    let mut scan = Scan {
        counters_only,
        ..Scan::default()
    };
    // `scan_one` matches the callback type dl_iterate_phdr expects and never
    // unwinds across the FFI boundary (no panicking code).
    // SAFETY: it treats `data` as the `*mut Scan` passed here, exclusively
    // borrowed and alive until dl_iterate_phdr returns.
    unsafe { libc::dl_iterate_phdr(Some(scan_one), ptr::from_mut(&mut scan).cast()) };
    scan
}

/// The loader's counters right now, from one short `dl_iterate_phdr` pass;
/// `None` if this loader does not report them.
pub(crate) fn load_counters() -> Option<LoadCounters> {
    scan(true).counters
}

/// One defined function or data symbol.
#[derive(Debug)]
pub(crate) struct Symbol {
    /// Link-time address (`st_value`): compare with `address - bias`.
    pub(crate) start: u64,
    /// `st_size`; 0 if the file does not say.
    pub(crate) size: u64,
    /// The raw (mangled) name, as `nm` prints it.
    pub(crate) name: Box<str>,
}

impl Symbol {
    /// The demangled name for Rust legacy-mangled symbols, else the raw one.
    pub(crate) fn display_name(&self) -> String {
        demangle(&self.name).unwrap_or_else(|| self.name.to_string())
    }
}

/// A sorted table of defined symbols, searched by link-time address.
#[derive(Debug, Default)]
pub(crate) struct SymbolTable {
    symbols: Vec<Symbol>,
}

impl SymbolTable {
    /// Reads the defined function and data symbols of an ELF image, from
    /// `.symtab` and `.dynsym` (stripped system libraries have only the
    /// latter). One symbol per address: of aliases, the one with the largest
    /// size, then the fewest leading underscores (`malloc` over
    /// `__libc_malloc`), then the shortest name.
    pub(crate) fn parse(data: &[u8]) -> object::Result<Self> {
        let file = object::File::parse(data)?;
        let mut symbols: Vec<Symbol> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| {
                s.is_definition()
                    && matches!(s.kind(), SymbolKind::Text | SymbolKind::Data)
                    && s.address() != 0
            })
            .filter_map(|s| {
                let name = s.name().ok().filter(|n| !n.is_empty())?;
                Some(Symbol {
                    start: s.address(),
                    size: s.size(),
                    name: name.into(),
                })
            })
            .collect();
        let underscores = |s: &Symbol| s.name.bytes().take_while(|&b| b == b'_').count();
        symbols.sort_unstable_by(|a, b| {
            (a.start.cmp(&b.start))
                .then(b.size.cmp(&a.size))
                .then(underscores(a).cmp(&underscores(b)))
                .then(a.name.len().cmp(&b.name.len()))
                .then(a.name.cmp(&b.name))
        });
        symbols.dedup_by(|later, earlier| later.start == earlier.start);
        Ok(SymbolTable { symbols })
    }

    /// Number of symbols.
    pub(crate) fn len(&self) -> usize {
        self.symbols.len()
    }

    /// The symbol containing the link-time address `offset`, and the offset
    /// into it. A symbol of unknown size (0) extends to the next symbol.
    pub(crate) fn find(&self, offset: u64) -> Option<(&Symbol, u64)> {
        let i = self.symbols.partition_point(|s| s.start <= offset);
        let symbol = self.symbols.get(i.checked_sub(1)?)?;
        let delta = offset - symbol.start;
        (symbol.size == 0 || delta < symbol.size).then_some((symbol, delta))
    }
}

/// A loaded object, the value the index holds for each module.
#[derive(Debug)]
pub(crate) struct Module {
    /// The program's path for the main executable, else the loader's name.
    pub(crate) name: String,
    /// What the loader added to every link-time address of this object.
    pub(crate) bias: u64,
    /// The `PT_LOAD` segments registered in the index.
    pub(crate) segments: Vec<Range<u64>>,
    /// The object's symbols (empty if its file could not be read).
    pub(crate) symbols: SymbolTable,
    /// Where the symbols came from, or why there are none.
    pub(crate) symbol_source: String,
}

impl Module {
    /// Reads the object's symbols; never fails (see `symbol_source`).
    fn load(object: LoadedObject) -> Module {
        let vdso = vdso_base();
        let is_vdso = vdso.is_some() && object.image.map(|(at, _)| at) == vdso;
        let (name, symbols, symbol_source) = if is_vdso {
            let name = if object.loader_name.is_empty() {
                "[vdso]".to_owned()
            } else {
                object.loader_name.clone()
            };
            let (symbols, source) = match object.image {
                Some((at, len)) => vdso_symbols(at, len),
                None => (SymbolTable::default(), "no image".to_owned()),
            };
            (name, symbols, source)
        } else if object.loader_name.is_empty() {
            let name = std::env::current_exe()
                .map_or_else(|_| "[main program]".to_owned(), |p| p.display().to_string());
            let (symbols, source) = file_symbols("/proc/self/exe");
            (name, symbols, source)
        } else {
            let (symbols, source) = file_symbols(&object.loader_name);
            (object.loader_name.clone(), symbols, source)
        };
        Module {
            name,
            bias: object.bias,
            segments: merge_overlaps(object.segments),
            symbols,
            symbol_source,
        }
    }

    /// The last path component of the name.
    pub(crate) fn short_name(&self) -> &str {
        self.name.rsplit('/').next().unwrap_or(&self.name)
    }
}

/// The symbols of the file at `path`, and a note on where they came from.
fn file_symbols(path: &str) -> (SymbolTable, String) {
    match std::fs::read(path)
        .map_err(|e| e.to_string())
        .and_then(|data| SymbolTable::parse(&data).map_err(|e| e.to_string()))
    {
        Ok(table) => (table, path.to_owned()),
        Err(e) => (SymbolTable::default(), format!("no symbols ({path}: {e})")),
    }
}

/// Where the kernel mapped the vDSO's ELF image (`AT_SYSINFO_EHDR`).
fn vdso_base() -> Option<u64> {
    // SAFETY: getauxval only reads the auxiliary vector; it returns 0 for an
    // absent entry.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    (base != 0).then_some(base)
}

/// The vDSO has no file: parse its image where the kernel mapped it.
///
/// The image's section headers (which hold the symbol table's location) lie
/// past the `PT_LOAD` segment's file size but inside its last page, so the
/// slice runs to the end of that page.
fn vdso_symbols(at: u64, file_size: u64) -> (SymbolTable, String) {
    // SAFETY: sysconf only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = u64::try_from(page).ok().filter(|p| p.is_power_of_two());
    let len = page.and_then(|p| Some(file_size.checked_add(p - 1)? & !(p - 1)));
    let (Some(page), Some(len)) = (page, len) else {
        return (
            SymbolTable::default(),
            "no symbols (page size unknown)".to_owned(),
        );
    };
    let (Ok(at), Ok(len), true) = (
        usize::try_from(at),
        usize::try_from(len),
        at.is_multiple_of(page),
    ) else {
        return (
            SymbolTable::default(),
            "no symbols (vDSO address unusable)".to_owned(),
        );
    };
    // `at` is the vDSO's `AT_SYSINFO_EHDR` (checked by the caller),
    // page-aligned (checked above), where the kernel maps the `PT_LOAD`
    // segment at file offset 0 readable for the life of the process and never
    // writes it; mappings are whole pages, so the `len` bytes (its file size
    // rounded up to a page) are mapped. The address comes from the auxiliary
    // vector, not a Rust allocation, hence exposed provenance.
    // SAFETY: so `len` bytes at `at` are readable and immutable while the
    // slice (dropped before returning) lives.
    let image = unsafe { slice::from_raw_parts(ptr::with_exposed_provenance::<u8>(at), len) };
    match SymbolTable::parse(image) {
        Ok(table) => (table, "vDSO image in memory".to_owned()),
        Err(e) => (
            SymbolTable::default(),
            format!("no symbols (vDSO image: {e})"),
        ),
    }
}

/// Merges overlapping segments (a malformed object; the index would reject
/// them as self-overlapping). Adjacent ones stay separate ranges.
fn merge_overlaps(mut segments: Vec<Range<u64>>) -> Vec<Range<u64>> {
    segments.sort_unstable_by_key(|r| r.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(segments.len());
    for r in segments {
        match merged.last_mut() {
            Some(last) if r.start < last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

/// What one [`Symbolizer::refresh`] did.
#[derive(Debug, Default)]
pub(crate) struct Refresh {
    /// The loader's counters seen by this refresh.
    pub(crate) counters: Option<LoadCounters>,
    /// False if the counters had not moved, so no scan was needed.
    pub(crate) rescanned: bool,
    /// Objects new since the last refresh, now in the index.
    pub(crate) added: Vec<(ModuleId, Arc<Module>)>,
    /// Objects gone since the last refresh, now out of the index.
    pub(crate) removed: Vec<(ModuleId, Arc<Module>)>,
    /// Objects the index refused (overlapping ranges), by name.
    pub(crate) rejected: Vec<(String, AddrIndexError)>,
}

/// An address resolved to module, offset and symbol.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// The address looked up.
    pub(crate) addr: u64,
    /// The module that contains it.
    pub(crate) id: ModuleId,
    /// The module's value.
    pub(crate) module: Arc<Module>,
}

impl Resolved {
    /// `addr - bias`: the link-time address, as `nm` and `objdump` print it.
    pub(crate) fn offset(&self) -> u64 {
        self.addr.wrapping_sub(self.module.bias)
    }

    /// The symbol containing the address and the offset into it.
    pub(crate) fn symbol(&self) -> Option<(&Symbol, u64)> {
        self.module.symbols.find(self.offset())
    }
}

impl fmt::Display for Resolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let module = format!("{} {}", self.id, self.module.short_name());
        write!(f, "{module:<26} +{:<#10x} ", self.offset())?;
        match self.symbol() {
            Some((symbol, delta)) => write!(f, "{}+{delta:#x}", symbol.display_name()),
            None => f.write_str("??"),
        }
    }
}

/// Keeps an [`AddrIndex`] in step with the process's loaded objects, and
/// resolves addresses through it. Keeps the values of removed modules, so
/// that samples recorded as `(id, address)` before an unload still resolve
/// (a long-running profiler would drop them once no pending sample names
/// them).
#[derive(Debug)]
pub(crate) struct Symbolizer<'i> {
    index: &'i AddrIndex<Arc<Module>>,
    /// Modules in the index, by `(dlpi_name, bias)`.
    live: HashMap<(String, u64), ModuleId>,
    /// Every module ever inserted, live or removed, by id number (samples
    /// store ids as plain `u64`s).
    known: HashMap<u64, (ModuleId, Arc<Module>)>,
    /// The counters at the last full scan.
    seen: Option<LoadCounters>,
}

impl<'i> Symbolizer<'i> {
    /// A symbolizer over `index`, which should be empty (it is filled by
    /// [`refresh`](Symbolizer::refresh) and owned by this symbolizer).
    pub(crate) fn new(index: &'i AddrIndex<Arc<Module>>) -> Self {
        Symbolizer {
            index,
            live: HashMap::new(),
            known: HashMap::new(),
            seen: None,
        }
    }

    /// Brings the index up to date: if the loader's counters moved (or are
    /// unknown), rescans, removes the objects that vanished and inserts the
    /// new ones, diffing by `(dlpi_name, bias)`. Removals go first, so an
    /// object loaded where another was unloaded fits.
    pub(crate) fn refresh(&mut self) -> Refresh {
        let now = load_counters();
        if now.is_some() && now == self.seen {
            return Refresh {
                counters: now,
                ..Refresh::default()
            };
        }
        let scan = scan(false);
        let mut report = Refresh {
            counters: scan.counters,
            rescanned: true,
            ..Refresh::default()
        };
        let key = |o: &LoadedObject| (o.loader_name.clone(), o.bias);
        let present: HashSet<(String, u64)> = scan.objects.iter().map(key).collect();

        let gone: Vec<(String, u64)> = self
            .live
            .keys()
            .filter(|k| !present.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            let Some(id) = self.live.remove(&key) else {
                continue;
            };
            if self.index.remove(id).is_some()
                && let Some((_, module)) = self.known.get(&id.get())
            {
                report.removed.push((id, Arc::clone(module)));
            }
        }

        // In the loader's order (main program first), so ids are too.
        for object in scan.objects {
            let key = key(&object);
            if self.live.contains_key(&key) {
                continue;
            }
            let module = Arc::new(Module::load(object));
            match self
                .index
                .insert_module(module.segments.clone(), Arc::clone(&module))
            {
                Ok(id) => {
                    self.live.insert(key, id);
                    self.known.insert(id.get(), (id, Arc::clone(&module)));
                    report.added.push((id, module));
                }
                Err(e) => report.rejected.push((module.name.clone(), e.into())),
            }
        }
        self.seen = scan.counters;
        report
    }

    /// Resolves an address through the index (pins an epoch: not for signal
    /// handlers; they use [`AddrIndex::lookup`] and resolve later with
    /// [`resolve_sample`](Symbolizer::resolve_sample)).
    pub(crate) fn resolve(&self, addr: u64) -> Option<Resolved> {
        let guard = latchtree::pin();
        let hit = self.index.module_address(addr, &guard)?;
        Some(Resolved {
            addr,
            id: hit.id(),
            module: Arc::clone(hit.value()),
        })
    }

    /// Resolves a sample recorded as `(id, address)`, the id as its number
    /// ([`ModuleId::get`]), for instance by a signal handler through
    /// [`AddrIndex::lookup`]; also after the module was unloaded: ids are
    /// never reused, so the id still names the module the address was in
    /// when the sample was taken, even if another object is mapped there now.
    pub(crate) fn resolve_sample(&self, id: u64, addr: u64) -> Option<Resolved> {
        let (id, module) = self.known.get(&id)?;
        // The address must be where the module was: ids are exact, but a
        // sample with a wrong id should not resolve to nonsense.
        module.segments.iter().find(|r| r.contains(&addr))?;
        Some(Resolved {
            addr,
            id: *id,
            module: Arc::clone(module),
        })
    }
}

/// Demangles a Rust symbol name: legacy mangling (`_ZN` … `E`, hash
/// dropped) in full, and v0 mangling (`_R…`, what the standard library ships
/// with) for plain paths only: crate roots, nested items and closures, no
/// generic arguments, impl paths or back-references. `None` for anything
/// else (C names, the v0 forms not handled): print those raw, or use
/// `rustc-demangle`.
pub(crate) fn demangle(name: &str) -> Option<String> {
    if let Some(v0) = name.strip_prefix("_R") {
        return demangle_v0(v0);
    }
    let mut rest = name.strip_prefix("_ZN")?;
    let mut parts = Vec::new();
    loop {
        if let Some(after) = rest.strip_prefix('E') {
            // Allow LLVM suffixes such as `.llvm.1234` after the end.
            if !(after.is_empty() || after.starts_with('.')) {
                return None;
            }
            break;
        }
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let len: usize = rest.get(..digits)?.parse().ok()?;
        let end = digits.checked_add(len)?;
        parts.push(rest.get(digits..end)?);
        rest = &rest[end..];
    }
    let is_hash = |p: &str| {
        p.len() == 17 && p.starts_with('h') && p[1..].bytes().all(|b| b.is_ascii_hexdigit())
    };
    if parts.last().is_some_and(|p| is_hash(p)) {
        parts.pop();
    }
    if parts.is_empty() {
        return None;
    }
    let mut out = String::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push_str("::");
        }
        unescape(part, &mut out)?;
    }
    Some(out)
}

/// Undoes the legacy mangling escapes (`$LT$`, `$u20$`, `..` …) of one path
/// component.
fn unescape(part: &str, out: &mut String) -> Option<()> {
    let mut rest = if part.starts_with("_$") {
        &part[1..]
    } else {
        part
    };
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("..") {
            out.push_str("::");
            rest = after;
        } else if let Some(after) = rest.strip_prefix('$') {
            let (code, after) = after.split_once('$')?;
            out.push(match code {
                "SP" => '@',
                "BP" => '*',
                "RF" => '&',
                "LT" => '<',
                "GT" => '>',
                "LP" => '(',
                "RP" => ')',
                "C" => ',',
                _ => char::from_u32(u32::from_str_radix(code.strip_prefix('u')?, 16).ok()?)?,
            });
            rest = after;
        } else {
            let c = rest.chars().next()?;
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    Some(())
}

/// The plain-path subset of v0 mangling (see [`demangle`]).
fn demangle_v0(mangled: &str) -> Option<String> {
    let mut parser = V0 {
        rest: mangled.as_bytes(),
    };
    let path = parser.path()?;
    // An optional instantiating crate follows, then maybe an LLVM suffix.
    if parser.rest.first() == Some(&b'C') {
        parser.path()?;
    }
    (parser.rest.is_empty() || parser.rest.first() == Some(&b'.')).then_some(path)
}

/// A cursor over a v0-mangled name.
struct V0<'a> {
    rest: &'a [u8],
}

impl V0<'_> {
    fn next(&mut self) -> Option<u8> {
        let (&first, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(first)
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.rest.first() == Some(&byte);
        if found {
            self.rest = &self.rest[1..];
        }
        found
    }

    /// `_` is 0; `<base-62 digits>_` is the digits' value plus one.
    fn base62(&mut self) -> Option<u64> {
        if self.eat(b'_') {
            return Some(0);
        }
        let mut value: u64 = 0;
        loop {
            let digit = match self.next()? {
                b'_' => return value.checked_add(1),
                d @ b'0'..=b'9' => d - b'0',
                d @ b'a'..=b'z' => d - b'a' + 10,
                d @ b'A'..=b'Z' => d - b'A' + 36,
                _ => return None,
            };
            value = value.checked_mul(62)?.checked_add(u64::from(digit))?;
        }
    }

    /// An optional `s<base-62>` disambiguator: 0 if absent, else value + 1.
    fn disambiguator(&mut self) -> Option<u64> {
        if self.eat(b's') {
            self.base62()?.checked_add(1)
        } else {
            Some(0)
        }
    }

    /// `<decimal length>[_]<bytes>`; punycode (`u` prefix) is not handled.
    fn ident(&mut self) -> Option<&str> {
        let digits = self.rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let len: usize = std::str::from_utf8(&self.rest[..digits])
            .ok()?
            .parse()
            .ok()?;
        self.rest = &self.rest[digits..];
        self.eat(b'_');
        let ident = self.rest.get(..len)?;
        self.rest = &self.rest[len..];
        std::str::from_utf8(ident).ok()
    }

    fn path(&mut self) -> Option<String> {
        match self.next()? {
            b'C' => {
                self.disambiguator()?;
                self.ident().map(str::to_owned)
            }
            b'N' => {
                let namespace = self.next()?;
                let parent = self.path()?;
                let disambiguator = self.disambiguator()?;
                let ident = self.ident()?;
                Some(match namespace {
                    b'a'..=b'z' => format!("{parent}::{ident}"),
                    b'C' => format!("{parent}::{{closure#{disambiguator}}}"),
                    b'S' => format!("{parent}::{{shim:{ident}#{disambiguator}}}"),
                    _ => return None,
                })
            }
            _ => None,
        }
    }
}
