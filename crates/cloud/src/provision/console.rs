//! Guests' serial consoles, bounded.
//!
//! QEMU writes a guest's serial console to a unix socket of the VM's directory (the
//! service made it and handed it over); a thread per QEMU process reads it and appends
//! it to the VM's `console.log`, which never grows past its limit: when the next bytes
//! would make it larger, the file is replaced (a new one renamed over it) by its newest
//! half, from the start of a line. The thread also watches its process's output for the
//! image's ready line, and keeps its last few KiB for error messages.
//!
//! A guest that writes without end costs the service one thread's reads (about 4% of a
//! core for 340 KB/s, as fast as an emulated guest writes here) and a rewrite of half
//! the limit now and then. When the thread falls behind, the socket fills and QEMU holds
//! the guest's serial port (the guest waits): nothing queues up unbounded. While no one
//! reads (the service restarting), QEMU drops what the guest writes.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};

/// The console kept by default: the newest 1 MiB.
pub const DEFAULT_CONSOLE_LIMIT: u64 = 1 << 20;
/// The smallest limit taken (a smaller one is raised to it).
pub const MIN_CONSOLE_LIMIT: u64 = 4 << 10;
/// What a process's tap keeps of its newest output, for error messages.
const TAIL: usize = 4096;
/// One read's most. A read takes what has gathered (QEMU sends a byte at a time); not
/// waiting between reads matters: a unix socket holds only a few hundred 1-byte sends.
const READ: usize = 64 << 10;

/// A VM's `console.log`, at most `limit` bytes.
pub(super) struct ConsoleLog {
    path: PathBuf,
    limit: u64,
    file: File,
    /// The file's length (it is written here only).
    len: u64,
}

fn open_log(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

impl ConsoleLog {
    /// Opens (or makes) the log; one larger than the limit (kept by an older service
    /// without one) is cut at once.
    pub(super) fn open(path: &Path, limit: u64) -> std::io::Result<Self> {
        let file = open_log(path)?;
        let mut log = Self {
            path: path.into(),
            limit: limit.max(MIN_CONSOLE_LIMIT),
            len: file.metadata()?.len(),
            file,
        };
        if log.len > log.limit {
            log.append(&[])?;
        }
        Ok(log)
    }

    /// Appends `bytes`, or replaces the file by its newest half when they would make it
    /// larger than the limit.
    pub(super) fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let len = self.len;
        if len + bytes.len() as u64 <= self.limit {
            self.file.write_all(bytes)?;
            self.len += bytes.len() as u64;
            return Ok(());
        }
        let keep = (self.limit / 2) as usize;
        let new = &bytes[bytes.len().saturating_sub(keep)..];
        let old = ((keep - new.len()) as u64).min(len);
        let mut kept = vec![0; old as usize];
        self.file.read_exact_at(&mut kept, len - old)?;
        kept.extend_from_slice(new);
        // From the start of a line: a line cut in two would read as one the guest wrote.
        if let Some(end) = kept.iter().position(|&b| b == b'\n')
            && end + 1 < kept.len()
        {
            kept.drain(..=end);
        }
        let mut name = self.path.clone().into_os_string();
        name.push(".new");
        let fresh = PathBuf::from(name);
        let _ = std::fs::remove_file(&fresh);
        let mut file = open_log(&fresh)?;
        file.write_all(&kept)?;
        std::fs::rename(&fresh, &self.path)?;
        self.file = file;
        self.len = kept.len() as u64;
        Ok(())
    }
}

/// What one QEMU process's console said, as far as its boot needs to know.
pub(super) struct Tap {
    ready_line: Vec<u8>,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    ready: bool,
    ended: bool,
    recent: Vec<u8>,
}

impl Tap {
    /// Whether the process printed its image's ready line.
    pub(super) fn ready(&self) -> bool {
        self.seen.lock().unwrap().ready
    }

    /// Its last lines, for an error message.
    pub(super) fn tail(&self) -> String {
        let seen = self.seen.lock().unwrap();
        let text = String::from_utf8_lossy(&seen.recent[seen.recent.len().saturating_sub(TAIL)..]);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if lines.is_empty() {
            "the console is empty".into()
        } else {
            lines[lines.len().saturating_sub(5)..].join(" | ")
        }
    }

    fn take(&self, bytes: &[u8]) {
        let mut seen = self.seen.lock().unwrap();
        let needle = &self.ready_line[..];
        if !seen.ready && !needle.is_empty() {
            // The line may have begun in the bytes before.
            let carry = seen.recent.len().min(needle.len() - 1);
            let mut window = seen.recent[seen.recent.len() - carry..].to_vec();
            window.extend_from_slice(bytes);
            seen.ready = window.windows(needle.len()).any(|w| w == needle);
        }
        seen.recent.extend_from_slice(bytes);
        // Cut now and then, not at every read: a guest may write a byte at a time.
        let room = TAIL.max(needle.len());
        if seen.recent.len() > 2 * room {
            let cut = seen.recent.len() - room;
            seen.recent.drain(..cut);
        }
    }
}

