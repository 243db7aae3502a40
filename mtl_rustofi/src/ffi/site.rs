//! Site integration: the log hooks and the MPI_T performance variables.

use super::*;

/// Routes the library's messages through the shim: called when the
/// component registers, before anything can print.
///
/// # Safety
/// `hooks` must point to a valid structure (it is copied).
#[no_mangle]
pub unsafe extern "C" fn rustofi_set_log_hooks(hooks: *const RustofiLogHooks) -> c_int {
    guard("rustofi_set_log_hooks", || {
        // SAFETY: the contract says `hooks` points to a valid structure;
        // it is copied.
        crate::log::set_hooks(unsafe { *hooks });
        0
    })
}

/// Number of MPI_T performance variables (see `pvars`).
#[no_mangle]
pub extern "C" fn rustofi_pvar_count() -> usize {
    crate::pvars::PVARS.len()
}

/// Name (after `mtl_rustofi_`), description and class of performance
/// variable `index`; the strings are static. -1 if `index` is out of range.
///
/// # Safety
/// `name`, `desc` and `class` must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn rustofi_pvar_info(
    index: usize,
    name: *mut *const c_char,
    desc: *mut *const c_char,
    class: *mut RustofiPvarClass,
) -> c_int {
    guard("rustofi_pvar_info", || {
        let Some(p) = crate::pvars::PVARS.get(index) else {
            return ERR;
        };
        // SAFETY: the contract says the three pointers are valid for
        // writes; the strings written are 'static.
        unsafe {
            *name = p.name.as_ptr();
            *desc = p.desc.as_ptr();
            *class = p.class;
        }
        0
    })
}

/// Current value of performance variable `index` (0 before the engine is
/// open; after finalize, the final value). -1 if `index` is out of range.
///
/// # Safety
/// `value` must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn rustofi_pvar_read(index: usize, value: *mut u64) -> c_int {
    guard("rustofi_pvar_read", || match crate::pvars::read(index) {
        Some(v) => {
            // SAFETY: the contract says `value` is valid for writes.
            unsafe { *value = v };
            0
        }
        None => ERR,
    })
}
