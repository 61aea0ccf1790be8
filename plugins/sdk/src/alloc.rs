//! The guest's allocator: a free list per power-of-two size class up to 4 KiB over the
//! default allocator. A `place` call allocates and frees about a dozen small buffers
//! (the lists the host lowers, wit-bindgen's lifted copies, the answer); dlmalloc spent
//! ~650 fuel units a call on them, a third of the SDK's share of a call, and talc more
//! (plugins/RATIONALE.md). Blocks are reused, never returned: a plugin's footprint is
//! its peak of small buffers, far below the host's memory cap.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;

/// 16 B, 32 B, … 4 KiB.
const CLASSES: usize = 9;

pub struct SizeClasses(UnsafeCell<[*mut u8; CLASSES]>);

// A Wasm guest has one thread (the SDK builds without the atomics feature).
unsafe impl Sync for SizeClasses {}

impl SizeClasses {
    pub const fn new() -> Self {
        Self(UnsafeCell::new([std::ptr::null_mut(); CLASSES]))
    }
}

impl Default for SizeClasses {
    fn default() -> Self {
        Self::new()
    }
}

fn class(l: &Layout) -> Option<usize> {
    if l.align() > 16 || l.size() > 16 << (CLASSES - 1) {
        return None;
    }
    let size = l.size().max(16);
    Some((usize::BITS - (size - 1).leading_zeros()) as usize - 4)
}

unsafe impl GlobalAlloc for SizeClasses {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let Some(c) = class(&l) else { return unsafe { System.alloc(l) } };
        // SAFETY: one thread; no reference to the heads outlives this call.
        let heads = unsafe { &mut *self.0.get() };
        let head = heads[c];
        if head.is_null() {
            // SAFETY: 16 << c is a non-zero multiple of 16.
            return unsafe { System.alloc(Layout::from_size_align_unchecked(16 << c, 16)) };
        }
        // SAFETY: a free block's first word holds the next free block of its class.
        heads[c] = unsafe { *(head as *mut *mut u8) };
        head
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        let Some(c) = class(&l) else { return unsafe { System.dealloc(p, l) } };
        // SAFETY: as in `alloc`; `p` is a block of class `c` (16-aligned, ≥ 16 bytes).
        let heads = unsafe { &mut *self.0.get() };
        unsafe { *(p as *mut *mut u8) = heads[c] };
        heads[c] = p;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_map_to_the_smallest_class_that_holds_them() {
        let c = |size, align| class(&Layout::from_size_align(size, align).unwrap());
        assert_eq!([c(1, 1), c(16, 8), c(17, 8), c(24, 8), c(4096, 16)], [Some(0), Some(0), Some(1), Some(1), Some(8)]);
        assert_eq!((c(4097, 8), c(64, 32)), (None, None));
    }

    #[test]
    fn a_freed_block_is_the_next_one_of_its_class() {
        let a = SizeClasses::new();
        let l = Layout::from_size_align(40, 8).unwrap();
        unsafe {
            let p = a.alloc(l);
            let q = a.alloc(l);
            assert_ne!(p, q);
            a.dealloc(p, l);
            // Another size in the same class (33..=64 bytes) reuses it.
            let l2 = Layout::from_size_align(64, 16).unwrap();
            assert_eq!(a.alloc(l2), p);
            let big = Layout::from_size_align(10_000, 8).unwrap();
            let b = a.alloc(big);
            assert!(!b.is_null());
            a.dealloc(b, big);
            a.dealloc(p, l2);
            a.dealloc(q, l);
        }
    }
}
