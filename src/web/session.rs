//! Who is looking at the console, and whether they may act.
//!
//! With an admin token ([`crate::access`]) a browser logs in once by typing it: the
//! sidecar keeps a random session id (in memory, for [`SESSION_TTL`]) in an `HttpOnly`,
//! `SameSite=Strict` cookie, never the token. Scripts may send `Authorization: Bearer` instead.
//! Every action is a POST that carries the session's CSRF token (a page of another site cannot
//! read it), so a logged-in browser cannot be made to act by a link elsewhere. Without a token
//! (loopback only: the settings refuse anything else) the pages are open, actions carry the
//! process's CSRF token, and only loopback host names are served, so that a page of another
//! site cannot reach the console by rebinding its own name to 127.0.0.1.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Form, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use rand::Rng;

use crate::access::{constant_time_eq, Denied};

use super::html::{esc, layout, Nav};
use super::Web;

/// How long a login lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Logins kept at once; the oldest goes first.
const MAX_SESSIONS: usize = 10_000;

/// What a request may do.
#[derive(Debug, Clone, Default)]
pub struct Viewer {
    /// May act (the action buttons are shown).
    pub can_act: bool,
    /// The CSRF token its forms carry.
    pub csrf: String,
    /// Logged in with a session (a "Log out" button is shown).
    pub logged_in: bool,
    /// May log in (a token is configured and this one is not logged in).
    pub can_log_in: bool,
}

#[derive(Debug, Clone)]
struct Session {
    csrf: String,
    expires: Instant,
}

/// The logins of this sidecar, and the CSRF token used when there is no admin token.
pub struct Sessions {
    /// Locked only to look up, insert or remove; never across an await.
    by_id: Mutex<HashMap<String, Session>>,
    process_csrf: String,
    /// The cookie's name carries the port: sidecars on one host share the browser's cookies.
    cookie: String,
}

#[allow(
    clippy::disallowed_methods,
    reason = "browser session ids and CSRF tokens are random: an I/O edge"
)]
fn random_hex() -> String {
    let bytes: [u8; 32] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sessions {
    pub fn new(port: u16) -> Sessions {
        Sessions {
            by_id: Mutex::new(HashMap::new()),
            process_csrf: random_hex(),
            cookie: format!("shardcar_session_{port}"),
        }
    }

    #[cfg(test)]
    pub fn process_csrf_for_tests(&self) -> &str {
        &self.process_csrf
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "browser sessions expire on the clock: an I/O edge"
    )]
    fn start(&self) -> (String, Session) {
        let id = random_hex();
        let session = Session {
            csrf: random_hex(),
            expires: Instant::now() + SESSION_TTL,
        };
        let mut all = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        all.retain(|_, s| s.expires > now);
        if all.len() >= MAX_SESSIONS {
            if let Some(oldest) = all
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone())
            {
                all.remove(&oldest);
            }
        }
        all.insert(id.clone(), session.clone());
        (id, session)
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "browser sessions expire on the clock: an I/O edge"
    )]
    fn get(&self, id: &str) -> Option<Session> {
        let all = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        all.get(id).filter(|s| s.expires > Instant::now()).cloned()
    }

    fn end(&self, id: &str) {
        let mut all = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        all.remove(id);
    }

    fn cookie_value<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == self.cookie)
            .map(|(_, value)| value)
    }

    fn session(&self, headers: &HeaderMap) -> Option<(String, Session)> {
        let id = self.cookie_value(headers)?;
        self.get(id).map(|s| (id.to_string(), s))
    }
}

