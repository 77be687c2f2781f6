//! Symbolizes recorded stacks of `(object id, link-time address)` frames
//! after the fact with [blazesym](https://docs.rs/blazesym) (symbol tables; Rust names
//! demangled with rustc-demangle): each object's file is
//! found by build id (a separate debug file under `/usr/lib/debug/.build-id/`
//! if one is installed) or by path, and used only if its build id is the one
//! the object had when it was sampled.

use super::ring::{Frame, Sample};
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

/// A symbolized profile: the leaf functions, hottest first, and every
/// stack.
#[derive(Debug, Default)]
pub(crate) struct Profile {
    pub(crate) rows: Vec<Row>,
    pub(crate) total: usize,
    /// Per object: where its symbols came from, or why there are none.
    pub(crate) sources: Vec<String>,
    /// The stacks in the folded format (`thread;root;…;leaf count`, one
    /// line each), sorted: what flame graphs are drawn from.
    pub(crate) folded: Vec<String>,
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
/// for objects unloaded since, until they are forgotten); `threads` names
/// the sampled threads by index.
pub(crate) fn symbolize<P: Send + Sync>(
    objects: &LoadedObjects<P>,
    samples: &[Sample],
    threads: &[&str],
) -> Profile {
    let mut by_object: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for frame in samples.iter().flat_map(|s| &s.frames) {
        by_object
            .entry(frame.object)
            .or_default()
            .push(frame.address);
    }
    let symbolizer = Symbolizer::new();
    // Per frame: function, object name, whether the object is unloaded.
    let mut names: HashMap<Frame, (String, String, bool)> = HashMap::new();
    let mut sources = Vec::new();
    for (id, mut addresses) in by_object {
        addresses.sort_unstable();
        addresses.dedup();
        let object = (id != 0)
            .then(|| objects.object(ModuleId::from_raw(id)))
            .flatten();
        let Some(object) = object else {
            let what = if id == 0 {
                "(no object)".to_owned()
            } else {
                format!("(object #{id} forgotten)")
            };
            for address in addresses {
                let frame = Frame {
                    object: id,
                    address,
                };
                names.insert(frame, ("??".to_owned(), what.clone(), false));
            }
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
        let found: HashMap<u64, String> = match symbol_file(info) {
            Ok(file) => {
                let source = Source::Elf(Elf::new(&file));
                match symbolizer.symbolize(&source, Input::VirtOffset(&addresses)) {
                    Ok(symbols) => {
                        let build_id = info
                            .build_id()
                            .map_or_else(String::new, |b| format!(" {b}"));
                        sources.push(format!(
                            "#{id} {name}: symbols from {} (build id{build_id} matches)",
                            file.display()
                        ));
                        addresses
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
            let function = found
                .get(&address)
                .cloned()
                .unwrap_or_else(|| "??".to_owned());
            let frame = Frame {
                object: id,
                address,
            };
            names.insert(frame, (function, name.clone(), !object.is_loaded()));
        }
    }

    let mut counts: HashMap<&(String, String, bool), usize> = HashMap::new();
    let mut stacks: BTreeMap<String, usize> = BTreeMap::new();
    for sample in samples {
        if let Some(leaf) = sample.frames.first() {
            *counts.entry(&names[leaf]).or_default() += 1;
        }
        let thread = threads.get(sample.thread as usize).copied().unwrap_or("?");
        let mut line = thread.to_owned();
        for frame in sample.frames.iter().rev() {
            let (function, object, _) = &names[frame];
            line.push(';');
            // `;` separates frames in the folded format.
            match function.as_str() {
                "??" => line.push_str(&format!("?? [{object}]")),
                f => line.push_str(&f.replace(';', ",")),
            }
        }
        *stacks.entry(line).or_default() += 1;
    }
    let mut rows: Vec<Row> = counts
        .into_iter()
        .map(|((function, object, unloaded), samples)| Row {
            function: function.clone(),
            object: object.clone(),
            unloaded: *unloaded,
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
        folded: stacks
            .into_iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect(),
    }
}
