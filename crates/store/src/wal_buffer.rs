//! A VFS over SQLite's default one whose WAL files are written in large pieces, by a
//! thread of their own, while SQLite goes on preparing the next frames.
//!
//! Why: SQLite writes each WAL frame as two writes, a 24-byte header and the page, so a
//! 4,120-byte frame straddles page-cache pages and each frame cost the kernel about three
//! page lookups, dirty-markings and copies; with the `fdatasync` that starts the
//! writeback, that was the largest part of a commit's CPU time in the 1M-document insert
//! benchmark, all of it on the one thread that can write. Here SQLite's writes to a WAL
//! file gather in a buffer, written with one `pwrite` through a file handle of our own.
//! A transaction of many frames fills buffers before it commits: each full one goes to a
//! background thread, which writes it and asks the kernel to start writing it back
//! (`sync_file_range`) while SQLite prepares the next, so that the commit's `fdatasync`
//! mostly waits. A small commit's buffer is written by SQLite's thread (a thread switch
//! per commit cost the server more than it saved).
//!
//! What SQLite sees does not change: a write is in the file before anything can look at
//! the file. SQLite's thread writes out the buffer and waits until every piece is written
//! - when a transaction's commit frame is complete: its page has followed its header,
//!   or (after SQLite rewrote the checksums of frames it overwrote in place) its header
//!   was written again. So a committed transaction is in the file before SQLite
//!   publishes it to other connections in the wal-index, whatever the `synchronous`
//!   setting;
//! - before `xSync` (so "synced" still means on disk: SQLite's own `fdatasync` of the
//!   file covers what the other handle wrote, the page cache being the inode's);
//! - before `xRead`, `xFileSize`, `xTruncate`, `xFileControl`, `xFetch` and `xClose`.
//!
//! A failed background write is answered to the next of those (`SQLITE_IOERR_WRITE`),
//! at the latest to the commit, which SQLite then abandons.
//!
//! Database, journal and temporary files are the default VFS's own files, untouched.
//! Only files SQLite opens with `SQLITE_OPEN_WAL` get the buffer, and only a handle that
//! writes (the store's one writer connection) starts a thread.

use std::collections::VecDeque;
use std::ffi::{CStr, c_int, c_void};
use std::fs::File;
use std::mem::offset_of;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;

use rusqlite::ffi;

/// The name connections open the VFS by.
pub(crate) const VFS_NAME: &CStr = c"drover-wal-buffer";

/// A buffer this full goes to the background thread: about 64 frames of 4 KiB pages.
const CAPACITY: usize = 256 * 1024;

/// Buffers handed over and not yet written, at most: SQLite waits for the thread beyond.
const MAX_QUEUED: usize = 16;

/// Size of a WAL frame header; a header's bytes 4..8 are nonzero in a commit frame.
const FRAME_HEADER: usize = 24;

/// The VFS the buffer sits on (SQLite's default, `unix`).
static BASE: AtomicPtr<ffi::sqlite3_vfs> = AtomicPtr::new(ptr::null_mut());

/// Registers the VFS once per process; answers its name, or why it could not be registered.
pub(crate) fn register() -> Result<&'static CStr, String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| unsafe { register_once() })
        .clone()
        .map(|()| VFS_NAME)
}

unsafe fn register_once() -> Result<(), String> {
    // SAFETY: sqlite3_vfs_find initializes SQLite if needed; the default VFS lives as long
    // as the process.
    let base = unsafe { ffi::sqlite3_vfs_find(ptr::null()) };
    if base.is_null() {
        return Err("SQLite has no default VFS".into());
    }
    BASE.store(base, Ordering::Release);
    // A copy of the default VFS (its pAppData too, which its methods read), with our own
    // name, file size and open: every other method is the default's, given our VFS.
    let mut vfs = unsafe { *base };
    vfs.pNext = ptr::null_mut();
    vfs.zName = VFS_NAME.as_ptr();
    vfs.szOsFile += offset_of!(WalFile, base_file) as c_int;
    vfs.xOpen = Some(open);
    // Registered VFSes must outlive every connection: leaked on purpose, once.
    let vfs = Box::leak(Box::new(vfs));
    match unsafe { ffi::sqlite3_vfs_register(vfs, 0) } {
        ffi::SQLITE_OK => Ok(()),
        rc => Err(format!(
            "cannot register the WAL buffer VFS (SQLite code {rc})"
        )),
    }
}

