//! ElasticJob's typed jobs, `SCRIPT` and `HTTP`: the job root's data names the type, and the
//! job's props say what to run (`script.command.line`; `http.uri`, `http.method`,
//! `http.data`, `http.connect.timeout.milliseconds`, `http.read.timeout.milliseconds`,
//! `http.content.type`). The props are read here, once, for validation and for the runner.

use std::collections::BTreeMap;
use std::time::Duration;

/// A job run by the sidecar itself rather than by subscribed workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobType {
    Script,
    Http,
}

impl JobType {
    /// The job root's data for this type, as ElasticJob writes it.
    pub fn root_data(self) -> &'static str {
        match self {
            JobType::Script => "SCRIPT",
            JobType::Http => "HTTP",
        }
    }

    /// The type a job root's data names, if it names one.
    pub fn from_root_data(data: &[u8]) -> Option<JobType> {
        match std::str::from_utf8(data).ok()?.trim() {
            "SCRIPT" => Some(JobType::Script),
            "HTTP" => Some(JobType::Http),
            _ => None,
        }
    }
}

/// The script prop.
pub const SCRIPT_COMMAND_LINE: &str = "script.command.line";
/// The HTTP props.
pub const HTTP_URI: &str = "http.uri";
pub const HTTP_METHOD: &str = "http.method";
pub const HTTP_DATA: &str = "http.data";
pub const HTTP_CONNECT_TIMEOUT: &str = "http.connect.timeout.milliseconds";
pub const HTTP_READ_TIMEOUT: &str = "http.read.timeout.milliseconds";
pub const HTTP_CONTENT_TYPE: &str = "http.content.type";

/// What a typed job runs, read from its props.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The program and its arguments; the sharding context JSON is appended.
    Script {
        argv: Vec<String>,
    },
    Http(HttpCall),
}

/// One HTTP job's call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpCall {
    pub uri: String,
    /// Upper case.
    pub method: String,
    /// Sent as the body for POST, PUT and DELETE, as ElasticJob does.
    pub data: Option<String>,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub content_type: Option<String>,
}

/// A prop that cannot be used: its key and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("props[{key}] {message}")]
pub struct PropError {
    pub key: &'static str,
    pub message: String,
}

fn prop_error(key: &'static str, message: impl Into<String>) -> PropError {
    PropError {
        key,
        message: message.into(),
    }
}

/// Reads a typed job's props as ElasticJob's executor would, with its defaults (connect 3000
/// ms, read 5000 ms).
///
/// # Errors
/// The first prop that is missing or cannot be used.
pub fn action(job_type: JobType, props: &BTreeMap<String, String>) -> Result<Action, PropError> {
    let get = |key: &str| props.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
    match job_type {
        JobType::Script => {
            let line = get(SCRIPT_COMMAND_LINE).ok_or_else(|| {
                prop_error(
                    SCRIPT_COMMAND_LINE,
                    "is required for a SCRIPT job: the command to run, e.g. \"/opt/jobs/clean.sh --fast\"",
                )
            })?;
            let argv = split_command_line(line).map_err(|m| prop_error(SCRIPT_COMMAND_LINE, m))?;
            Ok(Action::Script { argv })
        }
        JobType::Http => {
            let uri = get(HTTP_URI).ok_or_else(|| {
                prop_error(
                    HTTP_URI,
                    "is required for an HTTP job: the URL to call, e.g. \"http://10.0.0.7:8080/jobs/clean\"",
                )
            })?;
            let host = uri
                .strip_prefix("http://")
                .or_else(|| uri.strip_prefix("https://"))
                .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
            if host.is_none_or(str::is_empty) {
                return Err(prop_error(
                    HTTP_URI,
                    format!("{uri:?} must be an http:// or https:// URL"),
                ));
            }
            let method = get(HTTP_METHOD)
                .ok_or_else(|| {
                    prop_error(
                        HTTP_METHOD,
                        "is required for an HTTP job: GET, POST, PUT, DELETE, PATCH or HEAD",
                    )
                })?
                .to_ascii_uppercase();
            if !["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
                .contains(&method.as_str())
            {
                return Err(prop_error(
                    HTTP_METHOD,
                    format!("{method:?} is not an HTTP method (GET, POST, PUT, DELETE, PATCH, HEAD, OPTIONS)"),
                ));
            }
            let millis = |key: &'static str, default: u64| -> Result<Duration, PropError> {
                match get(key) {
                    None => Ok(Duration::from_millis(default)),
                    Some(v) => v
                        .parse::<u64>()
                        .ok()
                        .filter(|ms| *ms > 0)
                        .map(Duration::from_millis)
                        .ok_or_else(|| {
                            prop_error(
                                key,
                                format!("{v:?} must be a number of milliseconds above 0"),
                            )
                        }),
                }
            };
            Ok(Action::Http(HttpCall {
                uri: uri.to_string(),
                method,
                data: props.get(HTTP_DATA).filter(|d| !d.is_empty()).cloned(),
                connect_timeout: millis(HTTP_CONNECT_TIMEOUT, 3000)?,
                read_timeout: millis(HTTP_READ_TIMEOUT, 5000)?,
                content_type: get(HTTP_CONTENT_TYPE).map(str::to_string),
            }))
        }
    }
}

