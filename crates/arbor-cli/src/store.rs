//! Opening the store the CLI runs on.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arbor_store::{MemoryStore, Store};
use arbor_store_sqlite::SqliteOptions;

/// Which store a run uses, for messages and reports.
#[derive(Debug, Clone)]
pub(crate) enum StoreName {
    Memory,
    Sqlite(PathBuf),
}

impl StoreName {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Sqlite(_) => "sqlite",
        }
    }
}

impl fmt::Display for StoreName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory => f.write_str("the in-memory store"),
            Self::Sqlite(p) => write!(f, "sqlite {}", p.display()),
        }
    }
}

/// The default store file.
pub(crate) const DEFAULT_STORE: &str = ".arbor/arbor.db";

/// Opens the in-memory store, the given SQLite file, or `./.arbor/arbor.db`.
pub(crate) fn open(
    memory: bool,
    path: Option<&Path>,
) -> Result<(Arc<dyn Store>, StoreName), String> {
    if memory {
        return Ok((Arc::new(MemoryStore::new()), StoreName::Memory));
    }
    let path = path.map_or_else(|| PathBuf::from(DEFAULT_STORE), Path::to_path_buf);
    if path.as_os_str() == DEFAULT_STORE
        && let Some(dir) = path.parent()
    {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let busy = std::env::var("ARBOR_BUSY_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(5_000);
    let store = SqliteOptions::new()
        .busy_timeout(Duration::from_millis(busy))
        .open(&path)
        .map_err(|e| e.to_string())?;
    Ok((Arc::new(store), StoreName::Sqlite(path)))
}
