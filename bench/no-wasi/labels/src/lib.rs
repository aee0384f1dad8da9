//! The labels plugin's own source, with an allocator whose arena is in the
//! initial memory: Rust's allocator on wasm32-unknown-unknown grows memory
//! for its first allocation, which made a fresh instance's call slower
//! than with WASI (31 µs against 25 µs) and hid what dropping the imports
//! saves. The arena is fixed (768 KiB, enough for the bench Pod): this is
//! a measurement, not a plugin to run.

#[path = "../../../../plugins/labels/src/lib.rs"]
mod labels;

static mut ARENA: [u8; 3 << 18] = [0; 3 << 18];

#[global_allocator]
static ALLOCATOR: talc::Talck<talc::locking::AssumeUnlockable, talc::ClaimOnOom> =
    talc::Talc::new(unsafe {
        // SAFETY: the arena is used by this allocator only.
        talc::ClaimOnOom::new(talc::Span::from_array(
            core::ptr::addr_of!(ARENA).cast_mut(),
        ))
    })
    .lock();
