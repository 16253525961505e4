//! File modes of the store: it holds every prompt and tool output, so what arbor creates is
//! private to its owner, and a file others can read is warned about (once per process).
//!
//! The store file is created here with mode 0600 before SQLite opens it; SQLite gives the
//! `-wal` and `-shm` files it creates the main file's mode. A file that exists already keeps
//! its mode: it may be shared on purpose, so arbor only says so with a `tracing` warning.

use std::path::Path;

/// Creates the missing store file at `path`, empty and readable by its owner only. An
/// existing file is left alone; any other failure is left for SQLite's own open to report.
#[cfg(unix)]
pub(crate) fn create_private(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    if let Err(err) = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        && err.kind() != std::io::ErrorKind::AlreadyExists
    {
        tracing::debug!(path = %path.display(), %err, "could not create the store file");
    }
}

/// Elsewhere the platform's defaults apply.
#[cfg(not(unix))]
pub(crate) fn create_private(_path: &Path) {}

/// Warns (once per file and process) when the store file at `path` or its `-wal` / `-shm`
/// companion can be read or written by users other than its owner.
#[cfg(unix)]
pub(crate) fn warn_if_shared(path: &Path, shown: &str) {
    use std::collections::HashSet;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;
    use std::sync::{Mutex, PoisonError};

    static WARNED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

    let mode_of = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| m.permissions().mode() & 0o777)
    };
    let files = [
        path.to_path_buf(),
        companion(path, "-wal"),
        companion(path, "-shm"),
    ];
    let loose: Vec<(&PathBuf, u32)> = files
        .iter()
        .filter_map(|p| mode_of(p).map(|mode| (p, mode)))
        .filter(|(_, mode)| mode & 0o077 != 0)
        .collect();
    let Some(&(_, mode)) = loose.first() else {
        return;
    };
    let mut warned = WARNED.lock().unwrap_or_else(PoisonError::into_inner);
    if !warned
        .get_or_insert_with(HashSet::new)
        .insert(path.to_path_buf())
    {
        return;
    }
    let names: Vec<String> = loose.iter().map(|(p, _)| p.display().to_string()).collect();
    let mode = format!("{mode:o}");
    tracing::warn!(
        path = shown,
        mode = mode.as_str(),
        "the store file is readable or writable by other users, and it holds every prompt and \
         tool output; arbor leaves an existing file's mode alone: chmod 600 {}",
        names.join(" ")
    );
}

/// Elsewhere the platform's defaults apply.
#[cfg(not(unix))]
pub(crate) fn warn_if_shared(_path: &Path, _shown: &str) {}

/// `path` with `suffix` appended to its file name (`arbor.db-wal`).
#[cfg(unix)]
fn companion(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}
