//! `sluice explain` against the running appliance: the request line the
//! client sends over the control socket, and the answer the appliance
//! renders from its published snapshot, its real health and the port
//! MACs it runs with.
//!
//! The request is one line: `explain <text|json> <PORT|-> <FLOW>`.

use sluice_core::snapshot::ForwardingState;

use super::{packet, render, Explainer};
use crate::config::Config;
use crate::publish::ServiceReport;

/// The control-socket request for `flow` arriving on `port` (None: the
/// first port).
pub fn request_line(json: bool, port: Option<&str>, flow: &str) -> String {
    let format = if json { "json" } else { "text" };
    format!("explain {format} {} {flow}", port.unwrap_or("-"))
}

/// The answer to a request line's arguments (after `explain `), or why
/// it cannot be answered.
pub fn answer(
    cfg: &Config,
    state: ForwardingState,
    reports: Vec<ServiceReport>,
    args: &str,
) -> Result<String, String> {
    let mut words = args.splitn(3, ' ');
    let (Some(format), Some(port), Some(flow)) = (words.next(), words.next(), words.next()) else {
        return Err(format!("malformed explain request {args:?}"));
    };
    let frame = packet::frame_of_flow(flow).map_err(|e| e.to_string())?;
    let ex = Explainer {
        cfg,
        state,
        reports,
        unhealthy: Default::default(),
    };
    let rx_port = match port {
        "-" => 0,
        name => ex
            .port_index(name)
            .ok_or_else(|| format!("no [[dataplane.port]] named {name:?}"))?,
    };
    let e = ex.explain(&frame, rx_port);
    Ok(match format {
        "json" => format!("{}\n", render::json(&ex, &e)),
        _ => render::text(&ex, &e),
    })
}
