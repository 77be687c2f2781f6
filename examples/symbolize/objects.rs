//! The symbol tables of this process's loaded ELF objects, on top of
//! [`latchtree::LoadedObjects`], which tracks the objects themselves (live
//! across `dlopen`/`dlclose`, unloaded ones kept until forgotten).
//!
//! Shared by `examples/symbolize` and `tests/symbolize_nm.rs` (which includes
//! this file with `#[path]`), so it holds nothing that only one of them needs.
//!
//! Per object the symbolizer reads the symbol table with the `object` crate
//! from the object's file (the vDSO from memory). A file that cannot be read
//! or parsed gives a module with no symbols, never a panic. Symbol addresses
//! in an ELF file are link-time addresses: `address - bias`, which is what
//! [`latchtree::ObjectHit::link_address`] gives and what `nm` prints.

use latchtree::{LoadedObjects, ModuleId, ObjectInfo, ObjectKind, Problem};
use object::{Object, ObjectSymbol, SymbolKind};
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::{ptr, slice};

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

/// A loaded (or unloaded) object and its symbols.
#[derive(Debug)]
pub(crate) struct Module {
    /// What [`LoadedObjects`] knows of it.
    pub(crate) info: Arc<ObjectInfo>,
    /// The object's path, for display.
    pub(crate) name: String,
    /// The object's symbols (empty if its file could not be read).
    pub(crate) symbols: SymbolTable,
    /// Where the symbols came from, or why there are none.
    pub(crate) symbol_source: String,
}

impl Module {
    /// Reads the object's symbols; never fails (see `symbol_source`).
    fn load(info: Arc<ObjectInfo>) -> Module {
        let name = info.path().display().to_string();
        let (symbols, symbol_source) = match info.kind() {
            ObjectKind::Vdso => {
                // The ELF image is the PT_LOAD that maps file offset 0.
                match info.segments().iter().find(|s| s.file_offset == 0) {
                    Some(s) => vdso_symbols(s.range.start, s.file_size),
                    None => (SymbolTable::default(), "no image".to_owned()),
                }
            }
            _ => file_symbols(&name),
        };
        Module {
            info,
            name,
            symbols,
            symbol_source,
        }
    }

    /// What the loader added to every link-time address of this object.
    pub(crate) fn bias(&self) -> u64 {
        self.info.bias()
    }

    /// The `PT_LOAD` segments in the index.
    pub(crate) fn segments(&self) -> impl ExactSizeIterator<Item = Range<u64>> + '_ {
        self.info.segments().iter().map(|s| s.range.clone())
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
    // `at` is where the vDSO's first `PT_LOAD` starts: its ELF header,
    // `AT_SYSINFO_EHDR` (that is how `LoadedObjects` recognized it), page-aligned (checked above), where the kernel maps the `PT_LOAD`
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

/// What one [`Symbolizer::refresh`] did.
#[derive(Debug, Default)]
pub(crate) struct Refresh {
    /// False if the loader's counters had not moved, so no scan was needed.
    pub(crate) rescanned: bool,
    /// The loader's counters seen by this refresh.
    pub(crate) counters: Option<latchtree::LoadCounters>,
    /// Objects new since the last refresh, now in the index.
    pub(crate) added: Vec<(ModuleId, Arc<Module>)>,
    /// Objects gone since the last refresh, now out of the index.
    pub(crate) removed: Vec<(ModuleId, Arc<Module>)>,
    /// What was odd about the objects (the index refusing one included).
    pub(crate) problems: Vec<Problem>,
}

/// An address resolved to module, offset and symbol.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// The address looked up.
    pub(crate) addr: u64,
    /// The module that contains it.
    pub(crate) id: ModuleId,
    /// The module and its symbols.
    pub(crate) module: Arc<Module>,
}

impl Resolved {
    /// `addr - bias`: the link-time address, as `nm` and `objdump` print it.
    pub(crate) fn offset(&self) -> u64 {
        self.addr.wrapping_sub(self.module.bias())
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

/// Symbol tables for the objects of a [`LoadedObjects`], kept in step with
/// it by [`refresh`](Symbolizer::refresh). Tables of unloaded objects stay
/// as long as the objects do in `LoadedObjects` (until forgotten), so that
/// samples recorded as `(id, address)` before an unload still resolve.
#[derive(Debug)]
pub(crate) struct Symbolizer<'o> {
    objects: &'o LoadedObjects,
    /// The symbol tables, by object id.
    modules: HashMap<ModuleId, Arc<Module>>,
}

impl<'o> Symbolizer<'o> {
    /// A symbolizer over `objects` (refreshed by [`refresh`](Symbolizer::refresh)
    /// only).
    pub(crate) fn new(objects: &'o LoadedObjects) -> Self {
        Symbolizer {
            objects,
            modules: HashMap::new(),
        }
    }

    /// Refreshes the objects (see [`LoadedObjects::refresh`]) and reads the
    /// symbols of the new ones.
    pub(crate) fn refresh(&mut self) -> Refresh {
        let refresh = self.objects.refresh();
        let added = (refresh.added.iter())
            .map(|object| {
                let module = Arc::new(Module::load(Arc::clone(object.info())));
                self.modules.insert(object.id(), Arc::clone(&module));
                (object.id(), module)
            })
            .collect();
        let removed = (refresh.removed.iter())
            .filter_map(|object| Some((object.id(), Arc::clone(self.modules.get(&object.id())?))))
            .collect();
        Refresh {
            rescanned: refresh.rescanned,
            counters: refresh.counters,
            added,
            removed,
            problems: refresh.problems,
        }
    }

    /// Resolves an address of a loaded object (not for signal handlers:
    /// they use [`LoadedObjects::lookup`] and resolve later with
    /// [`resolve_sample`](Symbolizer::resolve_sample)).
    pub(crate) fn resolve(&self, addr: u64) -> Option<Resolved> {
        let hit = self.objects.lookup(addr)?;
        Some(Resolved {
            addr,
            id: hit.id(),
            module: Arc::clone(self.modules.get(&hit.id())?),
        })
    }

    /// Forgets the unloaded objects (in the [`LoadedObjects`] too) and
    /// their symbols, once no pending sample names them; returns how many.
    pub(crate) fn forget_unloaded(&mut self) -> usize {
        let forgotten = self.objects.forget_unloaded();
        let objects = self.objects;
        self.modules.retain(|&id, _| objects.object(id).is_some());
        forgotten
    }

    /// Resolves a sample recorded as `(id, address)`, the id as its number
    /// ([`ModuleId::get`]), for instance by a signal handler through
    /// [`LoadedObjects::lookup`]; also after the object was unloaded: ids
    /// are never reused, so the id still names the object the address was
    /// in when the sample was taken, even if another is mapped there now.
    pub(crate) fn resolve_sample(&self, id: u64, addr: u64) -> Option<Resolved> {
        let id = ModuleId::from_raw(id);
        // Known to the objects (loaded, or unloaded and not forgotten)?
        self.objects.object(id)?;
        let module = self.modules.get(&id)?;
        // The address must be where the object was: ids are exact, but a
        // sample with a wrong id should not resolve to nonsense.
        module.info.segment_of(addr)?;
        Some(Resolved {
            addr,
            id,
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
