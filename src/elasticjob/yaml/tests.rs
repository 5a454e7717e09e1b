//! Tests of the SnakeYAML-compatible emitter.

use super::*;

fn one(v: &str) -> String {
    dump_map(&[("k", Value::Str(v))])
}

#[test]
fn plain_and_quoted_choices() {
    let cases = [
        ("0/5 * * * * ?", "k: 0/5 * * * * ?\n"),
        ("", "k: ''\n"),
        ("0=a,1=b", "k: 0=a,1=b\n"),
        ("a: b", "k: 'a: b'\n"),
        ("a:b", "k: a:b\n"),
        ("a #b", "k: 'a #b'\n"),
        ("a#b", "k: a#b\n"),
        ("#x", "k: '#x'\n"),
        ("- x", "k: '- x'\n"),
        ("-x", "k: -x\n"),
        ("true", "k: 'true'\n"),
        ("yes", "k: 'yes'\n"),
        ("null", "k: 'null'\n"),
        ("~", "k: '~'\n"),
        ("123", "k: '123'\n"),
        ("-1", "k: '-1'\n"),
        ("1.5", "k: '1.5'\n"),
        ("1e3", "k: '1e3'\n"),
        ("0x1F", "k: '0x1F'\n"),
        ("012", "k: '012'\n"),
        ("089", "k: '089'\n"),
        ("1:30", "k: '1:30'\n"),
        ("2024-01-02", "k: '2024-01-02'\n"),
        ("=", "k: '='\n"),
        ("<<", "k: '<<'\n"),
        (".inf", "k: '.inf'\n"),
        ("it's", "k: it's\n"),
        ("'x'", "k: '''x'''\n"),
        (" lead", "k: ' lead'\n"),
        ("trail ", "k: 'trail '\n"),
        ("tab\there", "k: \"tab\\there\"\n"),
        ("a\"b", "k: a\"b\n"),
        ("\"q\"", "k: '\"q\"'\n"),
        ("中文描述", "k: 中文描述\n"),
        ("GMT+08:00", "k: GMT+08:00\n"),
        ("---", "k: '---'\n"),
        ("[x]", "k: '[x]'\n"),
        ("x[y]", "k: x[y]\n"),
        ("@at", "k: '@at'\n"),
        ("%p", "k: '%p'\n"),
        ("?", "k: '?'\n"),
        ("?x", "k: ?x\n"),
        (":x", "k: :x\n"),
    ];
    for (input, want) in cases {
        assert_eq!(one(input), want, "value {input:?}");
    }
}

#[test]
fn multiline_uses_literal() {
    assert_eq!(one("a\nb"), "k: |-\n  a\n  b\n");
    assert_eq!(one("a\n"), "k: |\n  a\n");
    assert_eq!(one("a\n\n"), "k: |+\n  a\n\n");
    assert_eq!(one("a\n\nb"), "k: |-\n  a\n\n  b\n");
    assert_eq!(one(" a\nb"), "k: |2-\n   a\n  b\n");
    // a space before a break forbids the literal style
    assert_eq!(one("a \nb"), "k: \"a \\nb\"\n");
}

#[test]
fn non_printable_is_binary() {
    assert_eq!(one("a\u{1}"), "k: !!binary |-\n  YQE=\n");
}

#[test]
fn long_plain_values_fold_at_column_80() {
    let words = "word ".repeat(20);
    let v = words.trim_end();
    let out = one(v);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() > 1, "{out}");
    assert!(lines[1].starts_with("  word"), "{out}");
    // folded lines read back to the same value
    let back: std::collections::BTreeMap<String, String> = serde_yaml_ng::from_str(&out).unwrap();
    assert_eq!(back["k"], v);
    // The first line breaks at the first space after column 80.
    assert_eq!(lines[0].len(), 82, "{out}");
}

#[test]
fn long_single_quoted_and_double_quoted_fold_and_read_back() {
    for v in [
        format!("{}: end", "word ".repeat(25)),
        format!("tab\t{}", "word ".repeat(25).trim_end()),
    ] {
        let out = one(&v);
        assert!(out.lines().count() > 1, "{out}");
        let back: std::collections::BTreeMap<String, String> =
            serde_yaml_ng::from_str(&out).unwrap();
        assert_eq!(back["k"], v, "{out}");
    }
}

#[test]
fn sequences_maps_and_ints() {
    let out = dump_map(&[
        ("a", Value::Int(-1)),
        ("b", Value::Bool(true)),
        ("l", Value::Seq(vec!["LOG", "x: y"])),
        (
            "p",
            Value::Map(vec![("key", "value"), ("", "e"), ("n", "1")]),
        ),
        ("z", Value::Str("end")),
    ]);
    assert_eq!(
        out,
        "a: -1\nb: true\nl:\n- LOG\n- 'x: y'\np:\n  key: value\n  ? ''\n  : e\n  n: '1'\nz: end\n"
    );
}
