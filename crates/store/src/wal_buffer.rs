//! A VFS over SQLite's default one that gathers a transaction's writes to the WAL file
//! into one buffer and hands them to the kernel as one `pwrite`.
//!
//! Why: SQLite writes each WAL frame as two writes, a 24-byte header and the page, so a
//! 4,120-byte frame straddles page-cache pages and each frame cost the kernel about three
//! page lookups, dirty-markings and copies (ext4's buffered-write path was the largest
//! part of a commit's CPU time in the 1M-document insert benchmark). Gathered, a frame
//! costs about one.
//!
//! What SQLite sees does not change: a buffered write is in the file before anything can
//! look at the file. The buffer is written
//! - when a transaction's commit frame is complete: its page has followed its header,
//!   or (after SQLite rewrote the checksums of frames it overwrote in place) its header
//!   was written again. So a committed transaction is in the file before SQLite
//!   publishes it to other connections in the wal-index, whatever the `synchronous`
//!   setting,
//! - before `xSync` (so "synced" still means on disk),
//! - before a read of a buffered range, `xFileSize`, `xTruncate`, `xFileControl`,
//!   `xFetch` and `xClose`,
//! - when it is full, or a write is neither an append to it nor inside it.
//!
//! Database, journal and temporary files are the default VFS's own files, untouched.
//! Only files SQLite opens with `SQLITE_OPEN_WAL` get the buffer.

use std::cell::Cell;
use std::ffi::{CStr, c_int, c_void};
use std::mem::offset_of;
use std::ptr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};

use rusqlite::ffi;

/// The name connections open the VFS by.
pub(crate) const VFS_NAME: &CStr = c"drover-wal-buffer";

/// Largest buffer kept before writing: the most the default (unix) VFS writes at once
/// (it masks a larger amount to these 17 bits). A commit of many pages is written in
/// pieces of this size, about 32 frames each.
const CAPACITY: usize = 0x1ffff;

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

/// Bytes SQLite wrote that the default VFS has not been given yet.
struct Pending {
    buffer: Vec<u8>,
    /// The file offset of `buffer[0]`.
    start: i64,
    /// A commit frame's new header is in the buffer: write it out once its page follows.
    commit: bool,
    /// The end of the furthest write since the WAL last started over (SQLite writes the
    /// WAL header at offset 0 then): a header below it belongs to a frame written before.
    written_end: i64,
}

impl Pending {
    fn end(&self) -> i64 {
        self.start + self.buffer.len() as i64
    }

    fn overlaps(&self, offset: i64, amount: c_int) -> bool {
        !self.buffer.is_empty() && offset < self.end() && offset + i64::from(amount) > self.start
    }

    /// Gives the buffer to the default VFS's file and empties it (also when the write
    /// fails: SQLite sees the error and abandons the transaction, whose frames it writes
    /// again).
    ///
    /// # Safety
    /// `base` is the open default-VFS file this buffer belongs to.
    unsafe fn flush(&mut self, base: *mut ffi::sqlite3_file) -> c_int {
        self.commit = false;
        if self.buffer.is_empty() {
            return ffi::SQLITE_OK;
        }
        // SAFETY: per the contract.
        let rc = unsafe { write_through(base, &self.buffer, self.start) };
        self.buffer.clear();
        rc
    }

    /// Takes SQLite's write of `bytes` at `offset`.
    ///
    /// # Safety
    /// As for [`Pending::flush`].
    unsafe fn write(&mut self, base: *mut ffi::sqlite3_file, bytes: &[u8], offset: i64) -> c_int {
        let last = offset + bytes.len() as i64;
        // The page of the commit frame whose header was the last write.
        let commit_page = self.commit && offset == self.end();
        if !self.buffer.is_empty() && offset >= self.start && last <= self.end() {
            // A frame of this transaction written again (SQLite rewrites a page in place).
            let at = (offset - self.start) as usize;
            self.buffer[at..at + bytes.len()].copy_from_slice(bytes);
        } else {
            let too_large = bytes.len() > CAPACITY;
            if !self.buffer.is_empty()
                && (too_large || offset != self.end() || self.buffer.len() + bytes.len() > CAPACITY)
            {
                // SAFETY: per the contract.
                let rc = unsafe { self.flush(base) };
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
            }
            if too_large {
                // More than the default VFS takes at once: not SQLite's way (a frame is at
                // most a 64 KiB page and its header); passed on as it came all the same.
                // SAFETY: per the contract.
                let rc = unsafe { write_through(base, bytes, offset) };
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
            } else {
                if self.buffer.is_empty() {
                    self.start = offset;
                    if self.buffer.capacity() == 0 {
                        self.buffer.reserve_exact(CAPACITY);
                    }
                }
                self.buffer.extend_from_slice(bytes);
            }
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
            // SAFETY: per the contract.
            return unsafe { self.flush(base) };
        }
        ffi::SQLITE_OK
    }
}

