//! Symbolizes recorded `(object id, link-time address)` samples after the
//! fact with [blazesym](https://docs.rs/blazesym) (symbol tables; Rust names
//! demangled with rustc-demangle): each object's file is
//! found by build id (a separate debug file under `/usr/lib/debug/.build-id/`
//! if one is installed) or by path, and used only if its build id is the one
//! the object had when it was sampled.

use super::ring::Sample;
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolizer};
use latchtree::{LoadedObjects, ModuleId, ObjectInfo, ObjectKind};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// One line of the profile: a function and how often it was sampled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    /// The demangled function name, or `??` (with the address) if none.
    pub(crate) function: String,
    /// The object's file name (`[vdso]`, `(no object)` …).
    pub(crate) object: String,
    /// Whether the object was unloaded when the profile was symbolized.
    pub(crate) unloaded: bool,
    pub(crate) samples: usize,
}

/// A symbolized profile, hottest function first.
#[derive(Debug, Default)]
pub(crate) struct Profile {
    pub(crate) rows: Vec<Row>,
    pub(crate) total: usize,
    /// Per object: where its symbols came from, or why there are none.
    pub(crate) sources: Vec<String>,
}

impl Profile {
    /// Prints the `top` hottest rows.
    pub(crate) fn print(&self, top: usize) {
        for row in self.rows.iter().take(top) {
            println!(
                "  {:>5.1}% {:>5}  {:<44} {}{}",
                100.0 * row.samples as f64 / self.total.max(1) as f64,
                row.samples,
                row.function,
                row.object,
                if row.unloaded { " (unloaded)" } else { "" },
            );
        }
    }
}

/// The file to read `info`'s symbols from, checked against its build id.
fn symbol_file(info: &ObjectInfo) -> Result<PathBuf, String> {
    if info.kind() == ObjectKind::Vdso {
        return Err("the vDSO has no file".to_owned());
    }
    let mut candidates = Vec::new();
    if let Some(id) = info.build_id() {
        let hex = id.to_string();
        if hex.len() > 2 {
            candidates.push(PathBuf::from(format!(
                "/usr/lib/debug/.build-id/{}/{}.debug",
                &hex[..2],
                &hex[2..]
            )));
        }
    }
    candidates.push(info.path().to_path_buf());
    let Some(path) = candidates.into_iter().find(|p| p.exists()) else {
        return Err(format!("{}: no such file", info.path().display()));
    };
    let on_disk = blazesym::helper::read_elf_build_id(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let expected = info.build_id().map(|id| id.as_bytes());
    if on_disk.as_deref() == expected {
        return Ok(path);
    }
    Err(format!(
        "{}: build id {} differs from the sampled object's {}",
        path.display(),
        on_disk.map_or_else(|| "none".to_owned(), |b| hex(&b)),
        expected.map_or_else(|| "none".to_owned(), hex),
    ))
}

/// A Rust name demangled (without its hash), anything else as it is.
fn demangle(name: &str) -> String {
    rustc_demangle::try_demangle(name).map_or_else(|_| name.to_owned(), |d| format!("{d:#}"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Symbolizes `samples`, resolving each object id through `objects` (also
/// for objects unloaded since, until they are forgotten).
pub(crate) fn symbolize(objects: &LoadedObjects, samples: &[Sample]) -> Profile {
    let mut by_object: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for s in samples {
        by_object.entry(s.object).or_default().push(s.address);
    }
    let symbolizer = Symbolizer::new();
    let mut counts: HashMap<(String, String, bool), usize> = HashMap::new();
    let mut sources = Vec::new();
    for (id, addresses) in by_object {
        let object = (id != 0)
            .then(|| objects.object(ModuleId::from_raw(id)))
            .flatten();
        let Some(object) = object else {
            let what = if id == 0 {
                "(no object)".to_owned()
            } else {
                format!("(object #{id} forgotten)")
            };
            *counts.entry(("??".to_owned(), what, false)).or_default() += addresses.len();
            continue;
        };
        let info = object.info();
        let name = match info.kind() {
            ObjectKind::Vdso => "[vdso]".to_owned(),
            _ => info.path().file_name().map_or_else(
                || info.path().display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
        };
        let mut unique = addresses.clone();
        unique.sort_unstable();
        unique.dedup();
        let names: HashMap<u64, String> = match symbol_file(info) {
            Ok(file) => {
                let source = Source::Elf(Elf::new(&file));
                match symbolizer.symbolize(&source, Input::VirtOffset(&unique)) {
                    Ok(symbols) => {
                        let build_id = info
                            .build_id()
                            .map_or_else(String::new, |b| format!(" {b}"));
                        sources.push(format!(
                            "#{id} {name}: symbols from {} (build id{build_id} matches)",
                            file.display()
                        ));
                        unique
                            .iter()
                            .zip(symbols)
                            .filter_map(|(&a, s)| Some((a, demangle(&s.as_sym()?.name))))
                            .collect()
                    }
                    Err(e) => {
                        sources.push(format!("#{id} {name}: {e}"));
                        HashMap::new()
                    }
                }
            }
            Err(why) => {
                sources.push(format!("#{id} {name}: no symbols ({why})"));
                HashMap::new()
            }
        };
        for address in addresses {
            let function = names
                .get(&address)
                .cloned()
                .unwrap_or_else(|| "??".to_owned());
            *counts
                .entry((function, name.clone(), !object.is_loaded()))
                .or_default() += 1;
        }
    }
    let mut rows: Vec<Row> = counts
        .into_iter()
        .map(|((function, object, unloaded), samples)| Row {
            function,
            object,
            unloaded,
            samples,
        })
        .collect();
    rows.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then_with(|| a.function.cmp(&b.function))
    });
    Profile {
        total: samples.len(),
        rows,
        sources,
    }
}
