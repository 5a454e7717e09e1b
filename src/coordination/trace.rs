//! The trace of an execution, in W3C Trace Context terms, kept by the state machine without any
//! tracing library: its ids, the `traceparent` a worker gets in its `Trigger`, and the events
//! recorded while it runs. The `ops::telemetry` exporter turns a finished execution into an
//! OpenTelemetry span (`shardcar.execution`); with no exporter configured, this is all there is.
//!
//! Ids come from the execution id (128 random bits): the trace id is the execution id itself
//! unless the execution continues a caller's trace, and the span id folds its two halves. No
//! second random source, and a span can be found from the execution id in the history.

use std::time::SystemTime;

/// A caller's trace to continue (a `TriggerJob` call's `traceparent` and `tracestate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
    pub tracestate: String,
}

impl TraceParent {
    /// Parses a W3C `traceparent` (version 00, or a later version read as 00 allows): `None`
    /// when it is malformed or its ids are all zero, as the specification asks.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<TraceParent> {
        let parts: Vec<&str> = traceparent.trim().split('-').collect();
        if parts.len() < 4 {
            return None;
        }
        let (version, trace, span, flags) = (parts[0], parts[1], parts[2], parts[3]);
        if version.len() != 2 || version == "ff" || (version == "00" && parts.len() != 4) {
            return None;
        }
        hex_bytes::<1>(version)?;
        let trace_id = hex_bytes::<16>(trace)?;
        let span_id = hex_bytes::<8>(span)?;
        let flags = hex_bytes::<1>(flags)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            span_id,
            sampled: flags[0] & 1 == 1,
            tracestate: tracestate.unwrap_or_default().trim().to_string(),
        })
    }

    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }
}

/// Lowercase hex of exactly `N` bytes.
fn hex_bytes<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 * bytes.len());
    push_hex(&mut out, bytes);
    out
}

/// Appends the lowercase hex of `bytes` to `out` (a trigger carries one: no formatting
/// machinery, no string per byte).
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

/// The trace of one execution: its own span and, when it continues a caller's trace, the
/// caller's span as parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The caller's span, when the execution continues a trace.
    pub parent_span_id: Option<[u8; 8]>,
    pub sampled: bool,
    pub tracestate: String,
}

impl TraceContext {
    /// The trace of execution `execution_id` (32 hex digits), continuing `parent` if given.
    pub fn for_execution(execution_id: &str, parent: Option<&TraceParent>) -> TraceContext {
        let id = hex_bytes::<16>(execution_id).unwrap_or_else(|| {
            // Not one of ours (tests name executions freely): any stable non-zero bytes do.
            let mut b = [0u8; 16];
            for (i, c) in execution_id.bytes().enumerate() {
                b[i % 16] = b[i % 16].wrapping_mul(31).wrapping_add(c);
            }
            b
        });
        let mut span_id = [0u8; 8];
        for i in 0..8 {
            span_id[i] = id[i] ^ id[i + 8];
        }
        if span_id == [0; 8] {
            span_id[7] = 1;
        }
        let mut trace_id = id;
        if trace_id == [0; 16] {
            trace_id[15] = 1;
        }
        match parent {
            Some(p) => TraceContext {
                trace_id: p.trace_id,
                span_id,
                parent_span_id: Some(p.span_id),
                sampled: p.sampled,
                tracestate: p.tracestate.clone(),
            },
            None => TraceContext {
                trace_id,
                span_id,
                parent_span_id: None,
                sampled: true,
                tracestate: String::new(),
            },
        }
    }

    /// The W3C `traceparent` of this execution's span: what a worker's handler span is a child of.
    pub fn traceparent(&self) -> String {
        // "00-" trace id "-" span id "-" flags: 55 characters.
        let mut out = String::with_capacity(55);
        out.push_str("00-");
        push_hex(&mut out, &self.trace_id);
        out.push('-');
        push_hex(&mut out, &self.span_id);
        out.push_str(if self.sampled { "-01" } else { "-00" });
        out
    }

    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    pub fn span_id_hex(&self) -> String {
        hex(&self.span_id)
    }
}

/// Something that happened to an execution while it ran: an event of its span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanEvent {
    pub at: SystemTime,
    /// `running nodes written`, `trigger sent`, `answer`, `decline`, `revoke`.
    pub name: &'static str,
    pub attributes: Vec<(&'static str, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXEC: &str = "0af7651916cd43dd8448eb211c80319c";

    #[test]
    fn an_execution_without_a_caller_starts_its_own_trace() {
        let t = TraceContext::for_execution(EXEC, None);
        assert_eq!(t.trace_id_hex(), EXEC);
        assert_eq!(t.parent_span_id, None);
        let tp = t.traceparent();
        assert_eq!(tp.len(), 55, "{tp}");
        assert!(
            tp.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
            "{tp}"
        );
        assert!(tp.ends_with("-01"), "{tp}");
        assert_ne!(t.span_id, [0; 8]);
        // Stable: the same execution always has the same ids.
        assert_eq!(t, TraceContext::for_execution(EXEC, None));
    }

    #[test]
    fn an_execution_continues_its_callers_trace() {
        let parent = TraceParent::parse(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some("congo=t61rcWkgMzE"),
        )
        .expect("valid");
        let t = TraceContext::for_execution(EXEC, Some(&parent));
        assert_eq!(t.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent_span_id, Some(parent.span_id));
        assert_eq!(t.tracestate, "congo=t61rcWkgMzE");
        assert!(t
            .traceparent()
            .starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
        assert_ne!(t.span_id, parent.span_id);
    }

    #[test]
    fn a_traceparent_spells_every_byte_in_two_lowercase_digits() {
        let t = TraceContext {
            trace_id: [
                0x00, 0x01, 0x0a, 0x0f, 0x10, 0x7f, 0x80, 0x9a, 0xa9, 0xb0, 0xc3, 0xd4, 0xe5, 0xf6,
                0xfe, 0xff,
            ],
            span_id: [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7],
            parent_span_id: None,
            sampled: false,
            tracestate: String::new(),
        };
        assert_eq!(
            t.traceparent(),
            "00-00010a0f107f809aa9b0c3d4e5f6feff-00f067aa0ba902b7-00"
        );
        assert_eq!(t.trace_id_hex(), "00010a0f107f809aa9b0c3d4e5f6feff");
        assert_eq!(t.span_id_hex(), "00f067aa0ba902b7");
        let read = TraceParent::parse(&t.traceparent(), None).expect("what it writes, it reads");
        assert_eq!((read.trace_id, read.span_id), (t.trace_id, t.span_id));
        let sampled = TraceContext { sampled: true, ..t };
        assert!(sampled.traceparent().ends_with("-01"));
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad, None), None, "{bad:?}");
        }
        // A later version may carry more fields; the first four are read as version 00's.
        let later = TraceParent::parse(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-ever",
            None,
        )
        .expect("a later version is read");
        assert!(!later.sampled);
    }
}
