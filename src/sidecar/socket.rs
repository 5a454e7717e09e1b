//! The gRPC listener's Unix socket path: what may be cleared before binding it.

/// Makes room for a Unix socket at `path`: removes a socket left by a process that is gone
/// (nothing accepts on it). Anything else there is left alone and refused: a file that is not a
/// socket, and a socket some running process still accepts on (another sidecar's).
pub(super) fn clear_stale_socket(path: &std::path::Path) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(Error::new(
            ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket; remove it or choose another path",
                path.display()
            ),
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(Error::new(
            ErrorKind::AddrInUse,
            format!(
                "a running process accepts connections on {}; stop it or choose another path",
                path.display()
            ),
        )),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => std::fs::remove_file(path),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::clear_stale_socket;
    use std::io::ErrorKind;

    #[test]
    fn a_socket_nothing_accepts_on_is_removed_and_a_missing_one_is_fine() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grpc.sock");
        clear_stale_socket(&path).expect("nothing there");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists(), "a closed listener leaves its file");
        clear_stale_socket(&path).expect("a stale socket is cleared");
        assert!(!path.exists());
        std::os::unix::net::UnixListener::bind(&path).expect("the path is free again");
    }

    #[test]
    fn a_live_socket_and_a_file_that_is_no_socket_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("live.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&live).unwrap();
        let err = clear_stale_socket(&live).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AddrInUse);
        assert!(
            err.to_string()
                .contains("a running process accepts connections on"),
            "{err}"
        );
        assert!(live.exists());

        let file = dir.path().join("notes.txt");
        std::fs::write(&file, "keep me").unwrap();
        let err = clear_stale_socket(&file).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AlreadyExists);
        assert!(
            err.to_string().contains("exists and is not a socket"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    }
}
