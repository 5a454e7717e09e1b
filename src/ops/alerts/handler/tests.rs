//! `ErrorHandler::parse` as tables: each handler's defaults, and each bad input with the field
//! it names.

use super::*;

fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const EMAIL: &[(&str, &str)] = &[
    ("email.host", "smtp.example.com"),
    ("email.port", "465"),
    ("email.username", "alerts"),
    ("email.password", "pw"),
    ("email.from", "alerts@example.com"),
    ("email.to", "ops@example.com"),
];

/// `base` with `changes` applied: `Some` sets a prop, `None` removes it.
fn with(base: &[(&str, &str)], changes: &[(&str, Option<&str>)]) -> BTreeMap<String, String> {
    let mut p = props(base);
    for (k, v) in changes {
        match v {
            Some(v) => p.insert(k.to_string(), v.to_string()),
            None => p.remove(*k),
        };
    }
    p
}

fn url(s: &str) -> Url {
    Url::parse(s).unwrap()
}

const DEFAULTS: HttpTimeouts = HttpTimeouts {
    connect: Duration::from_millis(3000),
    read: Duration::from_millis(5000),
};

#[test]
fn the_type_and_its_default() {
    let none = BTreeMap::new();
    for (kind, want) in [
        (None, ErrorHandler::Log),
        (Some(""), ErrorHandler::Log),
        (Some("LOG"), ErrorHandler::Log),
        (Some("IGNORE"), ErrorHandler::Ignore),
        (Some("THROW"), ErrorHandler::Throw),
    ] {
        let handler = ErrorHandler::parse(kind, &none).unwrap();
        assert_eq!(handler, want, "{kind:?}");
        assert!(!handler.sends());
    }
    // Props of other handlers are not read: a LOG job with a broken DingTalk prop is fine.
    let stray = props(&[("dingtalk.webhook", "nowhere"), ("email.port", "x")]);
    assert_eq!(
        ErrorHandler::parse(Some("LOG"), &stray),
        Ok(ErrorHandler::Log)
    );
    for kind in TYPES {
        assert_eq!(
            ErrorHandler::parse(Some(kind), &none)
                .map(|h| h.kind())
                .unwrap_or(kind),
            kind
        );
    }
}

#[test]
fn email_defaults() {
    let ErrorHandler::Email(e) = ErrorHandler::parse(Some("EMAIL"), &props(EMAIL)).unwrap() else {
        panic!("not EMAIL");
    };
    assert_eq!(e.host, "smtp.example.com");
    assert_eq!(e.port, 465);
    assert_eq!((e.username.as_str(), e.password.as_str()), ("alerts", "pw"));
    assert!(e.use_ssl, "email.useSsl defaults to true");
    assert!(!e.trust_host);
    assert_eq!(e.subject, "ElasticJob error message");
    assert_eq!(e.from.to_string(), "alerts@example.com");
    assert_eq!(e.to.len(), 1);
    assert!(e.cc.is_empty() && e.bcc.is_empty());
    assert!(!e.debug, "email.debug defaults to false");
    assert!(
        !format!("{e:?}").contains("pw\""),
        "the password is not shown: {e:?}"
    );
}

#[test]
fn email_props_as_given() {
    let p = with(
        EMAIL,
        &[
            ("email.useSsl", Some("FALSE")),
            ("email.debug", Some("True")),
            ("email.subject", Some("[prod] job failed")),
            ("email.to", Some("a@example.com, B <b@example.com>,")),
            ("email.cc", Some("c@example.com")),
            ("email.bcc", Some("d@example.com,e@example.com")),
            ("email.ssl.trust", Some("other.example SMTP.example.com")),
        ],
    );
    let ErrorHandler::Email(e) = ErrorHandler::parse(Some("EMAIL"), &p).unwrap() else {
        panic!("not EMAIL");
    };
    assert!(!e.use_ssl && e.debug && e.trust_host);
    assert_eq!(e.subject, "[prod] job failed");
    let shown: Vec<String> = e.to.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["a@example.com", "B <b@example.com>"]);
    assert_eq!((e.cc.len(), e.bcc.len()), (1, 2));
    let star = with(EMAIL, &[("email.ssl.trust", Some("*"))]);
    let ErrorHandler::Email(e) = ErrorHandler::parse(Some("EMAIL"), &star).unwrap() else {
        panic!("not EMAIL");
    };
    assert!(e.trust_host);
    // ElasticJob requires a username and a password but takes them empty.
    let empty = with(
        EMAIL,
        &[("email.username", Some("")), ("email.password", Some(""))],
    );
    assert!(ErrorHandler::parse(Some("EMAIL"), &empty).is_ok());
}

