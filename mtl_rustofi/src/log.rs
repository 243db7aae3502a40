//! Messages for the user, written to stderr with the host and process id so
//! that lines from many ranks can be told apart.

use std::io::Write;
use std::sync::OnceLock;

fn prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let mut host = [0u8; 256];
        // SAFETY: gethostname writes at most host.len() bytes into `host`.
        let ok =
            unsafe { libc::gethostname(host.as_mut_ptr() as *mut libc::c_char, host.len()) } == 0;
        let end = host.iter().position(|&b| b == 0).unwrap_or(host.len());
        let host = if ok {
            String::from_utf8_lossy(&host[..end]).into_owned()
        } else {
            "?".into()
        };
        format!("[{host}:{}]", std::process::id())
    })
}

/// Writes one whole line with a single write, so lines of different ranks
/// forwarded by mpirun never interleave.
fn line(text: String) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

#[cfg(any(test, feature = "fuzzing"))]
thread_local! {
    /// Tests that provoke errors on purpose (the protocol simulator, the
    /// fuzz targets) turn the messages off for their thread.
    pub(crate) static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// An error the user should see (always printed).
pub(crate) fn error(msg: &str) {
    #[cfg(any(test, feature = "fuzzing"))]
    if QUIET.with(|q| q.get()) {
        return;
    }
    line(format!("{} mtl_rustofi: error: {msg}\n", prefix()));
    tracing::error!("{msg}");
}

/// An informational line (printed by callers that checked `verbose`).
pub(crate) fn info(msg: &str) {
    line(format!("{msg}\n"));
}
