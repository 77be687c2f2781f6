//! The results: one row per measurement, printed as one table and written
//! as CSV.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// One measurement.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    /// `lookup`, `kernel`, `write`, `readers` or `memory`.
    pub(crate) section: &'static str,
    /// What was measured, e.g. `n=84` or `2 readers, tight writer`.
    pub(crate) case: String,
    /// Entries (or ranges) in the structure.
    pub(crate) n: usize,
    /// Reader threads (concurrent rows), else 1.
    pub(crate) readers: usize,
    pub(crate) structure: &'static str,
    /// The measured value, in `unit`.
    pub(crate) value: f64,
    /// `ns/op`, `ns/item`, `ns/batch` or `B/entry`.
    pub(crate) unit: &'static str,
    /// BTreeMap's value for the same case in the same run (the ratio's
    /// denominator); for concurrent rows, single-threaded BTreeMap.
    pub(crate) baseline: Option<f64>,
    /// Writer updates per second (concurrent rows with a writer).
    pub(crate) writer_ops_s: Option<f64>,
    /// Concurrent rows: reader CPU ns/op. Memory rows: live blocks/entry.
    pub(crate) extra: Option<f64>,
}

impl Row {
    pub(crate) fn new(
        section: &'static str,
        case: String,
        n: usize,
        structure: &'static str,
        value: f64,
        unit: &'static str,
    ) -> Self {
        Row {
            section,
            case,
            n,
            readers: 1,
            structure,
            value,
            unit,
            baseline: None,
            writer_ops_s: None,
            extra: None,
        }
    }

    /// `value / baseline`.
    pub(crate) fn ratio(&self) -> Option<f64> {
        self.baseline.map(|b| self.value / b)
    }
}

/// Sets the baseline of every row of `case` in `section` to the value of
/// its `BTreeMap` row.
pub(crate) fn set_baseline(rows: &mut [Row], section: &str, case: &str) {
    set_baseline_to(rows, section, case, crate::BTREEMAP);
}

/// Sets the baseline of every row of `case` in `section` to the value of
/// its `structure` row (none if that row is missing).
pub(crate) fn set_baseline_to(rows: &mut [Row], section: &str, case: &str, structure: &str) {
    let base = rows
        .iter()
        .find(|r| r.section == section && r.case == case && r.structure == structure)
        .map(|r| r.value);
    for r in rows
        .iter_mut()
        .filter(|r| r.section == section && r.case == case)
    {
        r.baseline = base;
    }
}

fn fmt_value(v: f64) -> String {
    if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2} M/s", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1} k/s", r / 1e3)
    } else {
        format!("{r:.0} /s")
    }
}

/// The table, one block per (section, case).
pub(crate) fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let w_case = rows
        .iter()
        .map(|r| r.section.len() + 1 + r.case.len())
        .max()
        .unwrap_or(10)
        .max(14);
    let w_struct = rows
        .iter()
        .map(|r| r.structure.len())
        .max()
        .unwrap_or(10)
        .max(9);
    let header = format!(
        "{:<w_case$}  {:<w_struct$}  {:>10} {:<8}  {:>9}  {:>12}",
        "case", "structure", "value", "unit", "vs BTree", "writer"
    );
    let _ = writeln!(out, "{header}");
    let _ = writeln!(out, "{}", "-".repeat(header.len()));
    let mut last = None;
    for r in rows {
        let key = (r.section, r.case.as_str());
        if last.is_some() && last != Some(key) {
            let _ = writeln!(out);
        }
        let case = if last == Some(key) {
            String::new()
        } else {
            format!("{} {}", r.section, r.case)
        };
        last = Some(key);
        let ratio = r.ratio().map_or_else(|| "-".into(), |x| format!("{x:.2}x"));
        let writer = r.writer_ops_s.map_or_else(String::new, fmt_rate);
        let _ = writeln!(
            out,
            "{case:<w_case$}  {:<w_struct$}  {:>10} {:<8}  {ratio:>9}  {writer:>12}",
            r.structure,
            fmt_value(r.value),
            r.unit,
        );
    }
    out
}

/// Writes every row as CSV.
pub(crate) fn write_csv(rows: &[Row], path: &Path) -> io::Result<()> {
    let mut s = String::from(
        "section,case,n,readers,structure,value,unit,ratio_vs_btreemap,writer_ops_per_s,extra\n",
    );
    let opt = |x: Option<f64>| x.map_or_else(String::new, |v| format!("{v:.4}"));
    for r in rows {
        let _ = writeln!(
            s,
            "{},\"{}\",{},{},\"{}\",{:.4},{},{},{},{}",
            r.section,
            r.case,
            r.n,
            r.readers,
            r.structure,
            r.value,
            r.unit,
            opt(r.ratio()),
            opt(r.writer_ops_s),
            opt(r.extra),
        );
    }
    std::fs::write(path, s)
}

/// Finds one row.
pub(crate) fn find<'r>(
    rows: &'r [Row],
    section: &str,
    case: &str,
    structure: &str,
) -> Option<&'r Row> {
    rows.iter()
        .find(|r| r.section == section && r.case == case && r.structure == structure)
}
