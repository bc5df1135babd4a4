//! An instance's serial console log, as the console endpoint serves it: the last lines of a
//! text, bounded. A log file is read from its tail only (at most [`MAX_BYTES`], whatever its
//! size); a backend that makes its log up (sim) cuts it with the same [`last_lines`].

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The lines served when the request names no count.
pub const DEFAULT_LINES: usize = 100;
/// The most lines one request may ask for.
pub const MAX_LINES: usize = 10_000;
/// The most bytes read from the end of a log for one request.
pub const MAX_BYTES: u64 = 1024 * 1024;

/// Why an instance's console log cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConsoleError {
    /// The backend has no such instance.
    #[error("no such instance on this node")]
    NotFound,
    /// The instance's log is on a host this process cannot read (an off-host instance).
    #[error("console log not available for off-host instances")]
    OffHost,
    /// The log could not be read.
    #[error("reading the console log: {0}")]
    Io(String),
}

/// The last `lines` lines of `text` (a line is what ends with `\n`, or the unterminated tail);
/// bytes that are not UTF-8 are replaced. `lines` of 0 gives nothing.
pub fn last_lines(text: &[u8], lines: usize) -> String {
    if lines == 0 {
        return String::new();
    }
    // A final newline ends the last line; it does not start an empty one.
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let mut start = 0;
    let mut seen = 0;
    for (at, byte) in body.iter().enumerate().rev() {
        if *byte == b'\n' {
            seen += 1;
            if seen == lines {
                start = at + 1;
                break;
            }
        }
    }
    String::from_utf8_lossy(&text[start..]).into_owned()
}

/// The last `lines` lines of the file at `path`, read from at most the last [`MAX_BYTES`] of it
/// (a first line cut by that bound is dropped unless it is all there is). A missing file is an
/// empty log (a VM that has not written yet). Blocking.
pub fn tail_file(path: &Path, lines: usize) -> Result<String, ConsoleError> {
    let io = |e: std::io::Error| ConsoleError::Io(format!("{}: {e}", path.display()));
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(io(e)),
    };
    let len = file.metadata().map_err(io)?.len();
    let from = len.saturating_sub(MAX_BYTES);
    file.seek(SeekFrom::Start(from)).map_err(io)?;
    let mut buf = Vec::new();
    file.take(MAX_BYTES).read_to_end(&mut buf).map_err(io)?;
    let mut text = &buf[..];
    if from > 0 {
        // The window starts inside a line: drop that partial line when a whole one follows.
        if let Some(nl) = text.iter().position(|b| *b == b'\n')
            && nl + 1 < text.len()
        {
            text = &text[nl + 1..];
        }
    }
    Ok(last_lines(text, lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn last_lines_of_a_text() {
        assert_eq!(last_lines(b"a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines(b"a\nb\nc", 2), "b\nc");
        assert_eq!(last_lines(b"a\nb\nc\n", 3), "a\nb\nc\n");
        // Shorter than asked: all of it.
        assert_eq!(last_lines(b"a\nb\n", 10), "a\nb\n");
        assert_eq!(last_lines(b"", 10), "");
        assert_eq!(last_lines(b"a\n", 0), "");
        assert_eq!(last_lines(b"\n\n\n", 2), "\n\n");
        assert_eq!(last_lines(b"a\xff\nb", 5), "a\u{fffd}\nb");
    }

    #[test]
    fn a_missing_file_is_an_empty_log() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(tail_file(&dir.path().join("none"), 5).unwrap(), "");
    }

    #[test]
    fn a_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(tail_file(dir.path(), 5), Err(ConsoleError::Io(_))));
    }

    #[test]
    fn a_short_file_whole_and_the_last_lines_of_a_longer_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("console.log");
        std::fs::write(&path, "boot\nCUMULO-GUEST-UP x\n").unwrap();
        assert_eq!(tail_file(&path, 100).unwrap(), "boot\nCUMULO-GUEST-UP x\n");
        assert_eq!(tail_file(&path, 1).unwrap(), "CUMULO-GUEST-UP x\n");
    }

    #[test]
    fn a_huge_file_is_read_from_its_tail_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("console.log");
        let mut file = std::fs::File::create(&path).unwrap();
        // 4 GiB of nothing (sparse), then lines: only the tail's bytes are read.
        file.set_len(4 << 30).unwrap();
        file.seek(SeekFrom::End(0)).unwrap();
        for n in 0..20_000 {
            writeln!(file, "line {n}").unwrap();
        }
        drop(file);
        let tail = tail_file(&path, 3).unwrap();
        assert_eq!(tail, "line 19997\nline 19998\nline 19999\n");
        let most = tail_file(&path, MAX_LINES).unwrap();
        assert_eq!(most.lines().count(), MAX_LINES);
        assert!(most.starts_with("line 10000\n"));
        // Everything there is within the bound: no more than MAX_BYTES, whole lines only.
        let all = tail_file(&path, usize::MAX).unwrap();
        assert!(all.len() as u64 <= MAX_BYTES);
        assert!(all.starts_with("line ") && all.ends_with("line 19999\n"));
    }

    #[test]
    fn one_line_longer_than_the_bound_is_cut_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("console.log");
        std::fs::write(&path, "x".repeat(3 * MAX_BYTES as usize)).unwrap();
        let tail = tail_file(&path, 1).unwrap();
        assert_eq!(tail.len() as u64, MAX_BYTES);
    }
}