/// What SQLite allocates for a file of this VFS (`szOsFile` bytes). A WAL file starts
/// with our methods and buffer, and the default VFS's file follows at `base_file`. Any
/// other file is the default VFS's file alone, placed at the start of the allocation.
#[repr(C)]
struct WalFile {
    file: ffi::sqlite3_file,
    pending: Pending,
    /// The default VFS's file; its struct continues past this field (`szOsFile`).
    base_file: ffi::sqlite3_file,
}

/// What SQLite wrote to one WAL file and the file may not have yet.
struct Pending {
    path: PathBuf,
    buffer: Vec<u8>,
    /// The file offset of `buffer[0]`.
    start: i64,
    /// A commit frame's new header is in the buffer: hand over once its page follows.
    commit: bool,
    /// The end of the furthest write since the WAL last started over (SQLite writes the
    /// WAL header at offset 0 then): a header below it belongs to a frame written before.
    written_end: i64,
    /// Our own handle on the file, opened at the first write-out.
    file: Option<Arc<File>>,
    /// Started when SQLite writes a buffer's worth without committing.
    writer: Option<Background>,
}

impl Pending {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            buffer: Vec::new(),
            start: 0,
            commit: false,
            written_end: 0,
            file: None,
            writer: None,
        }
    }

    fn end(&self) -> i64 {
        self.start + self.buffer.len() as i64
    }

    /// Takes SQLite's write of `bytes` at `offset`.
    fn write(&mut self, bytes: &[u8], offset: i64) -> c_int {
        let last = offset + bytes.len() as i64;
        // The page of the commit frame whose header was the last write.
        let commit_page = self.commit && offset == self.end();
        if !self.buffer.is_empty() && offset >= self.start && last <= self.end() {
            // A frame of this transaction written again (SQLite rewrites a page in place).
            let at = (offset - self.start) as usize;
            self.buffer[at..at + bytes.len()].copy_from_slice(bytes);
        } else {
            if !self.buffer.is_empty() && offset != self.end() {
                let rc = self.hand_over(false);
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
            }
            if self.buffer.is_empty() {
                self.start = offset;
            }
            self.buffer.extend_from_slice(bytes);
        }
        let rewritten = last < self.written_end;
        self.written_end = if offset == 0 {
            last
        } else {
            self.written_end.max(last)
        };
        let complete = if bytes.len() == FRAME_HEADER && bytes[4..8] != [0; 4] {
            // A commit frame's header: new (its page follows), or written again after
            // SQLite rewrote the checksums of the transaction's frames (nothing follows).
            self.commit = !rewritten;
            rewritten
        } else {
            commit_page
        };
        if complete {
            return self.settle();
        }
        if self.buffer.len() >= CAPACITY {
            return self.hand_over(false);
        }
        ffi::SQLITE_OK
    }

    /// Writes out the buffer and waits until everything handed over is in the file.
    fn settle(&mut self) -> c_int {
        self.hand_over(true)
    }

    /// Writes out the buffer: with `wait`, before answering, itself when the background
    /// thread is idle (the usual small commit: no thread switch); else by the background
    /// thread (started if need be). Answers the error of a failed write, once.
    fn hand_over(&mut self, wait: bool) -> c_int {
        self.commit = false;
        match self.write_out(wait) {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) => {
                eprintln!(
                    "drover: writing the WAL {} failed: {e}",
                    self.path.display()
                );
                ffi::SQLITE_IOERR_WRITE
            }
        }
    }

    fn write_out(&mut self, wait: bool) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return match &self.writer {
                Some(writer) if wait => writer.wait_idle(),
                _ => Ok(()),
            };
        }
        let file = match &self.file {
            Some(file) => file.clone(),
            None => {
                let opened = std::fs::OpenOptions::new().write(true).open(&self.path);
                let file = Arc::new(opened.inspect_err(|_| self.buffer.clear())?);
                self.file = Some(file.clone());
                file
            }
        };
        if wait && !self.writer.as_ref().is_some_and(Background::busy) {
            let written = file.write_all_at(&self.buffer, self.start as u64);
            self.buffer.clear();
            let earlier = self.writer.as_ref().map_or(Ok(()), Background::take_error);
            return written.and(earlier);
        }
        let writer = match &mut self.writer {
            Some(writer) => writer,
            None => self.writer.insert(Background::start(file)?),
        };
        self.buffer = writer.submit(self.start, std::mem::take(&mut self.buffer));
        if wait {
            writer.wait_idle()
        } else {
            writer.take_error()
        }
    }
}