/// Whether the request names this host by a loopback name (`localhost`, `127.x.y.z`, `[::1]`).
fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    let name = name.to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn forbidden_host() -> Response {
    (
        StatusCode::MISDIRECTED_REQUEST,
        "This console has no admin token, so it answers only to loopback names \
         (http://127.0.0.1:PORT/ or http://localhost:PORT/). Set admin_token to serve it under other names.\n",
    )
        .into_response()
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

/// 401 for a browser (the login page) and for a script (`WWW-Authenticate`).
fn unauthorized(web: &Web, denied: Denied, next: &str) -> Response {
    let message = match denied {
        Denied::Missing => "Log in with the admin token to use this console.",
        Denied::Wrong => "That is not this sidecar's admin token.",
    };
    let mut response = (
        StatusCode::UNAUTHORIZED,
        axum::response::Html(login_page(web, message, next)),
    )
        .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(r#"Bearer realm="shardcar""#),
    );
    response
}

fn login_page(web: &Web, message: &str, next: &str) -> String {
    let body = format!(
        r#"<h1>Log in</h1>
<p id="login-message">{message}</p>
<form method="post" action="/login" class="login">
<input type="hidden" name="next" value="{next}">
<label for="token">Admin token</label>
<input type="password" id="token" name="token" autocomplete="current-password" autofocus required>
<button type="submit" id="login">Log in</button>
</form>
<p class="hint">The token is the sidecar's <code>admin_token</code> (or the contents of <code>admin_token_file</code>).</p>"#,
        message = esc(message),
        next = esc(next),
    );
    let viewer = Viewer::default();
    layout(&web.header(), &viewer, Nav::None, "Log in", None, &body)
}

/// Who may read: the request's viewer, or the response that refuses it.
///
/// # Errors
/// 421 for a name other than loopback without a token; 401 when reading needs the token.
#[allow(clippy::result_large_err)]
pub fn read(web: &Web, headers: &HeaderMap, path: &str) -> Result<Viewer, Response> {
    let access = &web.access;
    if !access.token_required() {
        if !loopback_host(headers) {
            return Err(forbidden_host());
        }
        return Ok(Viewer {
            can_act: true,
            csrf: web.sessions.process_csrf.clone(),
            logged_in: false,
            can_log_in: false,
        });
    }
    if let Some((_, session)) = web.sessions.session(headers) {
        return Ok(Viewer {
            can_act: true,
            csrf: session.csrf,
            logged_in: true,
            can_log_in: false,
        });
    }
    match access.check_bearer(bearer(headers)) {
        Ok(()) => Ok(Viewer {
            can_act: true,
            csrf: String::new(),
            logged_in: false,
            can_log_in: false,
        }),
        Err(_) if access.read_only_open && bearer(headers).is_none() => Ok(Viewer {
            can_act: false,
            csrf: String::new(),
            logged_in: false,
            can_log_in: true,
        }),
        Err(denied) => Err(unauthorized(web, denied, path)),
    }
}

/// Who may act: a valid bearer token, or a session (or, without a token, any loopback caller)
/// whose form carries its CSRF token.
///
/// # Errors
/// 401 without a valid token or session; 403 when the form's CSRF token is wrong.
#[allow(clippy::result_large_err)]
pub fn act(
    web: &Web,
    headers: &HeaderMap,
    csrf: Option<&str>,
    back: &str,
) -> Result<Viewer, Response> {
    let access = &web.access;
    let csrf_ok = |expected: &str| csrf.is_some_and(|c| constant_time_eq(expected, c));
    let stale = || {
        (
            StatusCode::FORBIDDEN,
            "This form is stale or was not sent from the console (its CSRF token does not match): reload the page and try again.\n",
        )
            .into_response()
    };
    if !access.token_required() {
        if !loopback_host(headers) {
            return Err(forbidden_host());
        }
        if !csrf_ok(&web.sessions.process_csrf) {
            return Err(stale());
        }
        return read(web, headers, back);
    }
    if bearer(headers).is_some() {
        return match access.check_bearer(bearer(headers)) {
            Ok(()) => Ok(Viewer {
                can_act: true,
                ..Viewer::default()
            }),
            Err(denied) => Err(unauthorized(web, denied, back)),
        };
    }
    let Some((_, session)) = web.sessions.session(headers) else {
        return Err(unauthorized(web, Denied::Missing, back));
    };
    if !csrf_ok(&session.csrf) {
        return Err(stale());
    }
    Ok(Viewer {
        can_act: true,
        csrf: session.csrf,
        logged_in: true,
        can_log_in: false,
    })
}

/// Where to go after logging in: a path of this console only.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.to_string(),
        _ => "/".to_string(),
    }
}

#[derive(serde::Deserialize)]
pub struct NextQuery {
    next: Option<String>,
}

/// `GET /login`.
pub async fn login_form(
    State(web): State<Arc<Web>>,
    Query(q): Query<NextQuery>,
    headers: HeaderMap,
) -> Response {
    let next = safe_next(q.next.as_deref());
    if !web.access.token_required() || web.sessions.session(&headers).is_some() {
        return Redirect::to(&next).into_response();
    }
    axum::response::Html(login_page(&web, "Log in with the admin token.", &next)).into_response()
}

#[derive(serde::Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

/// `POST /login`: the token typed in; a session cookie when it is right.
pub async fn login(State(web): State<Arc<Web>>, Form(form): Form<LoginForm>) -> Response {
    let next = safe_next(form.next.as_deref());
    let Some(token) = &web.access.token else {
        return Redirect::to(&next).into_response();
    };
    if !token.matches(form.token.trim()) {
        tracing::warn!("console login refused: wrong admin token");
        return unauthorized(&web, Denied::Wrong, &next);
    }
    let (id, _) = web.sessions.start();
    let cookie = format!(
        "{}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        web.sessions.cookie,
        SESSION_TTL.as_secs()
    );
    let mut response = Redirect::to(&next).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

#[derive(serde::Deserialize)]
pub struct LogoutForm {
    csrf: Option<String>,
}

/// `POST /logout`.
pub async fn logout(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Form(form): Form<LogoutForm>,
) -> Response {
    if let Some((id, session)) = web.sessions.session(&headers) {
        if form
            .csrf
            .as_deref()
            .is_some_and(|c| constant_time_eq(&session.csrf, c))
        {
            web.sessions.end(&id);
        }
    }
    let mut response = Redirect::to("/login").into_response();
    let clear = format!(
        "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
        web.sessions.cookie
    );
    if let Ok(value) = HeaderValue::from_str(&clear) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(h: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(h).unwrap());
        headers
    }

    #[test]
    fn only_loopback_names_are_loopback() {
        for ok in [
            "127.0.0.1:8080",
            "localhost:1",
            "LOCALHOST",
            "[::1]:80",
            "a.localhost:3",
        ] {
            assert!(loopback_host(&host(ok)), "{ok}");
        }
        for bad in ["evil.example:8080", "10.0.0.1:80", "127.0.0.1.evil.example"] {
            assert!(!loopback_host(&host(bad)), "{bad}");
        }
        assert!(!loopback_host(&HeaderMap::new()));
    }

    #[test]
    fn login_redirects_stay_on_the_console() {
        assert_eq!(safe_next(Some("/jobs/a")), "/jobs/a");
        assert_eq!(safe_next(Some("//evil.example/")), "/");
        assert_eq!(safe_next(Some("https://evil.example/")), "/");
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn sessions_are_found_by_their_cookie() {
        let sessions = Sessions::new(8080);
        let (id, session) = sessions.start();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; shardcar_session_8080={id}")).unwrap(),
        );
        assert_eq!(sessions.session(&headers).unwrap().1.csrf, session.csrf);
        sessions.end(&id);
        assert!(sessions.session(&headers).is_none());
    }
}
