//! The web view at `/`: one page, its script and its stylesheet, built into the binary (no
//! build step at install time). It is a thin client of the `/v1` API: the runs, one run's
//! live tree grouped Needs input / Working / Done (over `/v1/runs/{id}/events`, resumed
//! after a drop), Approve and Reject on what waits, Cancel on what runs, a transcript
//! drawer. Served with a content security policy that allows only its own files.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("../web/index.html");
const SCRIPT: &str = include_str!("../web/app.js");
const STYLE: &str = include_str!("../web/app.css");

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn file(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// The page.
pub(crate) async fn index() -> Response {
    file("text/html; charset=utf-8", INDEX)
}

/// Its script.
pub(crate) async fn script() -> Response {
    file("text/javascript; charset=utf-8", SCRIPT)
}

/// Its stylesheet.
pub(crate) async fn style() -> Response {
    file("text/css; charset=utf-8", STYLE)
}