/// The console of one QEMU process, to be read.
pub(super) struct Feed {
    pub(super) pid: i32,
    /// A connection to its console socket.
    pub(super) stream: UnixStream,
    /// What its boot waits for.
    pub(super) ready_line: Option<String>,
    /// The process, when it is the service's child: reaped once its console ends.
    pub(super) child: Option<Child>,
}

/// The console readers of a provisioner's guests.
pub(super) struct Consoles {
    limit: u64,
    vms: Mutex<HashMap<String, VmConsole>>,
}

struct VmConsole {
    log: Arc<Mutex<ConsoleLog>>,
    /// The processes feeding it: their pid, tap and a handle to end the reading.
    taps: Vec<(i32, Arc<Tap>, UnixStream)>,
}

impl Consoles {
    pub(super) fn new(limit: u64) -> Self {
        Self {
            limit,
            vms: Mutex::default(),
        }
    }

    /// Reads the console of VM `id`'s process `feed` into `log` (its `console.log`) on a
    /// thread of its own.
    pub(super) fn attach(&self, id: &str, log: &Path, feed: Feed) -> std::io::Result<Arc<Tap>> {
        let Feed {
            pid,
            stream,
            ready_line,
            child,
        } = feed;
        let tap = Arc::new(Tap {
            ready_line: ready_line.unwrap_or_default().into_bytes(),
            seen: Mutex::default(),
        });
        let handle = stream.try_clone()?;
        let mut vms = self.vms.lock().unwrap();
        let console = match vms.entry(id.to_string()) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(new) => new.insert(VmConsole {
                log: Arc::new(Mutex::new(ConsoleLog::open(log, self.limit)?)),
                taps: Vec::new(),
            }),
        };
        console
            .taps
            .retain(|(_, tap, _)| !tap.seen.lock().unwrap().ended);
        let (log, reader) = (console.log.clone(), tap.clone());
        std::thread::Builder::new()
            .name(format!("console {id}"))
            .spawn(move || pump(stream, &log, &reader, child))?;
        console.taps.push((pid, tap.clone(), handle));
        Ok(tap)
    }

    /// Whether the console of VM `id`'s process `pid` is read.
    pub(super) fn attached(&self, id: &str, pid: i32) -> bool {
        self.vms.lock().unwrap().get(id).is_some_and(|console| {
            console
                .taps
                .iter()
                .any(|(p, tap, _)| *p == pid && !tap.seen.lock().unwrap().ended)
        })
    }

    /// Forgets VM `id` (destroyed): a new VM of that name starts a new log, and a late
    /// reader of the old one writes to the old (removed) file.
    pub(super) fn forget(&self, id: &str) {
        self.vms.lock().unwrap().remove(id);
    }
}

impl Drop for Consoles {
    /// Stops the reading (the guests run on): a provisioner made after this one, in the
    /// same process, reads their consoles when it adopts them.
    fn drop(&mut self) {
        for console in self.vms.lock().unwrap().values() {
            for (_, _, handle) in &console.taps {
                let _ = handle.shutdown(Shutdown::Both);
            }
        }
    }
}

fn pump(mut stream: UnixStream, log: &Mutex<ConsoleLog>, tap: &Tap, child: Option<Child>) {
    let mut buffer = vec![0; READ];
    let mut failed = false;
    loop {
        let n = match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        tap.take(&buffer[..n]);
        // A full disk must not stop the guest: the console is read on, and said once.
        if let Err(e) = log.lock().unwrap().append(&buffer[..n])
            && !std::mem::replace(&mut failed, true)
        {
            eprintln!("drover: a guest's console cannot be written: {e}");
        }
    }
    tap.seen.lock().unwrap().ended = true;
    if let Some(mut child) = child {
        let _ = child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_its_newest_half_from_a_line_start_when_full() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("console.log");
        let mut log = ConsoleLog::open(&path, 0).unwrap();
        assert_eq!(log.limit, MIN_CONSOLE_LIMIT);
        let limit = MIN_CONSOLE_LIMIT as usize;
        for n in 0..10_000 {
            log.append(format!("line {n}\n").as_bytes()).unwrap();
            assert!(std::fs::metadata(&path).unwrap().len() <= limit as u64);
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("line ") && text.ends_with("line 9999\n"),
            "{text}"
        );
        assert!(text.len() >= limit / 2 - 16, "{}", text.len());
        // One write larger than the limit: its end is kept.
        let big = vec![b'x'; limit * 3];
        log.append(&big).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), vec![b'x'; limit / 2]);
        assert!(!dir.path().join("console.log.new").exists());
    }

    #[test]
    fn a_tap_finds_a_ready_line_cut_across_reads_and_keeps_a_tail() {
        let tap = Tap {
            ready_line: b"GUEST-READY".to_vec(),
            seen: Mutex::default(),
        };
        assert_eq!(tap.tail(), "the console is empty");
        tap.take(b"booting\nGUEST-RE");
        assert!(!tap.ready());
        tap.take(b"ADY 6.1\n");
        assert!(tap.ready());
        tap.take(&vec![b'.'; TAIL * 3]);
        assert_eq!(tap.seen.lock().unwrap().recent.len(), TAIL);
    }
}
