//! What arbor shows: the progress lines ([`progress`]) and the live tree ([`live`]) on
//! stderr while a tree runs, the table or JSON report on stdout ([`report`], and
//! [`run_report`] for the end of a run), the tree walked depth first ([`walk`]), and writing
//! to stdout/stderr without panicking on a closed pipe ([`output`]).

pub(crate) mod live;
pub(crate) mod output;
pub(crate) mod progress;
pub(crate) mod report;
pub(crate) mod run_report;
pub(crate) mod walk;