/// The program and arguments ElasticJob's script executor runs for `script.command.line`
/// (Apache Commons Exec 1.3's `CommandLine.parse`, then its `toStrings`): words are separated
/// by spaces (only), single or double quotes group a word, and then every argument after the
/// program is trimmed, loses the quotes at its ends, and is wrapped again in double quotes if
/// it holds a space or a single quote, or in single quotes if it holds a double quote. So
/// `sh -c 'echo hi'` reaches `sh` as `"echo hi"`, quotes included, under ElasticJob and here
/// alike: put what needs a shell in a script file. No shell runs.
///
/// # Errors
/// An empty line, an unbalanced quote, or an argument with both kinds of quote (which
/// ElasticJob cannot run either).
pub fn split_command_line(line: &str) -> Result<Vec<String>, String> {
    if line.trim().is_empty() {
        return Err("is empty".to_string());
    }
    #[derive(PartialEq)]
    enum State {
        Normal,
        Single,
        Double,
    }
    let mut state = State::Normal;
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted_last = false;
    for c in line.chars() {
        match state {
            State::Single if c == '\'' => {
                quoted_last = true;
                state = State::Normal;
            }
            State::Double if c == '"' => {
                quoted_last = true;
                state = State::Normal;
            }
            State::Single | State::Double => word.push(c),
            State::Normal => {
                match c {
                    '\'' => state = State::Single,
                    '"' => state = State::Double,
                    ' ' => {
                        if quoted_last || !word.is_empty() {
                            words.push(std::mem::take(&mut word));
                        }
                    }
                    c => word.push(c),
                }
                quoted_last = false;
            }
        }
    }
    if quoted_last || !word.is_empty() {
        words.push(word);
    }
    if state != State::Normal {
        return Err(format!("has unbalanced quotes in {line:?}"));
    }
    let mut argv = Vec::with_capacity(words.len());
    let mut words = words.into_iter();
    match words.next() {
        Some(program) if !program.trim().is_empty() => argv.push(program),
        _ => return Err(format!("names no program in {line:?}")),
    }
    for word in words {
        argv.push(quote_argument(&word).map_err(|m| format!("{m} in {line:?}"))?);
    }
    Ok(argv)
}

/// Commons Exec's `StringUtils.quoteArgument`: an argument as its executor passes it.
fn quote_argument(word: &str) -> Result<String, String> {
    // Java's trim: every character up to and including the space.
    let mut w = word.trim_matches(|c: char| c <= ' ');
    w = w.trim_start_matches(['\'', '"']);
    w = w.trim_end_matches(['\'', '"']);
    if w.contains('"') {
        if w.contains('\'') {
            return Err(format!(
                "has an argument with both single and double quotes ({word:?}), which ElasticJob cannot pass either"
            ));
        }
        Ok(format!("'{w}'"))
    } else if w.contains('\'') || w.contains(' ') {
        Ok(format!("\"{w}\""))
    } else {
        Ok(w.to_string())
    }
}

/// One item's sharding context as ElasticJob's executors send it: Gson's form of its
/// `ShardingContext` (fields in declaration order, a null parameter left out, and Gson's
/// HTML-safe escaping of `<`, `>`, `&`, `=` and `'`).
pub fn sharding_context_json(
    job_name: &str,
    task_id: &str,
    sharding_total_count: i32,
    job_parameter: &str,
    item: i32,
    parameter: Option<&str>,
) -> String {
    let mut out = String::with_capacity(160);
    out.push_str("{\"jobName\":");
    gson_string(&mut out, job_name);
    out.push_str(",\"taskId\":");
    gson_string(&mut out, task_id);
    out.push_str(&format!(",\"shardingTotalCount\":{sharding_total_count}"));
    out.push_str(",\"jobParameter\":");
    gson_string(&mut out, job_parameter);
    out.push_str(&format!(",\"shardingItem\":{item}"));
    if let Some(p) = parameter {
        out.push_str(",\"shardingParameter\":");
        gson_string(&mut out, p);
    }
    out.push('}');
    out
}

