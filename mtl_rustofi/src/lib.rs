//! mtl_rustofi: an Open MPI MTL over libfabric with tag matching in Rust.
//!
//! Layers, from Open MPI down:
//! - `shim/rustofi_shim.c` (C): component registration, MCA parameters,
//!   modex, convertors, status and request completion;
//! - [`ffi`]: the one module that crosses the C boundary (panic guards);
//! - [`engine`]: MTL calls as commands, behind the thread [`handoff`]
//!   (progress token and lock-free [`inbox`]);
//! - [`proto`]: the protocol core, without I/O: matching ([`matching`]),
//!   per-peer ordering ([`order`]), the packet format ([`wire`]), the
//!   protocols, transmit queue and request state; user buffers reach it
//!   as [`usermem`] values;
//! - [`driver`]: executes the core's actions on libfabric and reports
//!   their outcomes;
//! - [`fabric`]: RAII wrappers over libfabric handles ([`sys`] are the raw
//!   bindings).

pub mod config;
pub mod driver;
pub mod engine;
pub mod fabric;
pub mod ffi;
pub mod handoff;
pub mod inbox;
pub mod log;
pub mod matching;
pub mod order;
pub mod proto;
pub mod request;
pub mod sync;
pub mod sys;
pub mod usermem;
pub mod wire;
