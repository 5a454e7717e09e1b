//! Who may operate the namespace through this sidecar: the admin token, checked the same way by
//! the Admin API (`api::auth`) and the console (`web::session`).
//!
//! The token is required whenever the Admin API or the console can be reached by other hosts or
//! users (a listen address that is not loopback, a Unix socket others can write to): the
//! settings refuse to start without one then (`config`). When one is configured it is always
//! required, whatever the address. The Worker API, `/metrics` and the health probes never need
//! it. Tokens are compared in constant time ([`subtle`]), so the time a wrong guess takes says
//! nothing about how much of it was right.

use subtle::ConstantTimeEq;

/// The shortest admin token accepted: a guessable token would protect nothing.
pub const MIN_TOKEN_LEN: usize = 16;

/// A secret bearer token. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

impl AdminToken {
    /// A token from its text, surrounding whitespace (a file's newline) removed.
    ///
    /// # Errors
    /// A message when it is shorter than [`MIN_TOKEN_LEN`] or contains whitespace or control
    /// characters (it travels in an HTTP header).
    pub fn new(text: &str) -> Result<AdminToken, String> {
        let token = text.trim();
        if token.chars().count() < MIN_TOKEN_LEN {
            return Err(format!(
                "must be at least {MIN_TOKEN_LEN} characters long (e.g. the output of `openssl rand -hex 32`)"
            ));
        }
        if token
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || !c.is_ascii())
        {
            return Err(
                "must be printable ASCII without spaces (it is sent in an HTTP header)".into(),
            );
        }
        Ok(AdminToken(token.to_string()))
    }

    /// Whether `presented` is this token, compared in constant time (for a given length).
    pub fn matches(&self, presented: &str) -> bool {
        constant_time_eq(&self.0, presented)
    }

    /// The token itself, to send it (`shardcar ctl`, tests).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// Whether two secrets are equal, in a time that depends on their lengths only.
pub fn constant_time_eq(expected: &str, presented: &str) -> bool {
    expected.as_bytes().ct_eq(presented.as_bytes()).into()
}

/// Why a caller is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// No token was presented.
    Missing,
    /// The token presented is not the admin token.
    Wrong,
}

impl Denied {
    /// A message for the caller (never echoing what was sent).
    pub fn message(self) -> &'static str {
        match self {
            Denied::Missing => {
                "this sidecar requires the admin token: send `authorization: Bearer <token>` (shardcar ctl --token or SHARDCAR_TOKEN)"
            }
            Denied::Wrong => "the admin token presented is not this sidecar's",
        }
    }
}

/// The access policy of one sidecar.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// The admin token; `None`: operations are open (the settings allow that only on loopback).
    pub token: Option<AdminToken>,
    /// The console's read-only pages need no token (`console_read_only_open`).
    pub read_only_open: bool,
}

impl Access {
    /// Whether operations need the token.
    pub fn token_required(&self) -> bool {
        self.token.is_some()
    }

    /// Whether reading (the console's pages) needs the token.
    pub fn read_requires_token(&self) -> bool {
        self.token.is_some() && !self.read_only_open
    }

    /// Checks an `authorization` header value (`Bearer <token>`; `None`: absent).
    ///
    /// # Errors
    /// [`Denied`] when a token is required and this is not it.
    pub fn check_bearer(&self, authorization: Option<&str>) -> Result<(), Denied> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        let presented = authorization
            .map(str::trim)
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(Denied::Missing)?;
        if token.matches(presented) {
            Ok(())
        } else {
            Err(Denied::Wrong)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> Access {
        Access {
            token: Some(AdminToken::new("0123456789abcdef-secret").unwrap()),
            read_only_open: false,
        }
    }

    #[test]
    fn bearer_tokens_are_checked() {
        let a = access();
        assert_eq!(a.check_bearer(None), Err(Denied::Missing));
        assert_eq!(a.check_bearer(Some("Basic abc")), Err(Denied::Missing));
        assert_eq!(a.check_bearer(Some("Bearer ")), Err(Denied::Missing));
        assert_eq!(
            a.check_bearer(Some("Bearer 0123456789abcdef-secreT")),
            Err(Denied::Wrong)
        );
        assert_eq!(
            a.check_bearer(Some("Bearer 0123456789abcdef")),
            Err(Denied::Wrong)
        );
        assert_eq!(
            a.check_bearer(Some("Bearer 0123456789abcdef-secret")),
            Ok(())
        );
        assert_eq!(Access::default().check_bearer(None), Ok(()));
    }

    #[test]
    fn tokens_are_validated_and_never_shown() {
        assert!(AdminToken::new("short").is_err());
        assert!(AdminToken::new("0123456789abcdef ghi").is_err());
        let t = AdminToken::new(" 0123456789abcdef\n").unwrap();
        assert_eq!(t.expose(), "0123456789abcdef");
        assert!(!format!("{t:?}").contains("0123"));
    }
}
