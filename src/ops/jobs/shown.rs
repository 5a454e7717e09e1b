//! How a job's failure handling reads to people, the same on the console's job page and in
//! `ctl job show`: its retry policy in words, and its error handler with the props it reads,
//! secrets left out (a password, a secret, a token, a webhook's query, which carries the
//! robots' access tokens) wherever a prop is shown.

use std::time::Duration;

use crate::elasticjob::extras::RetryPolicy;
use crate::ops::alerts::DEFAULT_TYPE;

/// What replaces a secret prop's value.
pub const HIDDEN: &str = "(set, not shown)";

/// `3 runs in all (2 retries): the first after 200ms, each next wait ×2, up to 1m`; without a
/// policy, what happens instead.
pub fn retry_policy(policy: Option<&RetryPolicy>) -> String {
    let Some(p) = policy else {
        return "none: a failed item waits for the next fire".to_string();
    };
    let wait = |ms: u64| humantime::format_duration(Duration::from_millis(ms)).to_string();
    let retries = p.max_attempts.saturating_sub(1);
    let plural = if retries == 1 { "retry" } else { "retries" };
    let growth = if p.multiplier_permille <= 1000 || p.max_backoff_ms <= p.initial_backoff_ms {
        "the same each time".to_string()
    } else {
        let times = f64::from(p.multiplier_permille) / 1000.0;
        format!("each next wait ×{times}, up to {}", wait(p.max_backoff_ms))
    };
    format!(
        "{} runs in all ({retries} {plural}): the first after {}, {growth}",
        p.max_attempts,
        wait(p.initial_backoff_ms)
    )
}

/// The handler's type as `jobErrorHandlerType` names it (`LOG (the default)` when unset), and
/// the props it reads (`PREFIX.*` for EMAIL, WECHAT, DINGTALK and WEBHOOK), in key order,
/// secrets hidden.
pub fn error_handler<'a>(
    kind: Option<&str>,
    props: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> (String, Vec<(String, String)>) {
    let kind = kind.map(str::trim).filter(|k| !k.is_empty());
    let shown = match kind {
        Some(k) => k.to_string(),
        None => format!("{DEFAULT_TYPE} (the default)"),
    };
    let prefix = match kind {
        Some(k @ ("EMAIL" | "WECHAT" | "DINGTALK" | "WEBHOOK")) => {
            format!("{}.", k.to_ascii_lowercase())
        }
        _ => return (shown, Vec::new()),
    };
    let mut settings: Vec<(String, String)> = props
        .into_iter()
        .filter(|(k, _)| k.starts_with(&prefix))
        .map(|(k, v)| (k.clone(), prop_value(k, v)))
        .collect();
    settings.sort();
    (shown, settings)
}

/// A prop's value as shown: a secret hidden (a key ending in `password`, `secret` or
/// `token`), an error handler's webhook without its query (the robots' access tokens).
pub fn prop_value(key: &str, value: &str) -> String {
    let lower = key.to_ascii_lowercase();
    if ["password", "secret", "token"]
        .iter()
        .any(|s| lower.ends_with(s))
    {
        return HIDDEN.to_string();
    }
    let webhook = lower.ends_with(".webhook") || lower == "webhook.url";
    match value.split_once('?') {
        Some((url, _)) if webhook => format!("{url}?…"),
        _ => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn policies_in_words() {
        let p = |max_attempts, initial, max, permille| RetryPolicy {
            max_attempts,
            initial_backoff_ms: initial,
            max_backoff_ms: max,
            multiplier_permille: permille,
        };
        assert_eq!(
            retry_policy(Some(&p(3, 200, 60_000, 2000))),
            "3 runs in all (2 retries): the first after 200ms, each next wait ×2, up to 1m"
        );
        assert_eq!(
            retry_policy(Some(&p(2, 1000, 1000, 1500))),
            "2 runs in all (1 retry): the first after 1s, the same each time"
        );
        assert_eq!(
            retry_policy(Some(&p(5, 10, 100, 1500))),
            "5 runs in all (4 retries): the first after 10ms, each next wait ×1.5, up to 100ms"
        );
        assert_eq!(
            retry_policy(None),
            "none: a failed item waits for the next fire"
        );
    }

    #[test]
    fn handlers_with_their_props_and_no_secret() {
        let props: BTreeMap<String, String> = [
            (
                "dingtalk.webhook",
                "https://oapi.dingtalk.com/robot/send?access_token=abc",
            ),
            ("dingtalk.secret", "SEC123"),
            ("dingtalk.keyword", "alert"),
            ("email.password", "hunter2"),
            ("batch", "100"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let (kind, settings) = error_handler(Some("DINGTALK"), &props);
        assert_eq!(kind, "DINGTALK");
        assert_eq!(
            settings,
            [
                ("dingtalk.keyword".to_string(), "alert".to_string()),
                ("dingtalk.secret".to_string(), HIDDEN.to_string()),
                (
                    "dingtalk.webhook".to_string(),
                    "https://oapi.dingtalk.com/robot/send?…".to_string()
                ),
            ]
        );
        let (kind, settings) = error_handler(None, &props);
        assert_eq!((kind.as_str(), settings.len()), ("LOG (the default)", 0));
        assert_eq!(
            prop_value("http.uri", "http://h/run?x=1"),
            "http://h/run?x=1"
        );
        assert_eq!(
            prop_value("wechat.webhook", "https://qyapi/send?key=k"),
            "https://qyapi/send?…"
        );
        assert_eq!(
            prop_value("webhook.url", "http://h/hook?sig=1"),
            "http://h/hook?…"
        );
        let (_, settings) = error_handler(Some("EMAIL"), &props);
        assert_eq!(
            settings,
            [("email.password".to_string(), HIDDEN.to_string())]
        );
        assert_eq!(error_handler(Some(" IGNORE "), &props).0, "IGNORE");
    }
}
