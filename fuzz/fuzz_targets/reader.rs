//! One fuzz target for every reader in `tests/support/readers.rs`, chosen by the environment
//! variable `VRAMSCOPE_FUZZ_READER` (`scripts/fuzz` sets it), so a new reader needs no new target.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/readers.rs"]
#[allow(dead_code, reason = "the regression tests use the seed helpers")]
mod readers;

/// The largest single allocation, in bytes (libFuzzer's `-malloc_limit_mb`, default 2 GiB).
static MAX_ALLOCATION_BYTES: AtomicUsize = AtomicUsize::new(2048 << 20);

/// libFuzzer's `-malloc_limit_mb` needs a sanitizer's allocator hooks, which this build (no
/// sanitizer, for speed) lacks; this allocator enforces it instead. An allocation above the
/// limit (a reader reserving by a length the input claims) aborts, which libFuzzer reports as a
/// crash and keeps the input of.
struct Limited;

impl Limited {
    fn check(size: usize) {
        if size > MAX_ALLOCATION_BYTES.load(Ordering::Relaxed) {
            // No allocation on this path: a fixed message, then abort.
            let _ = std::io::stderr()
                .write_all(b"==vramscope-fuzz== an allocation above -malloc_limit_mb\n");
            std::process::abort();
        }
    }
}

// SAFETY: every call is passed on unchanged to the system allocator, after a check that
// allocates nothing.
unsafe impl GlobalAlloc for Limited {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::check(new_size);
        // SAFETY: the caller's contract for `realloc` is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc` is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Limited = Limited;

/// The reader named by `VRAMSCOPE_FUZZ_READER`; a missing or unknown name stops the run with the
/// list of names.
fn chosen() -> &'static readers::Reader {
    static CHOSEN: OnceLock<&'static readers::Reader> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        let names: Vec<_> = readers::READERS.iter().map(|r| r.name).collect();
        let name = std::env::var("VRAMSCOPE_FUZZ_READER").unwrap_or_default();
        match readers::reader(&name) {
            Some(reader) => reader,
            None => {
                eprintln!("set VRAMSCOPE_FUZZ_READER to one of {names:?} (got {name:?})");
                std::process::exit(2);
            }
        }
    })
}

/// The allocation limit from the last `-malloc_limit_mb=N` on the command line (libFuzzer's
/// rule: the last of a flag counts).
fn take_allocation_limit() {
    let limit_mb = std::env::args()
        .filter_map(|arg| arg.strip_prefix("-malloc_limit_mb=")?.parse::<usize>().ok())
        .next_back();
    if let Some(limit_mb) = limit_mb.filter(|&mb| mb > 0) {
        MAX_ALLOCATION_BYTES.store(limit_mb.saturating_mul(1 << 20), Ordering::Relaxed);
    }
}

fuzz_target!(
    init: {
        take_allocation_limit();
        chosen();
    },
    |bytes: &[u8]| {
        (chosen().read)(bytes);
    }
);