/// Gives `bytes` to the default VFS's file `base` at `offset`.
///
/// # Safety
/// `base` is an open file of the default VFS.
unsafe fn write_through(base: *mut ffi::sqlite3_file, bytes: &[u8], offset: i64) -> c_int {
    // SAFETY: per the contract; the default VFS reads `bytes.len()` bytes.
    unsafe {
        let write = (*(*base).pMethods).xWrite.expect("files can be written");
        write(base, bytes.as_ptr().cast(), bytes.len() as c_int, offset)
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
    // followed by the default VFS's file.
    unsafe {
        let base_open = (*base).xOpen.expect("the default VFS opens files");
        if flags & ffi::SQLITE_OPEN_WAL == 0 {
            return base_open(base, name, file, flags, out_flags);
        }
        let wal = file.cast::<WalFile>();
        ptr::addr_of_mut!((*wal).file.pMethods).write(ptr::null());
        let rc = base_open(base, name, base_file(file), flags, out_flags);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        ptr::addr_of_mut!((*wal).pending).write(Pending {
            buffer: Vec::new(),
            start: 0,
            commit: false,
            written_end: 0,
        });
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

/// Writes the buffer of our WAL file `file`.
unsafe fn flush(file: *mut ffi::sqlite3_file) -> c_int {
    unsafe { pending(file).flush(base_file(file)) }
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
        pending(file).write(base_file(file), bytes, offset)
    }
}

unsafe extern "C" fn read(
    file: *mut ffi::sqlite3_file,
    data: *mut c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    unsafe {
        if pending(file).overlaps(offset, amount) {
            let rc = flush(file);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        (base_methods(file).xRead.expect("files can be read"))(
            base_file(file),
            data,
            amount,
            offset,
        )
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    unsafe {
        let written = flush(file);
        let closed = (base_methods(file).xClose.expect("files can be closed"))(base_file(file));
        ptr::drop_in_place(ptr::addr_of_mut!((*file.cast::<WalFile>()).pending));
        if written != ffi::SQLITE_OK {
            written
        } else {
            closed
        }
    }
}

/// Defines a method that writes the buffer, then calls the default VFS's method.
macro_rules! flushing {
    ($name:ident, $method:ident ( $($arg:ident : $ty:ty),* )) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            unsafe {
                let rc = flush(file);
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

unsafe extern "C" fn truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    unsafe {
        let rc = flush(file);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let pending = pending(file);
        pending.written_end = pending.written_end.min(size);
        (base_methods(file)
            .xTruncate
            .expect("files can be truncated"))(base_file(file), size)
    }
}

/// Writes the buffer and syncs the file, remembering (for this thread) when that failed.
/// The transaction SQLite was committing then fails, but its frames may already be in
/// the file with a valid commit frame, and WAL recovery after a restart would take them:
/// its outcome is unknown until a later commit overwrites them (see
/// `SqliteStore::write`).
unsafe extern "C" fn sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    unsafe {
        let mut rc = flush(file);
        if rc == ffi::SQLITE_OK {
            rc = (base_methods(file).xSync.expect("files can be synced"))(base_file(file), flags);
        }
        if rc != ffi::SQLITE_OK {
            SYNC_FAILED.set(true);
        }
        rc
    }
}

thread_local! {
    static SYNC_FAILED: Cell<bool> = const { Cell::new(false) };
}

/// Whether a WAL file's sync failed on this thread since the last call (which clears it).
pub(crate) fn take_sync_failure() -> bool {
    SYNC_FAILED.replace(false)
}

flushing!(file_size, xFileSize(size: *mut i64));
flushing!(file_control, xFileControl(op: c_int, arg: *mut c_void));
flushing!(fetch, xFetch(offset: i64, amount: c_int, out: *mut *mut c_void));
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
    use std::cell::RefCell;

    use proptest::prelude::*;
    use rusqlite::{Connection, OpenFlags};

    use super::*;

    thread_local! {
        /// The fake default-VFS file's content, and the length of every write it was given.
        static FAKE: RefCell<(Vec<u8>, Vec<usize>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    }

    unsafe extern "C" fn fake_write(
        _: *mut ffi::sqlite3_file,
        data: *const c_void,
        amount: c_int,
        offset: i64,
    ) -> c_int {
        let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), amount as usize) };
        FAKE.with_borrow_mut(|(file, writes)| {
            put(file, offset as usize, bytes);
            writes.push(bytes.len());
        });
        ffi::SQLITE_OK
    }

    unsafe extern "C" fn fake_read(
        _: *mut ffi::sqlite3_file,
        data: *mut c_void,
        amount: c_int,
        offset: i64,
    ) -> c_int {
        let out = unsafe { std::slice::from_raw_parts_mut(data.cast::<u8>(), amount as usize) };
        FAKE.with_borrow(|(file, _)| {
            for (i, byte) in out.iter_mut().enumerate() {
                *byte = file.get(offset as usize + i).copied().unwrap_or(0);
            }
        });
        ffi::SQLITE_OK
    }

    static FAKE_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
        iVersion: 1,
        xClose: None,
        xRead: Some(fake_read),
        xWrite: Some(fake_write),
        xTruncate: None,
        xSync: None,
        xFileSize: None,
        xLock: None,
        xUnlock: None,
        xCheckReservedLock: None,
        xFileControl: None,
        xSectorSize: None,
        xDeviceCharacteristics: None,
        xShmMap: None,
        xShmLock: None,
        xShmBarrier: None,
        xShmUnmap: None,
        xFetch: None,
        xUnfetch: None,
    };

    fn put(file: &mut Vec<u8>, offset: usize, bytes: &[u8]) {
        if file.len() < offset + bytes.len() {
            file.resize(offset + bytes.len(), 0);
        }
        file[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    /// One of our WAL files over the fake file.
    fn wal_file() -> Box<WalFile> {
        FAKE.with_borrow_mut(|fake| *fake = (Vec::new(), Vec::new()));
        Box::new(WalFile {
            file: ffi::sqlite3_file { pMethods: &METHODS },
            pending: Pending {
                buffer: Vec::new(),
                start: 0,
                commit: false,
                written_end: 0,
            },
            base_file: ffi::sqlite3_file {
                pMethods: &FAKE_METHODS,
            },
        })
    }

    #[derive(Debug, Clone)]
    enum Op {
        Write { offset: usize, bytes: Vec<u8> },
        Read { offset: usize, len: usize },
    }

    /// Mostly what SQLite does (frame headers, some of them commit frames, and pages
    /// appended; pages rewritten in place), and some of anything.
    fn op() -> impl Strategy<Value = Op> {
        let frame = |n: usize| 32 + n * 4120;
        prop_oneof![
            (0..40usize, any::<bool>()).prop_map(move |(n, commit)| Op::Write {
                offset: frame(n),
                bytes: [
                    vec![1, 2, 3, 4],
                    vec![0, 0, 0, u8::from(commit)],
                    vec![7; 16]
                ]
                .concat(),
            }),
            (0..40usize, any::<u8>()).prop_map(move |(n, b)| Op::Write {
                offset: frame(n) + 24,
                bytes: vec![b; 4096],
            }),
            (
                0..200_000usize,
                prop_oneof![9 => 1..9000usize, 1 => 130_000..140_000usize],
                any::<u8>()
            )
                .prop_map(|(offset, len, b)| Op::Write {
                    offset,
                    bytes: vec![b; len]
                }),
            (0..200_000usize, 1..9000usize).prop_map(|(offset, len)| Op::Read { offset, len }),
        ]
    }

    proptest! {
        #[test]
        fn the_file_reads_as_if_every_write_went_straight_through(
            ops in proptest::collection::vec(op(), 1..120)
        ) {
            let mut wal = wal_file();
            let file: *mut ffi::sqlite3_file = &mut wal.file;
            let mut model = Vec::new();
            let mut large = Vec::new();
            for op in ops {
                match op {
                    Op::Write { offset, bytes } => {
                        let header_of_commit = bytes.len() == FRAME_HEADER && bytes[4..8] != [0; 4];
                        let rc = unsafe { write(file, bytes.as_ptr().cast(), bytes.len() as c_int, offset as i64) };
                        prop_assert_eq!(rc, ffi::SQLITE_OK);
                        put(&mut model, offset, &bytes);
                        if bytes.len() > CAPACITY {
                            large.push(bytes.len());
                        }
                        let flushed = unsafe { pending(file) }.buffer.is_empty();
                        if !header_of_commit && flushed {
                            // Whatever was written is in the file now.
                            let in_file = FAKE.with_borrow(|(f, _)| f[..] == model[..f.len()]);
                            prop_assert!(in_file);
                        }
                    }
                    Op::Read { offset, len } => {
                        let mut out = vec![0u8; len];
                        let rc = unsafe { read(file, out.as_mut_ptr().cast(), len as c_int, offset as i64) };
                        prop_assert_eq!(rc, ffi::SQLITE_OK);
                        let expected: Vec<u8> = (offset..offset + len)
                            .map(|i| model.get(i).copied().unwrap_or(0))
                            .collect();
                        prop_assert_eq!(out, expected);
                    }
                }
                let buffered = unsafe { pending(file) }.buffer.len();
                prop_assert!(buffered <= CAPACITY);
            }
            prop_assert_eq!(unsafe { flush(file) }, ffi::SQLITE_OK);
            FAKE.with_borrow(|(f, writes)| {
                prop_assert_eq!(f, &model);
                // Only a write that came larger than the default VFS takes went on whole.
                prop_assert!(writes.iter().all(|n| *n <= CAPACITY || large.contains(n)));
                Ok(())
            })?;
        }
    }

    /// Writes a transaction of `frames` frames at frame `first` as SQLite does; the last
    /// is the commit frame. Then, if `rewrite`, its header again, as SQLite does after
    /// overwriting pages of the transaction in place.
    unsafe fn transaction(
        file: *mut ffi::sqlite3_file,
        first: usize,
        frames: usize,
        rewrite: bool,
    ) {
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
            unsafe {
                assert_eq!(
                    write(file, header(commit).as_ptr().cast(), 24, at(n)),
                    ffi::SQLITE_OK
                );
                assert_eq!(
                    write(file, page.as_ptr().cast(), 4096, at(n) + 24),
                    ffi::SQLITE_OK
                );
            }
        }
        if rewrite {
            let last = at(first + frames - 1);
            assert_eq!(
                unsafe { write(file, header(1).as_ptr().cast(), 24, last) },
                ffi::SQLITE_OK
            );
        }
    }

    #[test]
    fn a_transaction_is_gathered_and_in_the_file_once_its_commit_frame_is_complete() {
        let mut wal = wal_file();
        let file: *mut ffi::sqlite3_file = &mut wal.file;
        unsafe { transaction(file, 0, 4, false) };
        // Four frames, one write, nothing left behind.
        FAKE.with_borrow(|(f, writes)| {
            assert_eq!(writes, &[4 * 4120]);
            assert_eq!(f.len(), 32 + 4 * 4120);
        });
        assert!(unsafe { pending(file) }.buffer.is_empty());
        // 32 frames: the commit frame's header still fits in the buffer, its page does not.
        // 33: the header does not fit either.
        let mut frames = 4;
        for (n, rewrite) in [(32, false), (33, false), (40, true), (1, true)] {
            unsafe { transaction(file, frames, n, rewrite) };
            frames += n;
            assert!(unsafe { pending(file) }.buffer.is_empty(), "{n} frames");
            FAKE.with_borrow(|(f, writes)| {
                assert_eq!(f.len() as i64, 32 + frames as i64 * 4120);
                assert!(writes.iter().all(|&w| w <= CAPACITY));
            });
        }
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
