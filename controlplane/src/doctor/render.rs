//! The report as an operator reads it: one line per path with each
//! check's outcome, and under a failing path what is wrong and the fix.

use std::fmt::Write as _;

use super::{Check, Outcome, Report};

/// The report as a table, its problems and hints under it, and a summary.
pub fn text(report: &Report) -> String {
    let header = [
        "SERVICE",
        "BACKEND",
        "VIA",
        "NEXT HOP",
        "DIRECT",
        "TO VIP",
        "TO BACKEND",
        "FULL SIZE",
    ];
    let lines: Vec<[String; 8]> = report
        .rows
        .iter()
        .map(|r| {
            [
                r.service.clone(),
                r.backend.to_string(),
                format!("{} {}", r.protocol, socket(r.vip, r.port)),
                cell(&r.next_hop),
                cell(&r.direct),
                cell(&r.to_vip),
                cell(&r.to_backend),
                cell(&r.full_size),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for l in &lines {
        for (w, c) in widths.iter_mut().zip(l) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let mut row = |cells: &[&str]| {
        let mut line = String::new();
        for (c, w) in cells.iter().zip(widths) {
            let _ = write!(line, "{c:<w$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    };
    row(&header);
    for l in &lines {
        row(&l.each_ref().map(String::as_str));
    }
    for r in &report.rows {
        let Some(hint) = &r.hint else { continue };
        let what = r.problem.map_or("note", |p| p.name());
        let _ = write!(
            out,
            "\n{} {} via {}: {what}\n",
            r.service,
            r.backend,
            socket(r.vip, r.port)
        );
        for c in [
            &r.next_hop,
            &r.direct,
            &r.to_vip,
            &r.to_backend,
            &r.full_size,
        ] {
            if c.outcome == Outcome::Fail && r.problem.is_some() {
                let _ = writeln!(out, "  seen: {}", c.detail);
            }
        }
        let _ = writeln!(out, "  hint: {hint}");
    }
    let failing = report.failing();
    let _ = write!(
        out,
        "\n{} path(s) checked, {failing} failing",
        report.rows.len()
    );
    if report.unchecked > 0 {
        let _ = write!(
            out,
            "; {} more not checked (at most {} per run)",
            report.unchecked,
            super::MAX_ROWS
        );
    }
    out.push('\n');
    out
}

/// One check in a cell: `ok`, the failure's reason, or `-`.
fn cell(c: &Check) -> String {
    match c.outcome {
        Outcome::Pass => "ok".into(),
        Outcome::Fail => c.reason().unwrap_or("fail").to_string(),
        Outcome::Skipped => "-".into(),
    }
}

fn socket(ip: std::net::IpAddr, port: u16) -> String {
    std::net::SocketAddr::new(ip, port).to_string()
}
