//! The process's memory as Linux reports it, for the figures the examples print.

/// Peak resident memory in bytes (`VmHWM` of `/proc/self/status`). O(size of that file).
/// `None` where the file or the line is missing or does not parse (not Linux).
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}
