//! Messages for the user. Inside Open MPI they go through the shim's hooks
//! (set by [`crate::ffi::rustofi_set_log_hooks`] when the component
//! registers): a problem that stops the component from starting through
//! `opal_show_help` (a topic of `help-mtl-rustofi.txt`, which mpirun
//! aggregates over the ranks), every other line through `opal_output`.
//! Without hooks (unit tests, the simulator) lines go to stderr.

use crate::ffi::RustofiLogHooks;
use std::ffi::{CStr, CString};
use std::io::Write;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, OnceLock};

static HOOKS: Mutex<Option<RustofiLogHooks>> = Mutex::new(None);
/// This process's rank in MPI_COMM_WORLD once known (-1 before).
static RANK: AtomicI64 = AtomicI64::new(-1);

pub(crate) fn set_hooks(hooks: RustofiLogHooks) {
    *HOOKS.lock().unwrap_or_else(|e| e.into_inner()) = Some(hooks);
}

pub(crate) fn set_rank(rank: i64) {
    RANK.store(rank, Ordering::Relaxed);
}

fn hooks() -> Option<RustofiLogHooks> {
    *HOOKS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Topics of `help-mtl-rustofi.txt` (the file beside the component; its
/// `[name]` sections must match these names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Topic {
    /// A parameter has a value the component cannot use.
    BadValue,
    /// `provider_include` empty, or set together with `provider_exclude`.
    ProviderLists,
    /// The provider lists leave no usable provider.
    UnknownProvider,
    /// libfabric offers no reliable-datagram provider at all.
    NoProvider,
    /// `mtl_rustofi_shm on` but libfabric has no shm provider.
    NoShm,
    /// The chosen provider could not be opened.
    OpenFailed,
    /// A panic caught at the C boundary.
    InternalError,
}

impl Topic {
    /// Every topic: the help file's sections are checked against it.
    #[cfg(test)]
    pub(crate) const ALL: &'static [Topic] = &[
        Topic::BadValue,
        Topic::ProviderLists,
        Topic::UnknownProvider,
        Topic::NoProvider,
        Topic::NoShm,
        Topic::OpenFailed,
        Topic::InternalError,
    ];

    pub(crate) fn name(self) -> &'static CStr {
        match self {
            Topic::BadValue => c"bad-value",
            Topic::ProviderLists => c"provider-lists",
            Topic::UnknownProvider => c"unknown-provider",
            Topic::NoProvider => c"no-provider",
            Topic::NoShm => c"no-shm",
            Topic::OpenFailed => c"open-failed",
            Topic::InternalError => c"internal-error",
        }
    }
}

/// `[host:pid rank N]` (`[rank N]` through `opal_output`, which adds host
/// and pid itself), so that lines of many ranks can be told apart.
pub(crate) fn prefix() -> String {
    static HOST: OnceLock<String> = OnceLock::new();
    let host = HOST.get_or_init(|| {
        let mut host = [0u8; 256];
        // SAFETY: gethostname writes at most host.len() bytes into `host`.
        let ok =
            unsafe { libc::gethostname(host.as_mut_ptr() as *mut libc::c_char, host.len()) } == 0;
        let end = host.iter().position(|&b| b == 0).unwrap_or(host.len());
        if ok {
            String::from_utf8_lossy(&host[..end]).into_owned()
        } else {
            "?".into()
        }
    });
    // opal_output already starts its lines with [host:pid].
    let through_opal = hooks().is_some_and(|h| h.output.is_some());
    match (RANK.load(Ordering::Relaxed), through_opal) {
        (r, true) if r >= 0 => format!("[rank {r}]"),
        (_, true) => String::new(),
        (r, false) if r >= 0 => format!("[{host}:{} rank {r}]", std::process::id()),
        (_, false) => format!("[{host}:{}]", std::process::id()),
    }
}

fn c_text(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).expect("NUL bytes replaced")
}

/// Writes one whole line: through `opal_output` inside Open MPI, else with
/// a single write to stderr (so lines forwarded by mpirun never
/// interleave).
pub(crate) fn line(text: &str) {
    match hooks().and_then(|h| h.output) {
        Some(out) => {
            let c = c_text(text);
            // SAFETY: the shim's output hook takes a NUL-terminated string
            // for the duration of the call.
            unsafe { out(c.as_ptr()) }
        }
        None => {
            let _ = std::io::stderr()
                .lock()
                .write_all(format!("{text}\n").as_bytes());
        }
    }
}

#[cfg(any(test, feature = "fuzzing"))]
thread_local! {
    /// Tests that provoke errors on purpose (the protocol simulator, the
    /// fuzz targets) turn the messages off for their thread.
    pub(crate) static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(any(test, feature = "fuzzing"))]
fn quiet() -> bool {
    QUIET.with(|q| q.get())
}

#[cfg(not(any(test, feature = "fuzzing")))]
fn quiet() -> bool {
    false
}

/// A problem that keeps the component from starting: one help message per
/// job where Open MPI aggregates the ranks' identical topics (see the shim).
pub(crate) fn problem(topic: Topic, msg: &str) {
    if quiet() {
        return;
    }
    match hooks().and_then(|h| h.show_help) {
        Some(show) => {
            let c = c_text(msg);
            // SAFETY: the shim's hook takes two NUL-terminated strings for
            // the duration of the call.
            unsafe { show(topic.name().as_ptr(), c.as_ptr()) }
        }
        None => line(format!("{} mtl_rustofi: error: {msg}", prefix()).trim_start()),
    }
}

/// An error during the run the user should see (always printed, each on
/// its own line: distinct errors are not merged).
pub(crate) fn error(msg: &str) {
    if quiet() {
        return;
    }
    line(format!("{} mtl_rustofi: error: {msg}", prefix()).trim_start());
}

/// Something went wrong and was made good: always printed, like an
/// error, so that a site sees a provider that loses packets.
pub(crate) fn warn(msg: &str) {
    if quiet() {
        return;
    }
    line(format!("{} mtl_rustofi: warning: {msg}", prefix()).trim_start());
}

/// An informational line (printed by callers that checked `verbose`).
pub(crate) fn info(msg: &str) {
    line(msg);
}

#[cfg(test)]
mod tests {
    use super::Topic;

    /// Every topic has its section in the help file the shim installs, and
    /// every section takes the same three arguments (host, rank, message).
    #[test]
    fn help_file_has_every_topic() {
        let file = include_str!("../shim/help-mtl-rustofi.txt");
        for t in Topic::ALL {
            let name = t.name().to_str().unwrap();
            let head = format!("[{name}]\n");
            let start = file.find(&head).unwrap_or_else(|| panic!("no [{name}]")) + head.len();
            let body = &file[start..];
            let body = &body[..body.find("\n[").unwrap_or(body.len())];
            let args: Vec<&str> = body
                .match_indices('%')
                .map(|(i, _)| &body[i..i + 2])
                .collect();
            assert_eq!(args, ["%s", "%d", "%s"], "arguments of [{name}]");
        }
    }
}
