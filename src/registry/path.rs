//! Path rules shared by both stores: absolute, '/'-separated, no empty, "." or ".." components,
//! no trailing slash (except the root).

use super::{Error, Result};

/// Checks `path` against ZooKeeper's path rules.
pub(crate) fn validate(path: &str) -> Result<()> {
    if path == "/" {
        return Ok(());
    }
    let bad = |why: &str| Err(Error::Other(format!("invalid path {path:?}: {why}")));
    if !path.starts_with('/') {
        return bad("must start with '/'");
    }
    if path.ends_with('/') {
        return bad("must not end with '/'");
    }
    for component in path[1..].split('/') {
        match component {
            "" => return bad("empty component"),
            "." | ".." => return bad("relative components are not allowed"),
            c if c.contains('\0') => return bad("NUL character"),
            _ => {}
        }
    }
    Ok(())
}

/// The parent of a valid non-root path, and the last component.
pub(crate) fn split(path: &str) -> (&str, &str) {
    let idx = path.rfind('/').unwrap_or(0);
    let parent = if idx == 0 { "/" } else { &path[..idx] };
    (parent, &path[idx + 1..])
}

/// `parent` joined with a child `name`.
pub(crate) fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// Whether `path` is `root` or below it.
pub(crate) fn is_within(path: &str, root: &str) -> bool {
    root == "/"
        || path == root
        || (path.len() > root.len()
            && path.starts_with(root)
            && path.as_bytes()[root.len()] == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_table() {
        for ok in [
            "/",
            "/a",
            "/a/b",
            "/a.b/c-d_0000000001",
            "/job/leader/election/latch",
        ] {
            assert!(validate(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a", "/a/", "//a", "/a//b", "/a/./b", "/a/..", "/a\0"] {
            assert!(matches!(validate(bad), Err(Error::Other(_))), "{bad:?}");
        }
    }

    #[test]
    fn split_join_within() {
        assert_eq!(split("/a"), ("/", "a"));
        assert_eq!(split("/a/b/c"), ("/a/b", "c"));
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a/b", "c"), "/a/b/c");
        assert!(is_within("/a/b", "/a"));
        assert!(is_within("/a", "/a"));
        assert!(is_within("/anything", "/"));
        assert!(!is_within("/ab", "/a"));
        assert!(!is_within("/a", "/a/b"));
    }
}
