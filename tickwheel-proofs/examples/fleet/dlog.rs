//! The dispatch log: one file per member process in the run's directory,
//! `dispatch-<name>-<pid>.log`, one line per handed-out timer: `queue token id t_ns`; and one
//! line `F queue token id t_ns` per id whose delivery failed (a Redis error: the id stays in
//! the spool, and the member redispatches it under the same token after it re-reads).
//!
//! `t_ns` is CLOCK_MONOTONIC in nanoseconds: one clock for every process on a Linux host, so
//! the parent can order dispatches of different members. A member writes a batch's lines
//! with one `write` *before* it delivers them: a member killed after the write has logged a
//! dispatch that may not have been delivered (the next owner redispatches it under its own,
//! larger token), never a delivery without its line.

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use crate::check::Dispatch;

/// CLOCK_MONOTONIC now, in ns (the clock `std::time::Instant` reads on Linux).
pub fn mono_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // Both fields are non-negative for this clock.
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// A member process's log file.
#[derive(Debug)]
pub struct Writer {
    file: File,
    buf: Vec<u8>,
}

impl Writer {
    /// Creates `dir/dispatch-<name>-<pid>.log` (appending if it exists).
    ///
    /// # Errors
    /// If the file cannot be opened.
    pub fn create(dir: &Path, name: &str, pid: u32) -> io::Result<Writer> {
        let path = dir.join(format!("dispatch-{name}-{pid}.log"));
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Writer {
            file,
            buf: Vec::with_capacity(64 * 1024),
        })
    }

    /// Adds one line to the pending batch.
    pub fn push(&mut self, queue: u32, token: u64, id: u64, t_ns: u64) {
        // Writing into a Vec cannot fail.
        let _ = writeln!(self.buf, "{queue} {token} {id} {t_ns}");
    }

    /// Adds one failed delivery to the pending batch.
    pub fn push_failed(&mut self, queue: u32, token: u64, id: u64, t_ns: u64) {
        let _ = writeln!(self.buf, "F {queue} {token} {id} {t_ns}");
    }

    /// Writes the pending batch with one `write` call (the kernel has it once this returns,
    /// whatever happens to the process next).
    ///
    /// # Errors
    /// If the write fails.
    pub fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.file.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

/// What the logs hold: member labels (`name#pid`, indexed by [`Dispatch::member`]), every
/// dispatch, and every failed delivery as `(id, token)`.
pub type Logs = (Vec<String>, Vec<Dispatch>, Vec<(u64, u64)>);

/// Every log in `dir`. A last line cut short (no newline) is skipped.
///
/// # Errors
/// If a file cannot be read, or a complete line is malformed.
pub fn read_all(dir: &Path) -> io::Result<Logs> {
    let mut paths: Vec<(String, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(file) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if let Some(stem) = file
            .strip_prefix("dispatch-")
            .and_then(|s| s.strip_suffix(".log"))
            && let Some((name, pid)) = stem.rsplit_once('-')
        {
            paths.push((format!("{name}#{pid}"), path.clone()));
        }
    }
    paths.sort();
    let mut labels = Vec::with_capacity(paths.len());
    let mut all = Vec::new();
    let mut failed = Vec::new();
    for (member, (label, path)) in paths.into_iter().enumerate() {
        let text = std::fs::read_to_string(&path)?;
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        for (n, line) in complete.lines().enumerate() {
            let (failure, line) = match line.strip_prefix("F ") {
                Some(rest) => (true, rest),
                None => (false, line),
            };
            let parsed = parse_line(line).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: line {}: `{line}`", path.display(), n + 1),
                )
            })?;
            let (queue, token, id, t_ns) = parsed;
            if failure {
                failed.push((id, token));
                continue;
            }
            all.push(Dispatch {
                member: member as u32,
                queue,
                token,
                id,
                t_ns,
            });
        }
        labels.push(label);
    }
    Ok((labels, all, failed))
}

fn parse_line(line: &str) -> Option<(u32, u64, u64, u64)> {
    let mut f = line.split(' ');
    let r = (
        f.next()?.parse().ok()?,
        f.next()?.parse().ok()?,
        f.next()?.parse().ok()?,
        f.next()?.parse().ok()?,
    );
    f.next().is_none().then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_a_cut_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Writer::create(dir.path(), "m1", 42).unwrap();
        w.push(3, 100, 7, 123_456);
        w.push(4, 101, 8, 123_457);
        w.flush().unwrap();
        let mut w2 = Writer::create(dir.path(), "m2", 43).unwrap();
        w2.push(3, 200, 9, 200_000);
        w2.push_failed(3, 200, 9, 200_001);
        w2.flush().unwrap();
        // A line cut by a kill.
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("dispatch-m2-43.log"))
            .unwrap()
            .write_all(b"3 200 10 2000")
            .unwrap();
        let (labels, all, failed) = read_all(dir.path()).unwrap();
        assert_eq!(failed, vec![(9, 200)]);
        assert_eq!(labels, vec!["m1#42".to_string(), "m2#43".to_string()]);
        assert_eq!(all.len(), 3);
        assert_eq!(
            all[2],
            Dispatch {
                member: 1,
                queue: 3,
                token: 200,
                id: 9,
                t_ns: 200_000
            }
        );
        assert!(parse_line("1 2 3").is_none() && parse_line("1 2 3 4 5").is_none());
    }

    #[test]
    fn the_clock_is_monotonic() {
        let a = mono_ns();
        let b = mono_ns();
        assert!(a > 0 && b >= a);
    }
}
