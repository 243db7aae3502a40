//! Atomics, from loom when model checking (`--cfg loom`), else from std.
#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
