//! Where libfabric's shm provider keeps an endpoint's shared memory.
//!
//! The shm provider (libfabric 1.17) backs each endpoint with a POSIX
//! shared-memory object named after the endpoint's address
//! (`<pid>:<ep>:<n>`, optionally written with an `fi_shm://` or `fi_ns://`
//! scheme), that is `/dev/shm/<pid>:<ep>:<n>`, 16 MiB. It unlinks it when
//! the endpoint closes, and on SIGINT/SIGTERM, but a process killed with
//! SIGKILL leaves it behind; the shim therefore registers the path with the
//! runtime, which removes it when the job ends however the rank ended.

/// Directory where Linux keeps POSIX shared-memory objects.
const SHM_DIR: &str = "/dev/shm/";

/// The file backing an shm endpoint with address `name` (as fi_getname
/// returned it), or `None` if the address does not look like one.
pub(crate) fn segment_path(name: &[u8]) -> Option<String> {
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let name = std::str::from_utf8(&name[..end]).ok()?;
    let bare = name
        .strip_prefix("fi_shm://")
        .or_else(|| name.strip_prefix("fi_ns://"))
        .unwrap_or(name);
    let ok = !bare.is_empty()
        && bare != "."
        && bare != ".."
        && !bare.contains('/')
        && bare.chars().all(|c| c.is_ascii_graphic());
    ok.then(|| format!("{SHM_DIR}{bare}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_map_to_dev_shm() {
        assert_eq!(
            segment_path(b"11641:0:0\0\0").as_deref(),
            Some("/dev/shm/11641:0:0")
        );
        assert_eq!(
            segment_path(b"fi_shm://42:1:0").as_deref(),
            Some("/dev/shm/42:1:0")
        );
        assert_eq!(
            segment_path(b"fi_ns://7:0:0").as_deref(),
            Some("/dev/shm/7:0:0")
        );
        for bad in [
            &b""[..],
            b"\0",
            b"../etc/passwd",
            b"a/b",
            b"..",
            b"\xff\xfe",
            b"a b",
        ] {
            assert_eq!(segment_path(bad), None, "{bad:?}");
        }
    }
}
