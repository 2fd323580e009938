//! The bytes each thread holds, as the global allocator sees them. A plugin's script runs
//! on one thread, so what it holds (its values, their map keys, strings and arrays, and
//! whatever the engine allocates for it) is what that thread allocated during the call and
//! has not freed: counting it there leaves no way of growing uncounted.
//!
//! [`Metered`] wraps a binary's allocator: every block allocated, grown, shrunk or freed
//! moves the current thread's count by its size. A block freed on another thread than the
//! one that allocated it moves each thread's count once, so only the difference between
//! two readings on one thread means anything.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::Cell;
use std::sync::OnceLock;

std::thread_local! {
    // Const and without a destructor: reading it never allocates and never fails.
    static HELD: Cell<isize> = const { Cell::new(0) };
}

/// The global allocator `A`, counting what each thread holds.
pub struct Metered<A>(pub A);

#[inline]
fn count(bytes: isize) {
    let _ = HELD.try_with(|held| held.set(held.get().wrapping_add(bytes)));
}

/// `block`, with `bytes` counted if it was given (a null block is a failure).
#[inline]
fn counted(block: *mut u8, bytes: isize) -> *mut u8 {
    if !block.is_null() {
        count(bytes);
    }
    block
}

/// The bytes this thread has allocated and not freed, counted from an arbitrary start:
/// the difference between two readings is what it came to hold between them.
#[inline]
pub fn held_by_this_thread() -> isize {
    HELD.try_with(Cell::get).unwrap_or(0)
}

/// Whether the global allocator is [`Metered`] (without it the count never moves).
pub fn metering() -> bool {
    static ANSWER: OnceLock<bool> = OnceLock::new();
    *ANSWER.get_or_init(|| {
        let before = held_by_this_thread();
        let probe = core::hint::black_box(std::boxed::Box::new(0u64));
        let moved = held_by_this_thread() != before;
        drop(probe);
        moved
    })
}

// SAFETY: every call goes to `A` as it came; counting only reads the layouts.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Metered<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees are passed on.
        counted(unsafe { self.0.alloc(layout) }, layout.size() as isize)
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        counted(
            unsafe { self.0.alloc_zeroed(layout) },
            layout.size() as isize,
        )
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as in `alloc`.
        unsafe { self.0.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let grown = new_size as isize - layout.size() as isize;
        // SAFETY: as in `alloc`.
        counted(unsafe { self.0.realloc(ptr, layout, new_size) }, grown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_counts_what_it_allocates_and_frees() {
        let metered = Metered(crate::Mimalloc);
        let layout = Layout::from_size_align(1000, 8).unwrap();
        // Another thread takes its readings before and after this one's blocks (a
        // barrier's wait allocates nothing).
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let other = std::thread::spawn({
            let barrier = barrier.clone();
            move || {
                let start = held_by_this_thread();
                barrier.wait();
                barrier.wait();
                held_by_this_thread() - start
            }
        });
        barrier.wait();
        let start = held_by_this_thread();
        // SAFETY: the block is freed with the layout it was allocated and grown with.
        unsafe {
            let block = metered.alloc(layout);
            assert_eq!(held_by_this_thread() - start, 1000);
            let grown = metered.realloc(block, layout, 5000);
            assert_eq!(held_by_this_thread() - start, 5000);
            metered.dealloc(grown, Layout::from_size_align(5000, 8).unwrap());
        }
        assert_eq!(held_by_this_thread(), start);
        barrier.wait();
        assert_eq!(other.join().unwrap(), 0, "another thread's count moved");
        // This test binary's own allocator is not metered.
        assert!(!metering());
    }
}
