//! mtl_rustofi: an Open MPI MTL over libfabric with tag matching in Rust.
//!
//! Layers, from Open MPI down:
//! - `shim/rustofi_shim.c` (C): component registration, MCA parameters,
//!   modex, convertors, status and request completion;
//! - [`ffi`]: the one module that crosses the C boundary (panic guards);
//! - [`engine`]: protocols, progress and request state over
//!   [`matching`] (MPI tag matching), [`order`] (per-peer sequencing) and
//!   [`wire`] (packet format), which are pure Rust;
//! - [`fabric`]: RAII wrappers over libfabric handles ([`sys`] are the raw
//!   bindings).

pub mod config;
pub mod engine;
pub mod fabric;
pub mod ffi;
pub mod inbox;
pub mod log;
pub mod matching;
pub mod order;
pub mod proto;
pub mod request;
#[cfg(test)]
mod sim;
pub mod sync;
pub mod sys;
pub mod usermem;
pub mod wire;
