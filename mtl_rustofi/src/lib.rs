//! mtl_rustofi: an Open MPI MTL over libfabric with tag matching in Rust.
//!
//! Layers, from Open MPI down:
//! - `shim/rustofi_shim.c` (C): component registration, MCA parameters,
//!   modex, convertors, status and request completion;
//! - [`ffi`]: the one module that crosses the C boundary (panic guards);
//! - `engine`: protocols, progress and request state over
//!   [`matching`] (MPI tag matching), `order` (per-peer sequencing) and
//!   `wire` (packet format), which are pure Rust;
//! - `fabric`: RAII wrappers over libfabric handles (`sys` are the raw
//!   bindings).
//!
//! The crate's public surface is the C boundary ([`ffi`], whose exported
//! functions and `#[repr(C)]` types the shim reaches through the cbindgen
//! header) and [`matching`] (for `examples/match_bench.rs`); every other
//! module is private and its items are `pub(crate)` (`unreachable_pub`).

mod config;
// The engine is being rewritten into a protocol core and a driver; until
// then its `pub` items are crate-internal in fact.
#[allow(unreachable_pub)]
mod engine;
mod fabric;
pub mod ffi;
mod inbox;
mod log;
pub mod matching;
mod order;
mod request;
mod sync;
mod sys;
mod wire;
