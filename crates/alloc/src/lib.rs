//! The memory allocator of Drover's binaries: mimalloc, asked for plain blocks where it can.
//!
//! mimalloc instead of the C library's allocator: the service allocates and frees many
//! small objects from several threads, where glibc's malloc spent a fifth of the request
//! time and fragmented a large job book (`scripts/bench-jobs`).
//!
//! The `mimalloc` crate hands every request to `mi_malloc_aligned`, whose fast path only
//! covers blocks up to 1 KiB: a larger block whose size class is not a power of two took a
//! path that over-allocates by the alignment and marks its page as holding interior
//! pointers. Every mimalloc block is aligned to 16 bytes when it is 16 bytes or larger,
//! and to 8 otherwise, as the C library's `malloc`: so, like the standard library's
//! `System` allocator, a request whose alignment is at most 16 and at most its size gets a
//! plain `mi_malloc` (per v2 job submission, `scripts/bench-instructions`: 139k → 137k
//! instructions, mostly in the HTTP workers); others keep the aligned calls.
//!
//! [`Metered`] wraps it to count what each thread holds, which bounds the memory of a
//! plugin's script call (`meter`).

#![no_std]

// The meter's per-thread counts are thread-locals.
extern crate std;

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;

use libmimalloc_sys as mi;

mod meter;
pub use meter::{Metered, held_by_this_thread, metering};

/// Put it in place, metered, with `#[global_allocator] static A: drover_alloc::Metered<drover_alloc::Mimalloc> = drover_alloc::Metered(drover_alloc::Mimalloc);`.
pub struct Mimalloc;

/// The alignment every block of at least this size has (the C `max_align_t`).
const PLAIN_ALIGN: usize = 16;

/// Whether a plain block of `size` bytes is aligned as `align` requires.
fn plain_suffices(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

// SAFETY: every block comes from mimalloc and goes back to it; plain calls are made only
// where mimalloc's own guarantee gives the alignment asked for.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let (size, align) = (layout.size(), layout.align());
        // SAFETY: plain FFI calls; a null answer is how both report exhaustion.
        unsafe {
            if plain_suffices(align, size) {
                mi::mi_malloc(size).cast()
            } else {
                mi::mi_malloc_aligned(size, align).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let (size, align) = (layout.size(), layout.align());
        // SAFETY: as in `alloc`.
        unsafe {
            if plain_suffices(align, size) {
                mi::mi_zalloc(size).cast()
            } else {
                mi::mi_zalloc_aligned(size, align).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, hence from mimalloc.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let align = layout.align();
        // SAFETY: `ptr` came from this allocator; the new block keeps the alignment.
        unsafe {
            if plain_suffices(align, new_size) {
                mi::mi_realloc(ptr.cast(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast(), new_size, align).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_have_the_alignment_asked_for_and_keep_their_bytes() {
        let a = Mimalloc;
        let aligned = |p: *mut u8, align: usize| !p.is_null() && (p as usize).is_multiple_of(align);
        for align in [1, 2, 8, 16, 32, 64, 4096] {
            for size in [1, 7, 8, 15, 16, 24, 100, 1000, 1025, 1500, 3000, 70_000] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: every block is used within its size and freed with its layout.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(aligned(p, align), "{size} {align}");
                    p.write_bytes(0xa5, size);
                    // Grown, then shrunk: the bytes stay and so does the alignment.
                    let grown = a.realloc(p, layout, size * 3);
                    assert!(aligned(grown, align), "{size} grown, {align}");
                    assert!((0..size).all(|i| *grown.add(i) == 0xa5));
                    let grown_layout = Layout::from_size_align(size * 3, align).unwrap();
                    let shrunk = a.realloc(grown, grown_layout, size.div_ceil(2));
                    assert!(aligned(shrunk, align), "{size} shrunk, {align}");
                    assert!((0..size.div_ceil(2)).all(|i| *shrunk.add(i) == 0xa5));
                    a.dealloc(
                        shrunk,
                        Layout::from_size_align(size.div_ceil(2), align).unwrap(),
                    );

                    let z = a.alloc_zeroed(layout);
                    assert!(aligned(z, align), "zeroed {size} {align}");
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    a.dealloc(z, layout);
                }
            }
        }
    }
}
