//! The fuzz binaries' allocator: the system allocator, refusing any single
//! allocation above [`LIMIT`].
//!
//! libFuzzer's `-malloc_limit_mb` needs a sanitizer's malloc hooks, which
//! a stable-toolchain build has none of, so the limit is enforced here: a
//! refused allocation ends in `handle_alloc_error` ("memory allocation of
//! N bytes failed", abort), which libFuzzer records as a crash with its
//! input. Sizes taken from the input before the bytes are there
//! (`Vec::with_capacity(len)`, `vec![0; n]`) show up this way at once,
//! long before `-rss_limit_mb` would notice.

use std::alloc::{GlobalAlloc, Layout, System};

/// Largest single allocation allowed (scripts/fuzz.sh passes the same
/// number as `-malloc_limit_mb`).
pub const LIMIT: usize = 512 << 20;

pub struct Limited;

// SAFETY: every call is forwarded to `System` unchanged, or refused with
// a null pointer (allowed by the GlobalAlloc contract).
unsafe impl GlobalAlloc for Limited {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > LIMIT {
            return std::ptr::null_mut();
        }
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > LIMIT {
            return std::ptr::null_mut();
        }
        System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > LIMIT {
            return std::ptr::null_mut();
        }
        System.realloc(ptr, layout, new_size)
    }
}
