//! HTML building blocks of the console: escaping (every text from the registry or a request goes
//! through [`esc`]), URL path segments, the page layout with the namespace and ZooKeeper state,
//! badges, time formats, and the action forms (each posts a CSRF token and asks for
//! confirmation). The style sheet and the script are static files compiled in.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Local, Utc};

use crate::ops::jobs::JobStatus;
use crate::registry::SessionState;

use super::session::Viewer;

/// The style sheet, served at `/static/console.css`.
pub const CSS: &str = include_str!("assets/console.css");
/// The script (confirmations, live updates, the cron preview), served at `/static/console.js`.
pub const JS: &str = include_str!("assets/console.js");

/// Escapes text for HTML content and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes one URL path segment (a job name, an instance id, an IP).
pub fn seg(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Percent-encodes a query value.
pub fn query_value(text: &str) -> String {
    seg(text)
}

/// The job page's URL.
pub fn job_url(job: &str) -> String {
    format!("/jobs/{}", seg(job))
}

/// ElasticJob-UI's name of a job state, and its badge class.
pub fn status(status: JobStatus) -> (&'static str, &'static str) {
    match status {
        JobStatus::Ok => ("OK", "ok"),
        JobStatus::Crashed => ("CRASHED", "bad"),
        JobStatus::Disabled => ("DISABLED", "off"),
        JobStatus::ShardingFlag => ("SHARDING_FLAG", "warn"),
    }
}

/// A job state badge.
pub fn status_badge(s: JobStatus) -> String {
    let (text, class) = status(s);
    badge(text, class)
}

pub fn badge(text: &str, class: &str) -> String {
    format!(r#"<span class="badge {class}">{}</span>"#, esc(text))
}

/// An execution outcome badge (`completed`, `failed`, `revoked`).
pub fn outcome_badge(outcome: &str) -> String {
    let class = match outcome {
        "completed" => "ok",
        "failed" => "bad",
        _ => "warn",
    };
    badge(outcome, class)
}

/// The ZooKeeper state as the header shows it: text and badge class.
#[allow(
    clippy::disallowed_methods,
    reason = "a console page shows times relative to when it is drawn"
)]
pub fn zk_state(state: &SessionState, standalone: bool) -> (String, &'static str) {
    if standalone {
        return ("standalone (in memory)".into(), "warn");
    }
    match state {
        SessionState::Connected {
            generation,
            session_id,
        } => (
            format!("connected (session 0x{session_id:x}, #{generation})"),
            "ok",
        ),
        SessionState::Disconnected { since, .. } => (
            format!("disconnected for {}", short_duration(since.elapsed())),
            "bad",
        ),
        SessionState::Expired { .. } => ("session expired: reconnecting".into(), "bad"),
        SessionState::Closed => ("closed".into(), "off"),
    }
}

/// `1.25 s`, `340 ms`, `2 m 5 s`.
pub fn short_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        let s = d.as_secs();
        format!("{} m {} s", s / 60, s % 60)
    }
}

/// A time in the sidecar's local zone, with its offset.
pub fn local_time(t: SystemTime) -> String {
    DateTime::<Local>::from(t)
        .format("%Y-%m-%d %H:%M:%S %:z")
        .to_string()
}

/// A UTC instant shown in a fixed-offset zone.
pub fn zoned_time(t: DateTime<chrono::FixedOffset>) -> String {
    t.format("%Y-%m-%d %H:%M:%S %:z").to_string()
}

/// How far `t` is from now: `in 3 s`, `in 2 h 5 m`.
#[allow(
    clippy::disallowed_methods,
    reason = "a console page shows times relative to when it is drawn"
)]
pub fn from_now(t: DateTime<Utc>) -> String {
    let secs = (t - Utc::now()).num_seconds().max(0);
    let text = match secs {
        0..=59 => format!("{secs} s"),
        60..=3599 => format!("{} m {} s", secs / 60, secs % 60),
        3600..=86_399 => format!("{} h {} m", secs / 3600, (secs % 3600) / 60),
        _ => format!("{} d {} h", secs / 86_400, (secs % 86_400) / 3600),
    };
    format!("in {text}")
}

/// What the header shows on every page.
pub struct Header {
    pub namespace: String,
    pub zk: (String, &'static str),
    pub zk_connect: Option<String>,
    pub ip: String,
}

/// Which entry of the navigation is current.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Jobs,
    Servers,
    None,
}

/// A whole page: header (namespace, ZooKeeper, navigation, login state), a notice, the body.
pub fn layout(
    header: &Header,
    viewer: &Viewer,
    nav: Nav,
    title: &str,
    notice: Option<&str>,
    body: &str,
) -> String {
    let current = |n: Nav| if n == nav { r#" class="current""# } else { "" };
    let who = if viewer.logged_in {
        format!(
            r#"<form method="post" action="/logout" class="inline"><input type="hidden" name="csrf" value="{}"><button type="submit" class="link">Log out</button></form>"#,
            esc(&viewer.csrf)
        )
    } else if viewer.can_log_in {
        r#"<a href="/login">Log in</a>"#.to_string()
    } else {
        String::new()
    };
    let zk_where = header
        .zk_connect
        .as_deref()
        .map(|c| format!(r#" title="{}""#, esc(c)))
        .unwrap_or_default();
    let notice = notice
        .map(|n| format!(r#"<p class="notice" id="notice">{}</p>"#, esc(n)))
        .unwrap_or_default();
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · shardcar</title>
<link rel="stylesheet" href="/static/console.css">
<script src="/static/console.js" defer></script>
</head>
<body>
<header>
<a class="brand" href="/">shardcar</a>
<nav><a href="/"{jobs}>Jobs</a><a href="/servers"{servers}>Servers</a></nav>
<span class="context">namespace <b id="namespace">{namespace}</b> · ZooKeeper <span id="zk-state" class="badge {zk_class}"{zk_where}>{zk_text}</span> · sidecar {ip}</span>
<span class="who">{who}</span>
</header>
<main>
{notice}
{body}
</main>
</body>
</html>
"#,
        title = esc(title),
        jobs = current(Nav::Jobs),
        servers = current(Nav::Servers),
        namespace = esc(&header.namespace),
        zk_class = header.zk.1,
        zk_text = esc(&header.zk.0),
        ip = esc(&header.ip),
    )
}

/// A form that posts one action, asking first (`data-confirm`; without script the server asks
/// with a page of its own). Nothing when the viewer may not act.
pub fn action(viewer: &Viewer, url: &str, label: &str, question: &str, class: &str) -> String {
    if !viewer.can_act {
        return String::new();
    }
    format!(
        r#"<form method="post" action="{url}" class="inline" data-confirm="{question}"><input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="confirmed" value=""><button type="submit" class="{class}">{label}</button></form>"#,
        url = esc(url),
        question = esc(question),
        csrf = esc(&viewer.csrf),
        label = esc(label),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_segments_are_escaped() {
        assert_eq!(
            esc(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(seg("10.0.0.1@-@42"), "10.0.0.1%40-%4042");
        assert_eq!(seg("a b/c"), "a%20b%2Fc");
        assert_eq!(job_url("orders"), "/jobs/orders");
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(short_duration(Duration::from_millis(340)), "340 ms");
        assert_eq!(short_duration(Duration::from_millis(1250)), "1.25 s");
        assert_eq!(short_duration(Duration::from_secs(125)), "2 m 5 s");
    }
}
