//! The event log file (spec 6.3): one line per created event, rolled by size or time.
//!
//! A line is the time the event was recorded (ISO 8601 with milliseconds and offset,
//! UTC), then `key="value"` pairs: `severity`, `code` (`0x` and eight hex digits),
//! `type`, `origin`, `associatedObject.<n>.type` / `.id`, `arguments=["..",".."]`,
//! `message`. In values, `"` `\` newline, carriage return and tab are written `\"` `\\`
//! `\n` `\r` `\t`, so a line never breaks and a script can split it. A missing value is
//! written `""`.
//!
//! Rolling by size renames `events.log` to `events.log.1` (and `.1` to `.2`, ...) before
//! a line would take the file past its limit; rolling by time renames it to
//! `events.log.<period>` (`2026-11-22` daily, `2026-11-22T10` hourly) when the first line
//! of a new period arrives. Either way at most `keep` rolled files are kept.
//! The store is the durable record of events; the file is written (not synced) once per
//! group of events.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use drover_domain::dates::Timestamp;
use jiff::tz::TimeZone;

use crate::event::Event;

/// When the file is rolled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rolling {
    /// Never: one file grows.
    Never,
    /// Before a line would take the file past this many bytes.
    Size {
        max_bytes: u64,
    },
    Hourly,
    Daily,
}

/// Event logs may carry what jobs and users said: readable by the service alone.
const PRIVATE: u32 = 0o600;

#[derive(Debug, Clone)]
pub struct LogSettings {
    pub path: PathBuf,
    pub rolling: Rolling,
    /// How many rolled files are kept (the oldest are deleted).
    pub keep: usize,
    /// Also write each line to the service's general log (standard error).
    pub additive: bool,
}

/// The open event log.
pub struct EventLog {
    settings: LogSettings,
    file: BufWriter<File>,
    size: u64,
    /// The time period of the lines in the file (time rolling only).
    period: Option<String>,
}

impl EventLog {
    pub fn open(settings: LogSettings) -> io::Result<Self> {
        if let Some(dir) = settings.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(PRIVATE)
            .open(&settings.path)?;
        let metadata = file.metadata()?;
        let period = period_of(
            settings.rolling,
            metadata
                .modified()
                .ok()
                .and_then(|m| Timestamp::try_from(m).ok()),
        );
        Ok(Self {
            size: metadata.len(),
            file: BufWriter::new(file),
            settings,
            period: if metadata.len() > 0 { period } else { None },
        })
    }

    /// Appends the line of `event`, recorded at `now`, rolling first when due.
    pub fn append(&mut self, event: &Event, now: Timestamp) -> io::Result<()> {
        let mut line = format_line(event, now);
        line.push('\n');
        self.roll_if_due(line.len() as u64, now)?;
        self.file.write_all(line.as_bytes())?;
        self.size += line.len() as u64;
        if self.settings.additive {
            eprint!("drover: event {line}");
        }
        Ok(())
    }

    /// Hands the buffered lines to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }

    fn roll_if_due(&mut self, incoming: u64, now: Timestamp) -> io::Result<()> {
        match self.settings.rolling {
            Rolling::Never => Ok(()),
            Rolling::Size { max_bytes } => {
                if self.size > 0 && self.size + incoming > max_bytes {
                    self.roll_numbered()?;
                }
                Ok(())
            }
            Rolling::Hourly | Rolling::Daily => {
                let period = period_of(self.settings.rolling, Some(now));
                match &self.period {
                    Some(current) if Some(current) != period.as_ref() && self.size > 0 => {
                        let suffix = current.clone();
                        self.roll_to(&suffix)?;
                        self.prune_dated()?;
                    }
                    _ => {}
                }
                self.period = period;
                Ok(())
            }
        }
    }