/// A JSON string as Gson's default writer quotes it.
fn gson_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '=' | '\'' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn command_lines_split_and_quoted_as_commons_exec_does() {
        // What ElasticJob 3.0.4's script executor passed for these lines (its argv, as the
        // interop suite records it, tests/interop TypedJobTest).
        assert_eq!(
            split_command_line("plain 'two words' \"it's\" 'say \"hi\"' a'b c'd ''").unwrap(),
            vec![
                "plain",
                "\"two words\"",
                "\"it's\"",
                "'say \"hi'",
                "\"ab cd\"",
                ""
            ]
        );
        assert_eq!(
            split_command_line("/bin/echo  a 'b c' \"d e\"").unwrap(),
            vec!["/bin/echo", "a", "\"b c\"", "\"d e\""]
        );
        // Only spaces separate words, and a quoted word is trimmed.
        assert_eq!(
            split_command_line("x a\tb 'tail '").unwrap(),
            vec!["x", "a\tb", "tail"]
        );
        assert_eq!(split_command_line("x ''").unwrap(), vec!["x", ""]);
        assert!(split_command_line("sh -c 'echo").is_err());
        assert!(split_command_line("   ").is_err());
        assert!(split_command_line("x \"a'b\"'c\"d'").is_err());
    }

    #[test]
    fn the_sharding_context_is_gsons() {
        // Gson 2.8's output for ElasticJob's ShardingContext (HTML-safe escaping on).
        assert_eq!(
            sharding_context_json(
                "clean",
                "clean@-@0@-@READY@-@10.0.0.5@-@42",
                3,
                "a=b",
                0,
                Some("north")
            ),
            r#"{"jobName":"clean","taskId":"clean@-@0@-@READY@-@10.0.0.5@-@42","shardingTotalCount":3,"jobParameter":"a\u003db","shardingItem":0,"shardingParameter":"north"}"#
        );
        assert_eq!(
            sharding_context_json("j", "t", 1, "", 0, None),
            r#"{"jobName":"j","taskId":"t","shardingTotalCount":1,"jobParameter":"","shardingItem":0}"#
        );
        let mut s = String::new();
        gson_string(&mut s, "<'&>\"\\\n\u{1}é");
        assert_eq!(s, r#""\u003c\u0027\u0026\u003e\"\\\n\u0001é""#);
    }

    #[test]
    fn props_are_read_with_elasticjobs_defaults_and_mistakes_named() {
        let http = action(
            JobType::Http,
            &props(&[
                ("http.uri", "http://127.0.0.1:9/x"),
                ("http.method", "post"),
                ("http.data", "a=1"),
            ]),
        )
        .unwrap();
        assert_eq!(
            http,
            Action::Http(HttpCall {
                uri: "http://127.0.0.1:9/x".into(),
                method: "POST".into(),
                data: Some("a=1".into()),
                connect_timeout: Duration::from_millis(3000),
                read_timeout: Duration::from_millis(5000),
                content_type: None,
            })
        );
        for (pairs, key) in [
            (vec![("http.method", "GET")], HTTP_URI),
            (
                vec![("http.uri", "ftp://x"), ("http.method", "GET")],
                HTTP_URI,
            ),
            (vec![("http.uri", "http://x")], HTTP_METHOD),
            (
                vec![("http.uri", "http://x"), ("http.method", "FETCH")],
                HTTP_METHOD,
            ),
            (
                vec![
                    ("http.uri", "http://x"),
                    ("http.method", "GET"),
                    (HTTP_READ_TIMEOUT, "soon"),
                ],
                HTTP_READ_TIMEOUT,
            ),
        ] {
            assert_eq!(
                action(JobType::Http, &props(&pairs)).unwrap_err().key,
                key,
                "{pairs:?}"
            );
        }
        assert_eq!(
            action(JobType::Script, &props(&[])).unwrap_err().key,
            SCRIPT_COMMAND_LINE
        );
        assert_eq!(
            action(
                JobType::Script,
                &props(&[(SCRIPT_COMMAND_LINE, "/bin/true x")])
            )
            .unwrap(),
            Action::Script {
                argv: vec!["/bin/true".into(), "x".into()]
            }
        );
        assert_eq!(JobType::from_root_data(b"SCRIPT"), Some(JobType::Script));
        assert_eq!(JobType::from_root_data(b"com.example.Job"), None);
        assert_eq!(JobType::from_root_data(b""), None);
    }

    #[test]
    fn the_typed_jobs_a_real_elasticjob_wrote_are_read_and_written_back_byte_for_byte() {
        // Captured from ElasticJob-Lite 3.0.4 JVMs (tests/vectors/README.md, "typed").
        for (text, want) in [
            (
                include_str!("../../tests/vectors/typed/script-2x2.json"),
                JobType::Script,
            ),
            (
                include_str!("../../tests/vectors/typed/http-2x2.json"),
                JobType::Http,
            ),
        ] {
            let dump: serde_json::Value = serde_json::from_str(text).unwrap();
            let job = dump["job"].as_str().unwrap();
            let node = |suffix: &str| {
                let path = format!("/vec/{job}{suffix}");
                dump["nodes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|n| n["path"] == path.as_str())
                    .and_then(|n| n["data"].as_str())
                    .unwrap_or_else(|| panic!("{path} is in the dump"))
                    .to_string()
            };
            assert_eq!(JobType::from_root_data(node("").as_bytes()), Some(want));
            let yaml = node("/config");
            let config =
                crate::elasticjob::config::JobConfiguration::from_yaml(yaml.as_bytes()).unwrap();
            assert_eq!(config.to_yaml(), yaml, "{job}: written back byte for byte");
            let props: BTreeMap<String, String> = config.props.into_iter().collect();
            assert!(action(want, &props).is_ok(), "{job}: {props:?}");
        }
    }
}
