//! The marker of a merge in flight, in the main checkout's git directory: the branch
//! checked out, the commit the merge started from and the commit merged, written whole
//! (synced, renamed into place) before git starts and removed once the merge is resolved.

use std::path::Path;

use crate::error::{CodingError, CodingResult};
use crate::git;

/// A merge in flight, as its marker names it.
pub(super) struct Marker {
    /// The branch checked out (`refs/heads/…`).
    pub(super) on: String,
    /// The commit it started from.
    pub(super) start: String,
    /// The commit merged.
    pub(super) tip: String,
}

impl Marker {
    /// Whether this marker's commit is `branch`'s tip now.
    pub(super) async fn tip_branch(&self, g: &Path, repo: &Path, branch: &str) -> bool {
        let refname = format!("refs/heads/{branch}");
        matches!(git::git(g, repo, &["rev-parse", "--verify", "--quiet", &refname]).await,
            Ok(t) if t == self.tip)
    }
}

pub(super) async fn read_marker(marker: &Path) -> CodingResult<Option<Marker>> {
    let text = match tokio::fs::read_to_string(marker).await {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(CodingError::Io(format!(
                "cannot read {}: {e}",
                marker.display()
            )));
        }
    };
    let mut parts = text.split_whitespace();
    match (parts.next(), parts.next(), parts.next()) {
        (Some(on), Some(start), Some(tip)) => Ok(Some(Marker {
            on: on.to_owned(),
            start: start.to_owned(),
            tip: tip.to_owned(),
        })),
        _ => Err(CodingError::Repository(format!(
            "{} is not a merge marker arbor wrote: remove it by hand",
            marker.display()
        ))),
    }
}

/// Writes the marker whole or not at all (a temporary file renamed over it, synced).
pub(super) async fn write_marker(
    marker: &Path,
    on: &str,
    start: &str,
    tip: &str,
) -> CodingResult<()> {
    let temp = marker.with_extension("tmp");
    let io = |e: std::io::Error| CodingError::Io(format!("cannot write {}: {e}", marker.display()));
    let mut f = tokio::fs::File::create(&temp).await.map_err(io)?;
    tokio::io::AsyncWriteExt::write_all(&mut f, format!("{on} {start} {tip}\n").as_bytes())
        .await
        .map_err(io)?;
    f.sync_all().await.map_err(io)?;
    drop(f);
    tokio::fs::rename(&temp, marker).await.map_err(io)
}

pub(super) async fn remove_marker(marker: &Path) -> CodingResult<()> {
    match tokio::fs::remove_file(marker).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CodingError::Io(format!(
            "cannot remove {}: {e}",
            marker.display()
        ))),
    }
}