    /// `events.log` → `.1`, `.1` → `.2`, ..., dropping what passes `keep`.
    fn roll_numbered(&mut self) -> io::Result<()> {
        self.file.flush()?;
        let keep = self.settings.keep;
        let numbered = |n: usize| with_suffix(&self.settings.path, &n.to_string());
        remove_if_present(&numbered(keep.max(1)))?;
        for n in (1..keep).rev() {
            if numbered(n).exists() {
                std::fs::rename(numbered(n), numbered(n + 1))?;
            }
        }
        if keep == 0 {
            remove_if_present(&self.settings.path)?;
        } else {
            std::fs::rename(&self.settings.path, numbered(1))?;
        }
        self.reopen()
    }

    fn roll_to(&mut self, suffix: &str) -> io::Result<()> {
        self.file.flush()?;
        std::fs::rename(
            &self.settings.path,
            with_suffix(&self.settings.path, suffix),
        )?;
        self.reopen()
    }

    /// Deletes the oldest dated files beyond `keep`.
    fn prune_dated(&self) -> io::Result<()> {
        let (Some(dir), Some(name)) = (self.settings.path.parent(), self.settings.path.file_name())
        else {
            return Ok(());
        };
        let prefix = format!("{}.", name.to_string_lossy());
        let mut rolled: Vec<String> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.strip_prefix(&prefix)
                    .is_some_and(|s| s.starts_with(|c: char| c.is_ascii_digit()) && s.contains('-'))
            })
            .collect();
        rolled.sort();
        let excess = rolled.len().saturating_sub(self.settings.keep);
        for name in &rolled[..excess] {
            remove_if_present(&dir.join(name))?;
        }
        Ok(())
    }

    fn reopen(&mut self) -> io::Result<()> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(PRIVATE)
            .open(&self.settings.path)?;
        self.file = BufWriter::new(file);
        self.size = 0;
        Ok(())
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The period `at` falls in under time rolling (UTC), `None` otherwise.
fn period_of(rolling: Rolling, at: Option<Timestamp>) -> Option<String> {
    let at = at?.to_zoned(TimeZone::UTC);
    match rolling {
        Rolling::Daily => Some(at.strftime("%Y-%m-%d").to_string()),
        Rolling::Hourly => Some(at.strftime("%Y-%m-%dT%H").to_string()),
        _ => None,
    }
}

/// The log line of `event` (without its newline). Written by hand, digit by digit: a
/// line per scheduler event, and `strftime` plus a `format!` per field cost more than the
/// rest of logging it.
pub fn format_line(event: &Event, now: Timestamp) -> String {
    let mut line = String::with_capacity(256);
    push_timestamp(&mut line, now);
    push_pair(&mut line, "severity", &event.severity);
    line.push_str(" code=\"0x");
    let code = event.code as u32;
    for shift in (0..8).rev() {
        let digit = (code >> (shift * 4)) & 0xf;
        line.push(char::from_digit(digit, 16).expect("a hex digit"));
    }
    line.push('"');
    push_pair(&mut line, "type", &event.event_type);
    push_pair(&mut line, "origin", event.origin.as_deref().unwrap_or(""));
    for (n, object) in event.associated_objects.iter().enumerate() {
        for (field, value) in [("type", &object.kind), ("id", &object.id)] {
            line.push_str(" associatedObject.");
            push_number(&mut line, n as u32, 1);
            line.push('.');
            line.push_str(field);
            line.push_str("=\"");
            escape_into(&mut line, value);
            line.push('"');
        }
    }
    line.push_str(" arguments=[");
    for (n, argument) in event.arguments.iter().enumerate() {
        if n > 0 {
            line.push(',');
        }
        line.push('"');
        escape_into(&mut line, argument);
        line.push('"');
    }
    line.push(']');
    push_pair(&mut line, "message", event.message.as_deref().unwrap_or(""));
    line
}

/// ` key="value"`, the value escaped.
fn push_pair(line: &mut String, key: &str, value: &str) {
    line.push(' ');
    line.push_str(key);
    line.push_str("=\"");
    escape_into(line, value);
    line.push('"');
}

