//! The Prometheus text format (0.0.4), written straight into a byte
//! buffer: no metric objects, no per-sample allocation. Labels are written
//! sorted by name, as the `prometheus` crate's encoder writes them, so a
//! series reads the same whichever writer produced it.

use std::fmt::Write as _;
use std::net::IpAddr;

use crate::metrics::family::Family;

/// A label value: text (escaped) or an address (written as is).
#[derive(Clone, Copy, Debug)]
pub enum Label<'a> {
    Text(&'a str),
    Ip(IpAddr),
}

/// A sample's value.
#[derive(Clone, Copy, Debug)]
pub enum Value {
    Int(u64),
    Float(f64),
}

/// Appends text to a byte buffer through `fmt::Write`.
struct Bytes<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// `# HELP` and `# TYPE` of `f`.
pub fn header(out: &mut Vec<u8>, f: &Family) {
    out.extend_from_slice(b"# HELP ");
    out.extend_from_slice(f.name.as_bytes());
    out.push(b' ');
    for c in f.help.bytes() {
        match c {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            c => out.push(c),
        }
    }
    out.extend_from_slice(b"\n# TYPE ");
    out.extend_from_slice(f.name.as_bytes());
    out.push(b' ');
    out.extend_from_slice(f.kind.name().as_bytes());
    out.push(b'\n');
}

/// One sample line: `name{labels} value`. `labels` are written in name
/// order whatever order they come in (at most [`MAX_LABELS`]).
pub fn sample(out: &mut Vec<u8>, name: &str, labels: &[(&str, Label<'_>)], value: Value) {
    out.extend_from_slice(name.as_bytes());
    write_labels(out, labels, None);
    out.push(b' ');
    write_value(out, value);
    out.push(b'\n');
}

/// The most labels one sample carries here.
pub const MAX_LABELS: usize = 4;

/// `{a="x",b="y"}` in name order, with `le` last when given (histogram
/// buckets); nothing without labels.
fn write_labels(out: &mut Vec<u8>, labels: &[(&str, Label<'_>)], le: Option<f64>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    let mut order = [0usize; MAX_LABELS];
    let n = labels.len().min(MAX_LABELS);
    for (i, o) in order.iter_mut().enumerate().take(n) {
        *o = i;
    }
    order[..n].sort_unstable_by_key(|&i| labels[i].0);
    out.push(b'{');
    for (k, &i) in order[..n].iter().enumerate() {
        if k > 0 {
            out.push(b',');
        }
        let (name, value) = labels[i];
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"=\"");
        match value {
            Label::Text(t) => escape_label(out, t),
            Label::Ip(a) => {
                let _ = write!(Bytes(out), "{a}");
            }
        }
        out.push(b'"');
    }
    if let Some(le) = le {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"le=\"");
        write_value(out, Value::Float(le));
        out.push(b'"');
    }
    out.push(b'}');
}

fn escape_label(out: &mut Vec<u8>, t: &str) {
    for c in t.bytes() {
        match c {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            c => out.push(c),
        }
    }
}

fn write_value(out: &mut Vec<u8>, v: Value) {
    match v {
        Value::Int(n) => {
            let _ = write!(Bytes(out), "{n}");
        }
        Value::Float(f) if f.is_nan() => out.extend_from_slice(b"NaN"),
        Value::Float(f) if f == f64::INFINITY => out.extend_from_slice(b"+Inf"),
        Value::Float(f) if f == f64::NEG_INFINITY => out.extend_from_slice(b"-Inf"),
        Value::Float(f) => {
            let _ = write!(Bytes(out), "{f}");
        }
    }
}

/// A histogram's lines for one label set: `bounds[i]` with the count of
/// bucket i (per bucket, not cumulative; `counts` may hold one overflow
/// bucket more than `bounds`), then `+Inf`, `_sum` and `_count`.
pub fn histogram(
    out: &mut Vec<u8>,
    name: &str,
    labels: &[(&str, Label<'_>)],
    bounds: &[f64],
    counts: &[u64],
    sum: f64,
) {
    let total: u64 = counts.iter().sum();
    let mut cumulative = 0u64;
    for (&bound, &n) in bounds.iter().zip(counts) {
        cumulative += n;
        suffixed(out, name, "_bucket");
        write_labels(out, labels, Some(bound));
        out.push(b' ');
        write_value(out, Value::Int(cumulative));
        out.push(b'\n');
    }
    suffixed(out, name, "_bucket");
    write_labels(out, labels, Some(f64::INFINITY));
    out.push(b' ');
    write_value(out, Value::Int(total));
    out.push(b'\n');
    suffixed(out, name, "_sum");
    write_labels(out, labels, None);
    out.push(b' ');
    write_value(out, Value::Float(sum));
    out.push(b'\n');
    suffixed(out, name, "_count");
    write_labels(out, labels, None);
    out.push(b' ');
    write_value(out, Value::Int(total));
    out.push(b'\n');
}

fn suffixed(out: &mut Vec<u8>, name: &str, suffix: &str) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(suffix.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn samples_sort_labels_and_escape_values() {
        let line = text(|o| {
            sample(
                o,
                "m",
                &[
                    ("service", Label::Text("a\"b\\c\nd")),
                    ("backend", Label::Ip("192.0.2.1".parse().unwrap())),
                ],
                Value::Int(7),
            )
        });
        assert_eq!(
            line,
            "m{backend=\"192.0.2.1\",service=\"a\\\"b\\\\c\\nd\"} 7\n"
        );
        assert_eq!(text(|o| sample(o, "m", &[], Value::Float(0.5))), "m 0.5\n");
        assert_eq!(
            text(|o| sample(o, "m", &[], Value::Float(f64::NAN))),
            "m NaN\n"
        );
    }

    #[test]
    fn headers_escape_help() {
        let f = Family {
            name: "m_total",
            help: "a\\b\nc",
            kind: crate::metrics::family::Kind::Counter,
            labels: &[],
        };
        assert_eq!(
            text(|o| header(o, &f)),
            "# HELP m_total a\\\\b\\nc\n# TYPE m_total counter\n"
        );
    }

    /// The same lines the `prometheus` crate's encoder writes for the same
    /// histogram.
    #[test]
    fn histograms_are_cumulative_with_inf_sum_and_count() {
        let got = text(|o| {
            histogram(
                o,
                "h",
                &[("service", Label::Text("s"))],
                &[0.5, 1.0],
                &[1, 2, 3],
                4.25,
            )
        });
        assert_eq!(
            got,
            "h_bucket{service=\"s\",le=\"0.5\"} 1\n\
             h_bucket{service=\"s\",le=\"1\"} 3\n\
             h_bucket{service=\"s\",le=\"+Inf\"} 6\n\
             h_sum{service=\"s\"} 4.25\n\
             h_count{service=\"s\"} 6\n"
        );
    }
}
