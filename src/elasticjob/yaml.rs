//! A SnakeYAML-compatible emitter for the small documents ElasticJob writes (`config`,
//! `instances/{id}`), so that what shardcar writes is byte-for-byte what Java writes.
//!
//! ElasticJob dumps its POJOs with SnakeYAML 2.x `dumpAsMap` in block style (default width 80,
//! indent 2, unicode allowed). This module reproduces the parts of SnakeYAML's `Emitter`,
//! `Resolver` and `SafeRepresenter` that such documents exercise: the choice between plain,
//! single-quoted, double-quoted and literal scalars, line folding at column 80, `!!binary`
//! for non-printable strings, indentless block sequences and nested block mappings.
//! Columns are counted in UTF-16 code units, as Java does.
//!
//! Writing stays hand-written on purpose: no YAML library emits SnakeYAML's exact bytes, and the
//! vectors of real ElasticJob 3.0.4 (tests) hold it to them. Reading goes through
//! `serde_yaml_ng` (the maintained fork of `serde_yaml`).

mod resolve;
mod scan;
#[cfg(test)]
mod tests;

use resolve::resolves_to_str;
use scan::{analyze, char_count, code_point_at, is_linebr, is_printable};

/// One value of a top-level key.
pub(crate) enum Value<'a> {
    Str(&'a str),
    Int(i64),
    Bool(bool),
    Seq(Vec<&'a str>),
    Map(Vec<(&'a str, &'a str)>),
    /// Already-rendered lines (key included), copied verbatim; must end with a line break.
    Raw(&'a str),
}

/// Dumps a top-level block mapping. Entries are written in the order given.
pub(crate) fn dump_map(entries: &[(&str, Value<'_>)]) -> String {
    let mut e = Emitter::default();
    for (key, value) in entries {
        if let Value::Raw(raw) = value {
            e.set_indent(0);
            if e.column > 0 {
                e.line_break();
            }
            e.out.extend(raw.encode_utf16());
            e.column = 0;
            e.whitespace = true;
            e.indention = true;
            continue;
        }
        e.write_key(key, 0);
        match value {
            Value::Str(s) => e.scalar_str(s, false, 2),
            Value::Int(n) => e.scalar_implicit(&n.to_string(), 2),
            Value::Bool(b) => e.scalar_implicit(if *b { "true" } else { "false" }, 2),
            Value::Seq(items) => {
                // After a simple key SnakeYAML writes the sequence "indentless".
                let seq_indent = if e.indention { 2 } else { 0 };
                for item in items {
                    e.set_indent(seq_indent);
                    e.write_indent();
                    e.write_indicator("-", true, false, true);
                    e.scalar_str(item, false, seq_indent + 2);
                }
            }
            Value::Map(pairs) => {
                for (k, v) in pairs {
                    e.write_key(k, 2);
                    e.scalar_str(v, false, 4);
                }
            }
            Value::Raw(_) => unreachable!("handled above"),
        }
    }
    e.set_indent(0);
    e.write_indent();
    String::from_utf16_lossy(&e.out)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

const BEST_WIDTH: usize = 80;
const MAX_SIMPLE_KEY_LENGTH: usize = 128;

struct Emitter {
    out: Vec<u16>,
    column: usize,
    whitespace: bool,
    indention: bool,
    indent: usize,
}

impl Default for Emitter {
    fn default() -> Self {
        Emitter {
            out: Vec::new(),
            column: 0,
            whitespace: true,
            indention: true,
            indent: 0,
        }
    }
}

impl Emitter {
    fn set_indent(&mut self, indent: usize) {
        self.indent = indent;
    }

    fn raw(&mut self, s: &[u16]) {
        self.column += s.len();
        self.out.extend_from_slice(s);
    }

    fn raw_str(&mut self, s: &str) {
        let v: Vec<u16> = s.encode_utf16().collect();
        self.raw(&v);
    }

    fn write_indicator(&mut self, ind: &str, need_ws: bool, whitespace: bool, indentation: bool) {
        if !self.whitespace && need_ws {
            self.raw_str(" ");
        }
        self.whitespace = whitespace;
        self.indention = self.indention && indentation;
        self.raw_str(ind);
    }

    fn line_break(&mut self) {
        self.whitespace = true;
        self.indention = true;
        self.column = 0;
        self.out.push(0x0A);
    }

    /// A line break other than `\n` (NEL, LS, PS) is written as itself.
    fn line_break_char(&mut self, c: u16) {
        if c == 0x0A {
            self.line_break();
        } else {
            self.whitespace = true;
            self.indention = true;
            self.column = 0;
            self.out.push(c);
        }
    }

    fn write_indent(&mut self) {
        let indent = self.indent;
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.line_break();
        }
        if indent > self.column {
            self.whitespace = true;
            let n = indent - self.column;
            self.raw(&vec![0x20; n]);
        }
    }

    /// Writes a mapping key at `map_indent`, then the `:` indicator.
    fn write_key(&mut self, key: &str, map_indent: usize) {
        self.set_indent(map_indent);
        self.write_indent();
        let units: Vec<u16> = key.encode_utf16().collect();
        let a = analyze(&units);
        if units.len() < MAX_SIMPLE_KEY_LENGTH && !a.empty && !a.multiline {
            self.scalar_str(key, true, map_indent + 2);
            self.write_indicator(":", false, false, false);
        } else {
            self.write_indicator("?", true, false, true);
            self.scalar_str(key, false, map_indent + 2);
            self.set_indent(map_indent);
            self.write_indent();
            self.write_indicator(":", true, false, true);
        }
    }

    /// A non-string scalar whose plain form resolves to its own type (int, bool).
    fn scalar_implicit(&mut self, text: &str, indent: usize) {
        let saved = self.indent;
        self.indent = indent;
        let units: Vec<u16> = text.encode_utf16().collect();
        self.write_plain(&units, true);
        self.indent = saved;
    }

    /// A `java.lang.String` value, represented and styled as SnakeYAML does.
    fn scalar_str(&mut self, s: &str, simple_key: bool, indent: usize) {
        let saved = self.indent;
        self.indent = indent;
        let binary = !is_printable_str(s);
        let text: String = if binary {
            base64(s.as_bytes())
        } else {
            s.to_owned()
        };
        let units: Vec<u16> = text.encode_utf16().collect();
        let a = analyze(&units);
        let requested = if binary || units.iter().any(|&c| is_linebr(c)) {
            Style::Literal
        } else {
            Style::Plain
        };
        let style = if requested == Style::Plain
            && resolves_to_str(&text)
            && !(simple_key && (a.empty || a.multiline))
            && a.allow_block_plain
        {
            Style::Plain
        } else if requested == Style::Literal && !simple_key && a.allow_block {
            Style::Literal
        } else if requested == Style::Plain && a.allow_single_quoted && !(simple_key && a.multiline)
        {
            Style::Single
        } else {
            Style::Double
        };
        if binary {
            self.write_indicator("!!binary", true, false, false);
        }
        let split = !simple_key;
        match style {
            Style::Plain => self.write_plain(&units, split),
            Style::Single => self.write_single_quoted(&units, split),
            Style::Double => self.write_double_quoted(&units, split),
            Style::Literal => self.write_literal(&units),
        }
        self.indent = saved;
    }

    fn write_plain(&mut self, text: &[u16], split: bool) {
        if text.is_empty() {
            return;
        }
        if !self.whitespace {
            self.raw_str(" ");
        }
        self.whitespace = false;
        self.indention = false;
        let (mut spaces, mut breaks) = (false, false);
        let (mut start, mut end) = (0usize, 0usize);
        while end <= text.len() {
            let ch = if end < text.len() { text[end] } else { 0 };
            if spaces {
                if ch != 0x20 {
                    if start + 1 == end && self.column > BEST_WIDTH && split {
                        self.write_indent();
                        self.whitespace = false;
                        self.indention = false;
                    } else {
                        self.raw(&text[start..end]);
                    }
                    start = end;
                }
            } else if breaks {
                if !is_linebr(ch) {
                    if text[start] == 0x0A {
                        self.line_break();
                    }
                    for &br in &text[start..end] {
                        self.line_break_char(br);
                    }
                    self.write_indent();
                    self.whitespace = false;
                    self.indention = false;
                    start = end;
                }
            } else if ch == 0 || ch == 0x20 || is_linebr(ch) {
                self.raw(&text[start..end]);
                start = end;
            }
            if ch != 0 {
                spaces = ch == 0x20;
                breaks = is_linebr(ch);
            }
            end += 1;
        }
    }

    fn write_single_quoted(&mut self, text: &[u16], split: bool) {
        self.write_indicator("'", true, false, false);
        let (mut spaces, mut breaks) = (false, false);
        let (mut start, mut end) = (0usize, 0usize);
        while end <= text.len() {
            let ch = if end < text.len() { text[end] } else { 0 };
            if spaces {
                if ch != 0x20 {
                    if start + 1 == end
                        && self.column > BEST_WIDTH
                        && split
                        && start != 0
                        && end != text.len()
                    {
                        self.write_indent();
                    } else {
                        self.raw(&text[start..end]);
                    }
                    start = end;
                }
            } else if breaks {
                if ch == 0 || !is_linebr(ch) {
                    if text[start] == 0x0A {
                        self.line_break();
                    }
                    for &br in &text[start..end] {
                        self.line_break_char(br);
                    }
                    self.write_indent();
                    start = end;
                }
            } else if (ch == 0 || ch == 0x20 || ch == u16::from(b'\'') || is_linebr(ch))
                && start < end
            {
                self.raw(&text[start..end]);
                start = end;
            }
            if ch == u16::from(b'\'') {
                self.raw_str("''");
                start = end + 1;
            }
            if ch != 0 {
                spaces = ch == 0x20;
                breaks = is_linebr(ch);
            }
            end += 1;
        }
        self.write_indicator("'", false, false, false);
    }

    fn write_double_quoted(&mut self, text: &[u16], split: bool) {
        self.write_indicator("\"", true, false, false);
        let (mut start, mut end) = (0usize, 0usize);
        while end <= text.len() {
            let ch = if end < text.len() {
                Some(text[end])
            } else {
                None
            };
            let needs_escape = match ch {
                None => true,
                Some(c) => {
                    matches!(c, 0x22 | 0x5C | 0x85 | 0x2028 | 0x2029 | 0xFEFF)
                        || !(0x20..=0x7E).contains(&c)
                }
            };
            if needs_escape {
                if start < end {
                    self.raw(&text[start..end]);
                    start = end;
                }
                if let Some(c) = ch {
                    let data: String = if let Some(e) = escape_replacement(c) {
                        format!("\\{e}")
                    } else {
                        let cp = code_point_at(text, end);
                        if is_printable(cp) {
                            if char_count(cp) == 2 {
                                end += 1;
                            }
                            char::from_u32(cp).map(String::from).unwrap_or_default()
                        } else if c <= 0xFF {
                            format!("\\x{c:02x}")
                        } else if char_count(cp) == 2 {
                            end += 1;
                            format!("\\U{cp:08x}")
                        } else {
                            format!("\\u{c:04x}")
                        }
                    };
                    self.raw_str(&data);
                    start = end + 1;
                }
            }
            if 0 < end
                && end + 1 < text.len()
                && (ch == Some(0x20) || start >= end)
                // Java computes `column + (end - start)` in ints: after an escape it is -1.
                && self.column as isize + (end as isize - start as isize) > BEST_WIDTH as isize
                && split
            {
                if start < end {
                    let part = text[start..end].to_vec();
                    self.raw(&part);
                    start = end;
                }
                self.raw_str("\\");
                self.write_indent();
                self.whitespace = false;
                self.indention = false;
                if text[start] == 0x20 {
                    self.raw_str("\\");
                }
            }
            end += 1;
        }
        self.write_indicator("\"", false, false, false);
    }

    fn write_literal(&mut self, text: &[u16]) {
        let mut hints = String::new();
        if is_linebr(text[0]) || text[0] == 0x20 {
            hints.push('2');
        }
        let last = text[text.len() - 1];
        if !is_linebr(last) {
            hints.push('-');
        } else if text.len() == 1 || is_linebr(text[text.len() - 2]) {
            hints.push('+');
        }
        self.write_indicator(&format!("|{hints}"), true, false, false);
        self.line_break();
        let mut breaks = true;
        let (mut start, mut end) = (0usize, 0usize);
        while end <= text.len() {
            let ch = if end < text.len() { text[end] } else { 0 };
            if breaks {
                if ch == 0 || !is_linebr(ch) {
                    for &br in &text[start..end] {
                        self.line_break_char(br);
                    }
                    if ch != 0 {
                        self.write_indent();
                    }
                    start = end;
                }
            } else if ch == 0 || is_linebr(ch) {
                self.out.extend_from_slice(&text[start..end]);
                if ch == 0 {
                    self.line_break();
                }
                start = end;
            }
            if ch != 0 {
                breaks = is_linebr(ch);
            }
            end += 1;
        }
    }
}

fn is_printable_str(s: &str) -> bool {
    s.chars().all(|c| is_printable(c as u32))
}

fn escape_replacement(c: u16) -> Option<char> {
    Some(match c {
        0x00 => '0',
        0x07 => 'a',
        0x08 => 'b',
        0x09 => 't',
        0x0A => 'n',
        0x0B => 'v',
        0x0C => 'f',
        0x0D => 'r',
        0x1B => 'e',
        0x22 => '"',
        0x5C => '\\',
        0x85 => 'N',
        0xA0 => '_',
        0x2028 => 'L',
        0x2029 => 'P',
        _ => return None,
    })
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].iter().enumerate() {
            if i <= chunk.len() {
                out.push(A[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A string read leniently: any scalar, with its text as written (`123` reads as `"123"`,
/// `''` as `""`). Used for string-typed keys, as SnakeYAML's `loadAs` does into `String` fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Text(pub String);

impl<'de> serde::Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Text;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a scalar")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text, E> {
                Ok(Text(v.to_owned()))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
        }
        d.deserialize_str(V)
    }
}