/// A thread writing buffers to a WAL file through its own handle, in the order given.
struct Background {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    changed: Condvar,
}

#[derive(Default)]
struct Queue {
    /// Buffers to write, with their file offsets, oldest first.
    waiting: VecDeque<(i64, Vec<u8>)>,
    /// The thread is writing one (taken off `waiting`).
    writing: bool,
    /// The first write that failed since SQLite was last told.
    failed: Option<std::io::Error>,
    /// Written buffers, emptied, for SQLite's thread to fill again.
    spare: Vec<Vec<u8>>,
    closing: bool,
}

impl Background {
    fn start(file: Arc<File>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("sqlite-wal-write".into())
            .spawn(move || theirs.run(&file))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Queues `buffer` for offset `start` (waiting while the queue is full); answers an
    /// empty buffer to fill next.
    fn submit(&self, start: i64, buffer: Vec<u8>) -> Vec<u8> {
        let mut queue = self.shared.queue.lock().unwrap();
        while queue.waiting.len() >= MAX_QUEUED {
            queue = self.shared.changed.wait(queue).unwrap();
        }
        queue.waiting.push_back((start, buffer));
        let spare = queue.spare.pop();
        drop(queue);
        self.shared.changed.notify_all();
        spare.unwrap_or_else(|| Vec::with_capacity(CAPACITY + 8 * 1024))
    }

    /// Waits until every queued buffer is written; answers a failed write's error.
    fn wait_idle(&self) -> std::io::Result<()> {
        let mut queue = self.shared.queue.lock().unwrap();
        while queue.writing || !queue.waiting.is_empty() {
            queue = self.shared.changed.wait(queue).unwrap();
        }
        queue.failed.take().map_or(Ok(()), Err)
    }

    /// A failed write's error, not told before.
    fn take_error(&self) -> std::io::Result<()> {
        self.shared
            .queue
            .lock()
            .unwrap()
            .failed
            .take()
            .map_or(Ok(()), Err)
    }

    /// Whether a buffer is queued or being written.
    fn busy(&self) -> bool {
        let queue = self.shared.queue.lock().unwrap();
        queue.writing || !queue.waiting.is_empty()
    }
}

impl Shared {
    fn run(&self, file: &File) {
        let mut queue = self.queue.lock().unwrap();
        loop {
            let Some((start, mut buffer)) = queue.waiting.pop_front() else {
                if queue.closing {
                    return;
                }
                queue = self.changed.wait(queue).unwrap();
                continue;
            };
            queue.writing = true;
            drop(queue);
            let written = file.write_all_at(&buffer, start as u64);
            if written.is_ok() {
                // Start the writeback now, so that the commit's fdatasync mostly waits for
                // it rather than doing it. Only a hint: errors are the fdatasync's to tell.
                // SAFETY: a valid descriptor and range; the call reads no memory of ours.
                unsafe {
                    libc::sync_file_range(
                        file.as_raw_fd(),
                        start,
                        buffer.len() as i64,
                        libc::SYNC_FILE_RANGE_WRITE,
                    )
                };
            }
            buffer.clear();
            queue = self.queue.lock().unwrap();
            queue.writing = false;
            if let Err(e) = written {
                queue.failed.get_or_insert(e);
            }
            queue.spare.push(buffer);
            self.changed.notify_all();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.shared.queue.lock().unwrap().closing = true;
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let base = BASE.load(Ordering::Acquire);
    // SAFETY: BASE was set before the VFS was registered; `file` has room for our header
    // followed by the default VFS's file; a WAL file always has a name.
    unsafe {
        let base_open = (*base).xOpen.expect("the default VFS opens files");
        if flags & ffi::SQLITE_OPEN_WAL == 0 || name.is_null() {
            return base_open(base, name, file, flags, out_flags);
        }
        let wal = file.cast::<WalFile>();
        ptr::addr_of_mut!((*wal).file.pMethods).write(ptr::null());
        let rc = base_open(base, name, base_file(file), flags, out_flags);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(CStr::from_ptr(name).to_bytes()));
        ptr::addr_of_mut!((*wal).pending).write(Pending::new(path));
        ptr::addr_of_mut!((*wal).file.pMethods).write(&METHODS);
        rc
    }
}

/// The default VFS's file inside ours, with the provenance of SQLite's whole allocation.
unsafe fn base_file(file: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    // SAFETY: `file` is one of our WAL files, which holds the default VFS's at this offset.
    unsafe { file.cast::<u8>().add(offset_of!(WalFile, base_file)).cast() }
}

/// The default VFS's methods for the file inside ours.
unsafe fn base_methods(file: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    // SAFETY: the default VFS set its methods when it opened the file.
    unsafe { &*(*base_file(file)).pMethods }
}

/// Our WAL file's pending writes.
unsafe fn pending<'a>(file: *mut ffi::sqlite3_file) -> &'a mut Pending {
    // SAFETY: `file` is one of our open WAL files; SQLite uses a file from one thread
    // at a time.
    unsafe { &mut *ptr::addr_of_mut!((*file.cast::<WalFile>()).pending) }
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: SQLite passes `amount` readable bytes at `data`.
    unsafe {
        let bytes = std::slice::from_raw_parts(data.cast::<u8>(), amount as usize);
        pending(file).write(bytes, offset)
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    unsafe {
        let written = pending(file).settle();
        let closed = (base_methods(file).xClose.expect("files can be closed"))(base_file(file));
        // Stops the background thread.
        ptr::drop_in_place(ptr::addr_of_mut!((*file.cast::<WalFile>()).pending));
        if written != ffi::SQLITE_OK {
            written
        } else {
            closed
        }
    }
}

/// Defines a method that settles the pending writes, then calls the default VFS's method.
macro_rules! settling {
    ($name:ident, $method:ident ( $($arg:ident : $ty:ty),* )) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            unsafe {
                let rc = pending(file).settle();
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
                (base_methods(file).$method.expect(stringify!($method)))(base_file(file) $(, $arg)*)
            }
        }
    };
}

/// Defines a method that calls the default VFS's method as it is.
macro_rules! forwarding {
    ($name:ident, $method:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> $ret {
            unsafe { (base_methods(file).$method.expect(stringify!($method)))(base_file(file) $(, $arg)*) }
        }
    };
}

settling!(read, xRead(data: *mut c_void, amount: c_int, offset: i64));
settling!(sync, xSync(flags: c_int));
settling!(file_size, xFileSize(size: *mut i64));
settling!(file_control, xFileControl(op: c_int, arg: *mut c_void));
settling!(fetch, xFetch(offset: i64, amount: c_int, out: *mut *mut c_void));
forwarding!(lock, xLock(level: c_int) -> c_int);
forwarding!(unlock, xUnlock(level: c_int) -> c_int);
forwarding!(check_reserved_lock, xCheckReservedLock(out: *mut c_int) -> c_int);
forwarding!(sector_size, xSectorSize() -> c_int);
forwarding!(device_characteristics, xDeviceCharacteristics() -> c_int);
forwarding!(shm_map, xShmMap(region: c_int, size: c_int, extend: c_int, out: *mut *mut c_void) -> c_int);
forwarding!(shm_lock, xShmLock(offset: c_int, n: c_int, flags: c_int) -> c_int);
forwarding!(shm_barrier, xShmBarrier() -> ());
forwarding!(shm_unmap, xShmUnmap(delete: c_int) -> c_int);
forwarding!(unfetch, xUnfetch(offset: i64, page: *mut c_void) -> c_int);

unsafe extern "C" fn truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    unsafe {
        let pending = pending(file);
        let rc = pending.settle();
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        pending.written_end = pending.written_end.min(size);
        (base_methods(file)
            .xTruncate
            .expect("files can be truncated"))(base_file(file), size)
    }
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rusqlite::{Connection, OpenFlags};

