//! The web view at `/`: one page, its script modules and its stylesheet, built into the
//! binary (no build step at install time). It is a thin client of the `/v1` API: the runs
//! (filters, paging, a form to start one from a named spec), one run's live tree as a tree
//! or a timeline (over `/v1/runs/{id}/events`, resumed after a drop), Approve, Reject and
//! answers on what waits (a merge with its files and hunks, and a Merge button), Cancel,
//! Resume, a transcript drawer read as a chat with tool cards,
//! messages to a kept session and deleting a child. Served with a content security policy
//! that allows only its own files.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("../web/index.html");
const SCRIPT: &str = include_str!("../web/app.js");
const STYLE: &str = include_str!("../web/app.css");
/// The modules `app.js` imports: `(path, source)`.
pub(crate) const MODULES: [(&str, &str); 5] = [
    ("/ui.js", include_str!("../web/ui.js")),
    ("/tree.js", include_str!("../web/tree.js")),
    ("/timeline.js", include_str!("../web/timeline.js")),
    ("/transcript.js", include_str!("../web/transcript.js")),
    ("/review.js", include_str!("../web/review.js")),
];

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

/// One of the script's modules.
pub(crate) fn module(source: &'static str) -> Response {
    file("text/javascript; charset=utf-8", source)
}