/// `2026-11-21T10:20:30.123+00:00`
fn push_timestamp(line: &mut String, at: Timestamp) {
    let t = jiff::tz::Offset::UTC.to_datetime(at);
    push_number(line, t.year().max(0) as u32, 4);
    let two_digits = [
        ('-', t.month()),
        ('-', t.day()),
        ('T', t.hour()),
        (':', t.minute()),
        (':', t.second()),
    ];
    for (separator, part) in two_digits {
        line.push(separator);
        push_number(line, part as u32, 2);
    }
    line.push('.');
    push_number(line, t.millisecond() as u32, 3);
    line.push_str("+00:00");
}

/// `value` in decimal, zero-padded to at least `width` digits.
fn push_number(line: &mut String, value: u32, width: usize) {
    use std::fmt::Write;
    // Writing into a String cannot fail.
    let _ = write!(line, "{value:0width$}");
}

/// `value` with quotes, backslashes, newlines, carriage returns and tabs escaped; the runs in
/// between copied whole.
fn escape_into(out: &mut String, value: &str) {
    let mut run = 0;
    for (at, byte) in value.bytes().enumerate() {
        let escaped = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            _ => continue,
        };
        out.push_str(&value[run..at]);
        out.push_str(escaped);
        run = at + 1;
    }
    out.push_str(&value[run..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ObjectRef;
    use drover_domain::dates::parse_utc;

    fn event() -> Event {
        let mut e = Event::new(
            parse_utc("2026-11-21 10:20:30 UTC").unwrap(),
            "VM Provision",
            "INFO",
        );
        e.code = 42;
        e.origin = Some("p\"1\\".into());
        e.associated_objects = vec![ObjectRef {
            kind: "VM".into(),
            id: "vm1".into(),
        }];
        e.arguments = vec!["a".into(), "b\tc".into()];
        e.message = Some("line1\nline2\r".into());
        e
    }

    #[test]
    fn the_documented_line() {
        let now: Timestamp = "2026-11-21T10:20:30.123Z".parse().unwrap();
        assert_eq!(
            format_line(&event(), now),
            r#"2026-11-21T10:20:30.123+00:00 severity="INFO" code="0x0000002a" type="VM Provision" origin="p\"1\\" associatedObject.0.type="VM" associatedObject.0.id="vm1" arguments=["a","b\tc"] message="line1\nline2\r""#
        );
    }

    #[test]
    fn escaping_copies_what_needs_none() {
        let mut out = String::new();
        escape_into(&mut out, "é\"ü\\x\t");
        assert_eq!(out, r#"é\"ü\\x\t"#);
        let mut digits = String::new();
        push_number(&mut digits, 7, 3);
        push_number(&mut digits, 12345, 2);
        assert_eq!(digits, "00712345");
    }

    #[test]
    fn size_rolling_keeps_at_most_keep_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.log");
        let mut log = EventLog::open(LogSettings {
            path: path.clone(),
            rolling: Rolling::Size { max_bytes: 400 },
            keep: 2,
            additive: false,
        })
        .unwrap();
        let now = Timestamp::now();
        for _ in 0..20 {
            log.append(&event(), now).unwrap();
        }
        log.flush().unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() <= 400);
        assert!(dir.path().join("events.log.1").exists());
        assert!(dir.path().join("events.log.2").exists());
        assert!(!dir.path().join("events.log.3").exists());
    }

    #[test]
    fn daily_rolling_names_files_by_day() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.log");
        let mut log = EventLog::open(LogSettings {
            path: path.clone(),
            rolling: Rolling::Daily,
            keep: 1,
            additive: false,
        })
        .unwrap();
        for day in ["2026-11-20", "2026-11-21", "2026-11-22"] {
            let at: Timestamp = format!("{day}T12:00:00Z").parse().unwrap();
            log.append(&event(), at).unwrap();
        }
        log.flush().unwrap();
        assert!(
            !dir.path().join("events.log.2026-11-20").exists(),
            "pruned beyond keep"
        );
        assert!(dir.path().join("events.log.2026-11-21").exists());
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    }
}