    use super::*;

    fn put(file: &mut Vec<u8>, offset: usize, bytes: &[u8]) {
        if file.len() < offset + bytes.len() {
            file.resize(offset + bytes.len(), 0);
        }
        file[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    /// An empty file in a new directory, and the pending writes of a WAL handle on it.
    fn wal_file() -> (tempfile::TempDir, PathBuf, Pending) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db-wal");
        std::fs::write(&path, b"").unwrap();
        let pending = Pending::new(path.clone());
        (dir, path, pending)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Write { offset: usize, bytes: Vec<u8> },
        Settle,
    }

    /// Mostly what SQLite does (frame headers, some of them commit frames, and pages
    /// appended; pages rewritten in place), and some of anything.
    fn op() -> impl Strategy<Value = Op> {
        let frame = |n: usize| 32 + n * 4120;
        prop_oneof![
            4 => (0..80usize, any::<bool>()).prop_map(move |(n, commit)| Op::Write {
                offset: frame(n),
                bytes: [vec![1, 2, 3, 4], vec![0, 0, 0, u8::from(commit)], vec![7; 16]].concat(),
            }),
            4 => (0..80usize, any::<u8>()).prop_map(move |(n, b)| Op::Write {
                offset: frame(n) + 24,
                bytes: vec![b; 4096],
            }),
            2 => (0..400_000usize, prop_oneof![9 => 1..9000usize, 1 => 200_000..300_000usize], any::<u8>())
                .prop_map(|(offset, len, b)| Op::Write { offset, bytes: vec![b; len] }),
            1 => Just(Op::Settle),
        ]
    }

    proptest! {
        #[test]
        fn once_settled_the_file_holds_every_write_in_order(
            ops in proptest::collection::vec(op(), 1..150)
        ) {
            let (_dir, path, mut pending) = wal_file();
            let mut model = Vec::new();
            for op in ops {
                match op {
                    Op::Write { offset, bytes } => {
                        prop_assert_eq!(pending.write(&bytes, offset as i64), ffi::SQLITE_OK);
                        put(&mut model, offset, &bytes);
                    }
                    Op::Settle => {
                        prop_assert_eq!(pending.settle(), ffi::SQLITE_OK);
                        prop_assert!(std::fs::read(&path).unwrap() == model);
                    }
                }
                prop_assert!(pending.buffer.len() < CAPACITY + 300_000);
            }
            prop_assert_eq!(pending.settle(), ffi::SQLITE_OK);
            prop_assert!(std::fs::read(&path).unwrap() == model);
        }
    }

    /// Writes a transaction of `frames` frames at frame `first` as SQLite does; the last
    /// is the commit frame. Then, if `rewrite`, its header again, as SQLite does after
    /// overwriting pages of the transaction in place.
    fn transaction(pending: &mut Pending, first: usize, frames: usize, rewrite: bool) {
        let header = |commit: u8| {
            [
                [0, 0, 0, 9],
                [0, 0, 0, commit],
                [5; 4],
                [5; 4],
                [5; 4],
                [5; 4],
            ]
            .concat()
        };
        let page = vec![3u8; 4096];
        let at = |n: usize| 32 + n as i64 * 4120;
        for n in first..first + frames {
            let commit = u8::from(n + 1 == first + frames);
            assert_eq!(pending.write(&header(commit), at(n)), ffi::SQLITE_OK);
            assert_eq!(pending.write(&page, at(n) + 24), ffi::SQLITE_OK);
        }
        if rewrite {
            let last = at(first + frames - 1);
            assert_eq!(pending.write(&header(1), last), ffi::SQLITE_OK);
        }
    }

    #[test]
    fn a_transaction_is_in_the_file_once_its_commit_frame_is_complete() {
        let (_dir, path, mut pending) = wal_file();
        let mut frames = 0;
        // 63 frames fit in a buffer, 64 fill it exactly, 65 take two.
        for (n, rewrite) in [
            (4, false),
            (63, false),
            (64, false),
            (65, false),
            (200, true),
            (1, true),
        ] {
            transaction(&mut pending, frames, n, rewrite);
            frames += n;
            // Nothing settled it but the commit frame.
            assert!(pending.buffer.is_empty(), "{n} frames");
            let len = std::fs::metadata(&path).unwrap().len();
            assert_eq!(len, 32 + frames as u64 * 4120, "{n} frames");
        }
    }

    #[test]
    fn a_failed_write_is_answered_once() {
        // Every write to /dev/full fails.
        let mut pending = Pending::new(PathBuf::from("/dev/full"));
        // A small write, which settling writes itself; then a buffer's worth, which goes
        // to the thread (its failure is told by the write or, later, by settling).
        for size in [100, CAPACITY + 1] {
            let told = [pending.write(&vec![1; size], 0), pending.settle()];
            let failed = told.iter().filter(|&&rc| rc == ffi::SQLITE_IOERR_WRITE);
            assert_eq!(failed.count(), 1, "{size} bytes: {told:?}");
            assert!(
                told.iter()
                    .all(|&rc| rc == ffi::SQLITE_OK || rc == ffi::SQLITE_IOERR_WRITE)
            );
            assert_eq!(pending.settle(), ffi::SQLITE_OK);
        }
        assert!(pending.writer.is_some());
    }

    fn connect(path: &std::path::Path, cache_pages: i64) -> Connection {
        let conn =
            Connection::open_with_flags_and_vfs(path, OpenFlags::default(), register().unwrap())
                .unwrap();
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF; PRAGMA cache_size = {cache_pages};"
        ))
        .unwrap();
        conn
    }

    /// A copy of the database and its WAL as they are in the file system now, as a crash
    /// of this process would leave them, opened.
    fn copy_as_after_a_crash(dir: &std::path::Path, path: &std::path::Path) -> Connection {
        let copy = dir.join("copy.db");
        std::fs::copy(path, &copy).unwrap();
        std::fs::copy(path.with_extension("db-wal"), dir.join("copy.db-wal")).unwrap();
        connect(&copy, 100)
    }

    #[test]
    fn sqlite_reads_back_pages_it_spilled_and_commits_land_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        // A cache of 10 pages: a transaction of 3,000 rows spills pages to the WAL and
        // reads them back before it commits, and its commit spans many buffers.
        let writer = connect(&path, 10);
        writer
            .execute_batch(
                "CREATE TABLE t (n INTEGER PRIMARY KEY, pad TEXT); CREATE INDEX t_pad ON t (pad)",
            )
            .unwrap();
        writer.execute_batch("BEGIN").unwrap();
        for n in 0..3000 {
            writer
                .execute(
                    "INSERT INTO t VALUES (?1, ?2)",
                    rusqlite::params![n, format!("{:0>300}", n * 7919 % 3001)],
                )
                .unwrap();
        }
        let sum: i64 = writer
            .query_row("SELECT sum(length(pad)) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sum, 3000 * 300);
        writer.execute_batch("COMMIT").unwrap();
        // synchronous=OFF: nothing syncs, so only the commit-frame rules put the
        // transaction in the file.
        let reader = connect(&path, 100);
        let copied = copy_as_after_a_crash(dir.path(), &path);
        for conn in [&reader, &copied] {
            let (count, check): (i64, String) = conn
                .query_row("SELECT (SELECT count(*) FROM t), (SELECT group_concat(integrity_check) FROM pragma_integrity_check)", [], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap();
            assert_eq!((count, check.as_str()), (3000, "ok"));
        }
    }
}