#[test]
fn robots_and_webhook_defaults() {
    let wechat = props(&[(
        "wechat.webhook",
        "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k",
    )]);
    assert_eq!(
        ErrorHandler::parse(Some("WECHAT"), &wechat),
        Ok(ErrorHandler::Wechat(WechatSettings {
            webhook: url("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k"),
            timeouts: DEFAULTS,
        }))
    );
    let dingtalk = props(&[
        (
            "dingtalk.webhook",
            "https://oapi.dingtalk.com/robot/send?access_token=t",
        ),
        ("dingtalk.keyword", ""),
        ("dingtalk.readTimeoutMilliseconds", "250"),
    ]);
    assert_eq!(
        ErrorHandler::parse(Some("DINGTALK"), &dingtalk),
        Ok(ErrorHandler::Dingtalk(DingtalkSettings {
            webhook: url("https://oapi.dingtalk.com/robot/send?access_token=t"),
            keyword: None,
            secret: None,
            timeouts: HttpTimeouts {
                read: Duration::from_millis(250),
                ..DEFAULTS
            },
        }))
    );
    let signed = props(&[
        (
            "dingtalk.webhook",
            "http://127.0.0.1:9/robot/send?access_token=t",
        ),
        ("dingtalk.keyword", "[shardcar]"),
        ("dingtalk.secret", "SEC123"),
        ("dingtalk.connectTimeoutMilliseconds", "100"),
    ]);
    let h = ErrorHandler::parse(Some("DINGTALK"), &signed).unwrap();
    let ErrorHandler::Dingtalk(d) = &h else {
        panic!("not DINGTALK");
    };
    assert_eq!(d.keyword.as_deref(), Some("[shardcar]"));
    assert_eq!(d.secret.as_deref(), Some("SEC123"));
    assert_eq!(d.timeouts.connect, Duration::from_millis(100));
    let debug = format!("{h:?}");
    assert!(
        !debug.contains("SEC123") && !debug.contains("access_token=t"),
        "{debug}"
    );

    let webhook = props(&[
        ("webhook.url", "http://hooks.example/alert"),
        ("webhook.token", "tk"),
    ]);
    assert_eq!(
        ErrorHandler::parse(Some("WEBHOOK"), &webhook),
        Ok(ErrorHandler::Webhook(WebhookSettings {
            url: url("http://hooks.example/alert"),
            token: Some("tk".into()),
            timeouts: DEFAULTS,
        }))
    );
    let no_token = props(&[
        ("webhook.url", "https://hooks.example/alert"),
        ("webhook.token", ""),
    ]);
    let ErrorHandler::Webhook(w) = ErrorHandler::parse(Some("WEBHOOK"), &no_token).unwrap() else {
        panic!("not WEBHOOK");
    };
    assert_eq!(w.token, None);
}

