//! `type = "HTTP"` (HC-2, HC-7): `GET request_path` with a `Host`
//! header, passing on one of `response_codes`.

use super::kind::CheckType;
use crate::config::context::Ctx;
use crate::config::raw::RawHealthCheck;

/// An HTTP check's request and the answers that pass.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HttpCheck {
    /// Absolute path (default `/`).
    pub request_path: String,
    /// None: `<ip>:<port>` (HC-2).
    pub host: Option<String>,
    /// Expected status codes (default `[200]`).
    pub response_codes: Vec<u16>,
}

impl CheckType for HttpCheck {
    const NAME: &'static str = "HTTP";
    const FIELDS: &'static [&'static str] = &["request_path", "host", "response_codes"];

    fn validate(cx: &mut Ctx<'_>, h: &RawHealthCheck, at: &str) -> Self {
        HttpCheck {
            request_path: request_path(cx, h, at),
            host: h.host.as_ref().map(|s| s.get_ref().clone()),
            response_codes: response_codes(cx, h, at),
        }
    }
}

fn request_path(cx: &mut Ctx<'_>, h: &RawHealthCheck, at: &str) -> String {
    match &h.request_path {
        Some(p) if !p.get_ref().starts_with('/') => {
            cx.err(
                p.span(),
                format_args!("{at}.request_path"),
                (
                    format!("request_path {:?} does not start with '/'", p.get_ref()),
                    format!("write an absolute path, e.g. \"/{}\"", p.get_ref()),
                ),
            );
            "/".into()
        }
        Some(p) => p.get_ref().clone(),
        None => "/".into(),
    }
}

fn response_codes(cx: &mut Ctx<'_>, h: &RawHealthCheck, at: &str) -> Vec<u16> {
    let Some(codes) = &h.response_codes else {
        return vec![200];
    };
    if codes.get_ref().is_empty() {
        cx.err(
            codes.span(),
            format_args!("{at}.response_codes"),
            (
                "empty list".into(),
                "list at least one status code, e.g. [200]".into(),
            ),
        );
    }
    codes
        .get_ref()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let path = format!("{at}.response_codes[{i}]");
            cx.int(&Some(c.clone()), 200u16, (100, 599), &path, "status code")
        })
        .collect()
}
