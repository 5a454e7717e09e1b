//! The settings of the HTTP listener and of who may operate the sidecar: `http_listen` (and its
//! older name `metrics_listen`), the admin token (`admin_token`, `admin_token_file`),
//! `console_read_only_open`, and the rule that an Admin API or a console others can reach needs
//! the token (for a Unix socket, checked by the sidecar once the socket exists).

use super::{bad, flag_of, Layers, Origin, SettingsError};

/// The HTTP listener's address: `http_listen`, else its older name `metrics_listen` (both set
/// and different is a mistake).
pub(super) fn http_listen(
    layers: &Layers,
) -> Result<Option<(std::net::SocketAddr, Origin)>, SettingsError> {
    let parse = |example: &str, (v, origin): (String, Origin)| {
        v.trim()
            .parse::<std::net::SocketAddr>()
            .map(|a| (a, origin.clone()))
            .map_err(|_| bad(&origin, format!("{v:?} must be host:port, e.g. {example}")))
    };
    let new = layers
        .pick("http_listen")
        .map(|v| parse("127.0.0.1:8080", v))
        .transpose()?;
    let old = layers
        .pick("metrics_listen")
        .map(|v| parse("127.0.0.1:9090", v))
        .transpose()?;
    match (new, old) {
        (Some((a, _)), Some((b, origin))) if a != b => Err(bad(
            &origin,
            format!(
                "is the older name of http_listen, which is set too (to {a}): keep only http_listen"
            ),
        )),
        (Some(new), _) => Ok(Some(new)),
        (None, old) => Ok(old),
    }
}

/// The admin token (`admin_token` or `admin_token_file`) and `console_read_only_open`; refused
/// when the Admin API or the console can be reached from other hosts without a token. (A Unix
/// socket others can write to is checked once it exists, by the sidecar.)
pub(super) fn access(
    layers: &Layers,
    listen: &str,
    http_listen: Option<&(std::net::SocketAddr, Origin)>,
) -> Result<crate::access::Access, SettingsError> {
    use crate::access::{Access, AdminToken};
    let inline = layers.pick("admin_token");
    let file = layers.pick("admin_token_file");
    let token =
        match (inline, file) {
            (Some(_), Some((_, origin))) => return Err(bad(
                &origin,
                "admin_token is set too: give the token one way, admin_token or admin_token_file",
            )),
            (Some((v, origin)), None) => Some(AdminToken::new(&v).map_err(|m| bad(&origin, m))?),
            (None, Some((path, origin))) => {
                let text = std::fs::read_to_string(path.trim())
                    .map_err(|e| bad(&origin, format!("cannot read {path}: {e}")))?;
                Some(
                    AdminToken::new(&text)
                        .map_err(|m| bad(&origin, format!("the token in {path} {m}")))?,
                )
            }
            (None, None) => None,
        };
    let read_only_open = match layers.pick("console_read_only_open") {
        None => false,
        Some((v, origin)) => match v.trim() {
            "true" => true,
            "false" => false,
            _ => return Err(bad(&origin, format!("{v:?} must be true or false"))),
        },
    };
    if token.is_none() {
        let how = "set admin_token (--admin-token, SHARDCAR_ADMIN_TOKEN) or admin_token_file";
        if let Ok(addr) = listen.parse::<std::net::SocketAddr>() {
            if !addr.ip().is_loopback() {
                let origin = layers
                    .pick("listen")
                    .map_or_else(|| flag_of("listen"), |(_, o)| o);
                return Err(bad(
                    &origin,
                    format!(
                        "{addr} is not a loopback address, so other hosts could use the Admin API: {how}, or listen on 127.0.0.1"
                    ),
                ));
            }
        }
        if let Some((addr, origin)) = http_listen {
            if !addr.ip().is_loopback() {
                return Err(bad(
                    origin,
                    format!(
                        "{addr} is not a loopback address, so other hosts could use the console: {how}, or listen on 127.0.0.1"
                    ),
                ));
            }
        }
    }
    Ok(Access {
        token,
        read_only_open,
    })
}

/// Whether a Unix socket can be used by every user of the host: others may write to it, and
/// may reach it (every directory above it searchable by others).
pub fn world_accessible(socket: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.permissions().mode());
    let Ok(socket_mode) = mode(socket) else {
        return false;
    };
    if socket_mode & 0o002 == 0 {
        return false;
    }
    let absolute = std::path::absolute(socket).unwrap_or_else(|_| socket.to_path_buf());
    absolute
        .ancestors()
        .skip(1)
        .all(|dir| mode(dir).is_ok_and(|m| m & 0o001 != 0))
}

/// Refuses a Unix socket that every user of the host can use when there is no admin token (the
/// Admin API would be theirs), naming `listen`.
///
/// # Errors
/// The setting `listen`, saying why and what to do.
pub fn check_unix_socket(
    listen: &str,
    socket: &std::path::Path,
    access: &crate::access::Access,
) -> Result<(), SettingsError> {
    if access.token.is_some() || !world_accessible(socket) {
        return Ok(());
    }
    Err(bad(
        "listen",
        format!(
            "{listen} is world-accessible (every user may write to the socket), so any of them could use the Admin API: set admin_token (--admin-token, SHARDCAR_ADMIN_TOKEN) or admin_token_file, or keep the socket to its owner and group (umask 007, or a directory others cannot enter)"
        ),
    ))
}
