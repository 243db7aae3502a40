//! mtl_rustofi: an Open MPI MTL over libfabric with tag matching in Rust.
//!
//! Layers, from Open MPI down:
//! - the C shim (`shim/rustofi_shim.h` lists its files): component
//!   registration, MCA parameters and modex (`rustofi_shim.c`), convertors,
//!   status and request completion (`rustofi_p2p.c`), communicator ids
//!   (`rustofi_excid.c`), enumerated parameters, help messages, output and
//!   MPI_T performance variables (`rustofi_site.c`);
//! - [`ffi`]: the one module that crosses the C boundary (panic guards);
//!   `log` (messages through the shim's hooks), `trace` (the `tracing`
//!   subscriber behind `mtl_rustofi_verbose`) and `pvars` (the table of
//!   MPI_T variables) serve it;
//! - `engine`: MTL calls as commands, behind the thread `handoff`
//!   (progress token and lock-free `inbox`);
//! - `proto`: the protocol core, without I/O: matching ([`matching`]),
//!   per-peer ordering (`order`), the packet format (`wire`), the
//!   protocols, transmit queue and request state; user buffers reach it
//!   as `usermem` values;
//! - `driver`: executes the core's actions on libfabric and reports
//!   their outcomes;
//! - `fabric`: RAII wrappers over libfabric handles (`sys` are the raw
//!   bindings).
//!
//! The crate's public surface is the C boundary ([`ffi`], whose exported
//! functions and `#[repr(C)]` types the shim reaches through the cbindgen
//! header), [`matching`] (for `examples/match_bench.rs`) and, with the
//! `fuzzing` feature, the fuzz targets' entry points; every other
//! module is private and its items are `pub(crate)` (`unreachable_pub`).

mod config;
mod driver;
mod engine;
mod fabric;
pub mod ffi;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod handoff;
mod inbox;
mod log;
pub mod matching;
mod memrelease;
mod nic;
mod order;
mod params;
mod proto;
mod pvars;
mod request;
mod shmfile;
#[cfg(test)]
mod sim;
mod sync;
mod sys;
mod topo;
mod trace;
mod usermem;
mod wire;
