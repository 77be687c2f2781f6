//! What a figure was measured on, printed beside every table: the CPU (its
//! model name, the cores this process may use, the last-level cache) and
//! the build (which latchtree features the benchmark crate enabled).

/// `model name` of the first processor in /proc/cpuinfo.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The largest cache level of CPU 0 and its size as sysfs writes it, e.g.
/// `L3 491520K` (a VM reports what its hypervisor passes through).
pub fn last_level_cache() -> Option<String> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).ok();
    dir.filter_map(|e| {
        let p = e.ok()?.path();
        let level: u32 = read(p.join("level"))?.trim().parse().ok()?;
        let size = read(p.join("size"))?.trim().to_string();
        Some((level, size))
    })
    .max_by_key(|&(level, _)| level)
    .map(|(level, size)| format!("L{level} {size}"))
}

/// The latchtree features this benchmark build measures.
pub fn build() -> &'static str {
    if cfg!(feature = "huge-pages") {
        "latchtree features: default + huge-pages"
    } else {
        "latchtree features: default"
    }
}

/// One line for the head of a table: CPU, cores, last-level cache, build.
pub fn describe() -> String {
    format!(
        "{}, {} cores, last-level cache {}; {}",
        cpu_model(),
        cores(),
        last_level_cache().unwrap_or_else(|| "unknown".into()),
        build()
    )
}

/// The 1-, 5- and 15-minute load averages (a busy machine shows here).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}
