//! Memory per completed record in `MemoryStore`, at 1,000,000 keys:
//! `cargo bench -p idem-bench --bench memory`. Counts bytes through a counting allocator.

use idem_core::{Call, MemoryStore};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const KEYS: u64 = 1_000_000;

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: keep that quick.
    let keys = if std::env::args().any(|a| a == "--bench") {
        KEYS
    } else {
        10_000
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = MemoryStore::new();
    let before = LIVE.load(Ordering::SeqCst);
    rt.block_on(async {
        for i in 0..keys {
            // Keys shaped like real ones: "reminder:user<id>:2026-11-01" (27-33 bytes).
            let key = format!("reminder:user{i}:2026-11-01");
            let _ = Call::new(&store, key)
                .run(async { Ok::<_, std::convert::Infallible>(()) })
                .await
                .unwrap();
        }
    });
    let bytes = LIVE.load(Ordering::SeqCst) - before;
    println!(
        "MemoryStore: {} completed records hold {:.1} MiB: {:.0} bytes per record \
         (key text ~30 bytes, no replay output)",
        store.len(),
        bytes as f64 / (1024.0 * 1024.0),
        bytes as f64 / keys as f64
    );
}
