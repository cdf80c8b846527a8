//! Line logs, as the proof examples keep them (a record a line, appended and fsync'd before it
//! is acted on), read back after a kill.

use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind};
use std::path::Path;

/// Reads the log at `path` and gives `each` every complete line, with its number (from 1) and
/// without its newline, in order. A last line cut short by a kill (no newline) was never
/// acknowledged: it is not given. Returns the bytes of the complete lines (where to cut a torn
/// tail off), or `None` if there is no such file. O(file size).
///
/// # Errors
/// `"<path>: <error>"` if the file cannot be opened or read; the first error of `each`,
/// unchanged (nothing is read after it).
pub fn read_complete(
    path: &Path,
    mut each: impl FnMut(usize, &str) -> Result<(), String>,
) -> Result<Option<u64>, String> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut complete = 0u64;
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    for n in 1.. {
        line.clear();
        let len = reader
            .read_line(&mut line)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let Some(text) = line.strip_suffix('\n') else {
            break;
        };
        complete += len as u64;
        each(n, text)?;
    }
    Ok(Some(complete))
}

#[cfg(test)]
mod tests {
    use super::read_complete;

    #[test]
    fn a_torn_last_line_is_neither_given_nor_counted() {
        let dir = std::env::temp_dir().join(format!("tickwheel-lines-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("log");
        std::fs::write(&path, "a 1\nb 2\nc").expect("write");
        let mut seen = Vec::new();
        let complete = read_complete(&path, |n, line| {
            seen.push((n, line.to_owned()));
            Ok(())
        });
        assert_eq!(complete, Ok(Some(8)));
        assert_eq!(seen, [(1, "a 1".to_owned()), (2, "b 2".to_owned())]);
        let stopped = read_complete(&path, |n, _| Err(format!("line {n}")));
        assert_eq!(stopped, Err("line 1".to_owned()));
        std::fs::remove_dir_all(&dir).expect("clean up");
        assert_eq!(read_complete(&path, |_, _| Ok(())), Ok(None));
    }
}