#[test]
fn bad_input_names_its_field() {
    let ding = |v: &str| props(&[("dingtalk.webhook", v)]);
    let hook = [("webhook.url", "http://hooks.example/a")];
    let cases: Vec<(&str, BTreeMap<String, String>, &str, &str)> = vec![
        (
            "SMS",
            BTreeMap::new(),
            "jobErrorHandlerType",
            "\"SMS\" is not an error handler type",
        ),
        (
            "log",
            BTreeMap::new(),
            "jobErrorHandlerType",
            "\"log\" is not an error handler type",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.host", None)]),
            "props[\"email.host\"]",
            "is required",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.host", Some(" "))]),
            "props[\"email.host\"]",
            "is required",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.port", None)]),
            "props[\"email.port\"]",
            "is required",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.port", Some("smtps"))]),
            "props[\"email.port\"]",
            "must be a port number",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.port", Some("0"))]),
            "props[\"email.port\"]",
            "must be a port number",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.port", Some("70000"))]),
            "props[\"email.port\"]",
            "must be a port number",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.username", None)]),
            "props[\"email.username\"]",
            "is required",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.password", None)]),
            "props[\"email.password\"]",
            "is required",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.from", None)]),
            "props[\"email.from\"]",
            "is required",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.from", Some("nobody"))]),
            "props[\"email.from\"]",
            "is not a mail address",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.to", None)]),
            "props[\"email.to\"]",
            "is required",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.to", Some(" , "))]),
            "props[\"email.to\"]",
            "is required",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.to", Some("a@example.com, oops"))]),
            "props[\"email.to\"]",
            "\"oops\" is not a mail address",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.cc", Some("@"))]),
            "props[\"email.cc\"]",
            "is not a mail address",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.useSsl", Some("yes"))]),
            "props[\"email.useSsl\"]",
            "must be true or false",
        ),
        (
            "EMAIL",
            with(EMAIL, &[("email.debug", Some("1"))]),
            "props[\"email.debug\"]",
            "must be true or false",
        ),
        (
            "WECHAT",
            BTreeMap::new(),
            "props[\"wechat.webhook\"]",
            "is required by the WECHAT error handler",
        ),
        (
            "WECHAT",
            props(&[("wechat.webhook", "qyapi.weixin.qq.com/send")]),
            "props[\"wechat.webhook\"]",
            "must be an http:// or https:// URL",
        ),
        (
            "WECHAT",
            props(&[
                ("wechat.webhook", "https://x/y"),
                ("wechat.connectTimeoutMilliseconds", "3s"),
            ]),
            "props[\"wechat.connectTimeoutMilliseconds\"]",
            "\"3s\" must be a whole number of milliseconds",
        ),
        (
            "WECHAT",
            props(&[
                ("wechat.webhook", "https://x/y"),
                ("wechat.readTimeoutMilliseconds", "0"),
            ]),
            "props[\"wechat.readTimeoutMilliseconds\"]",
            "\"0\" must be positive",
        ),
        (
            "DINGTALK",
            BTreeMap::new(),
            "props[\"dingtalk.webhook\"]",
            "is required by the DINGTALK error handler",
        ),
        (
            "DINGTALK",
            ding("ftp://oapi.dingtalk.com/robot"),
            "props[\"dingtalk.webhook\"]",
            "\"ftp://oapi.dingtalk.com/robot\" must be an http:// or https:// URL",
        ),
        (
            "DINGTALK",
            ding("https://"),
            "props[\"dingtalk.webhook\"]",
            "must be an http:// or https:// URL",
        ),
        (
            "DINGTALK",
            ding("not a url?access_token=hidden"),
            "props[\"dingtalk.webhook\"]",
            "\"not a url\" must be",
        ),
        (
            "DINGTALK",
            props(&[
                ("dingtalk.webhook", "https://x/y"),
                ("dingtalk.readTimeoutMilliseconds", "-5"),
            ]),
            "props[\"dingtalk.readTimeoutMilliseconds\"]",
            "must be positive",
        ),
        (
            "DINGTALK",
            props(&[
                ("dingtalk.webhook", "https://x/y"),
                ("dingtalk.connectTimeoutMilliseconds", "9999999999"),
            ]),
            "props[\"dingtalk.connectTimeoutMilliseconds\"]",
            "must be a whole number",
        ),
        (
            "WEBHOOK",
            BTreeMap::new(),
            "props[\"webhook.url\"]",
            "is required by the WEBHOOK error handler",
        ),
        (
            "WEBHOOK",
            props(&[("webhook.url", "mailto:ops@example.com")]),
            "props[\"webhook.url\"]",
            "must be an http:// or https:// URL",
        ),
        (
            "WEBHOOK",
            with(
                &hook,
                &[("webhook.connectTimeoutMilliseconds", Some("1.5"))],
            ),
            "props[\"webhook.connectTimeoutMilliseconds\"]",
            "must be a whole number",
        ),
        (
            "WEBHOOK",
            with(&hook, &[("webhook.readTimeoutMilliseconds", Some(""))]),
            "props[\"webhook.readTimeoutMilliseconds\"]",
            "must be a whole number",
        ),
    ];
    for (kind, props, field, message) in cases {
        let e = ErrorHandler::parse(Some(kind), &props)
            .expect_err(&format!("{kind} {props:?} was accepted"));
        assert_eq!(e.field, field, "{kind} {props:?}: {e}");
        assert!(e.message.contains(message), "{kind} {props:?}: {e}");
        assert!(!e.message.contains("hidden"), "{e}");
        assert_eq!(e.to_string(), format!("invalid {field}: {}", e.message));
    }
}

#[test]
fn urls_are_shown_without_their_tokens() {
    assert_eq!(
        shown("https://oapi.dingtalk.com/robot/send?access_token=abc"),
        "https://oapi.dingtalk.com/robot/send?..."
    );
    assert_eq!(shown("http://u:pw@h/p#f"), "http://u:***@h/p");
    assert_eq!(shown("nonsense?key=abc"), "nonsense");
}
