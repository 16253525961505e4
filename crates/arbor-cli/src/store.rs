//! Which store a run uses and how it is opened; updating a record against its version
//! ([`update_record`]).
//!
//! The default is the SQLite file `./.arbor/arbor.db` (its directory is created when
//! missing, mode 0700 on Unix, as the store holds every prompt and tool output; the store
//! creates its files 0600); `--store PATH` names another file (its directory must exist);
//! `--store postgres://…` (or `ARBOR_STORE_URL`, when `--store` is not given) a PostgreSQL
//! database shared by many processes, its tables in the schema `ARBOR_STORE_SCHEMA` names
//! (else the default one); `--memory` keeps nothing. A PostgreSQL URL's password is used to
//! connect and never shown: messages and reports name the server without it.
//! `ARBOR_BUSY_TIMEOUT_MS` sets how long an operation waits for another process that holds
//! the file before it fails with `store <path> is locked by another process`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arbor_store::{MemoryStore, Store};
use arbor_store_postgres::{PostgresOptions, PostgresStore};
use arbor_store_sqlite::SqliteOptions;

use crate::fail::Fail;

/// The default store file.
pub(crate) const DEFAULT_STORE: &str = ".arbor/arbor.db";
/// The environment variable with the busy timeout in milliseconds.
pub(crate) const BUSY_TIMEOUT_ENV: &str = "ARBOR_BUSY_TIMEOUT_MS";
/// The environment variable naming the store when `--store` does not: a `postgres://` URL
/// or a SQLite file.
pub(crate) const STORE_URL_ENV: &str = "ARBOR_STORE_URL";
/// The environment variable naming the PostgreSQL schema of the store's tables.
pub(crate) const STORE_SCHEMA_ENV: &str = "ARBOR_STORE_SCHEMA";
const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Which store a run uses, for messages and reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreName {
    /// The in-memory store.
    Memory,
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database: its URL without the password.
    Postgres(String),
}

impl StoreName {
    /// The backend as the JSON report names it.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Sqlite(_) => "sqlite",
            Self::Postgres(_) => "postgres",
        }
    }
}

impl fmt::Display for StoreName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory => f.write_str("memory"),
            Self::Sqlite(p) => write!(f, "sqlite {}", p.display()),
            Self::Postgres(shown) => write!(f, "postgres {shown}"),
        }
    }
}

/// A PostgreSQL URL as given, password included: used to connect, never shown.
#[derive(Clone, PartialEq, Eq)]
struct Url(String);

impl fmt::Debug for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Url(..)")
    }
}

/// How a run's store is chosen and opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreChoice {
    name: StoreName,
    busy_timeout: Duration,
    /// For [`StoreName::Postgres`]: the URL and the schema.
    postgres: Option<(Url, Option<String>)>,
}

/// Whether `target` names a PostgreSQL database rather than a file.
pub(crate) fn is_postgres_url(target: &str) -> bool {
    let lower = target.trim_start().to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

impl StoreChoice {
    /// The choice `--memory` / `--store PATH|URL` (else `ARBOR_STORE_URL`) make, with the busy
    /// timeout and schema of the environment. Fails (as bad usage) when
    /// `ARBOR_BUSY_TIMEOUT_MS` is not a number of milliseconds, or a PostgreSQL URL cannot
    /// be read (the message names where it came from, never the password).
    pub(crate) fn from_args(memory: bool, path: Option<&Path>) -> Result<Self, Fail> {
        let busy = std::env::var(BUSY_TIMEOUT_ENV).ok();
        let busy_timeout = parse_busy_timeout(busy.as_deref())?;
        let env = std::env::var(STORE_URL_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty());
        let (target, origin) = match (memory, path, env) {
            (true, ..) => (None, ""),
            (false, Some(path), _) => (Some(path.to_string_lossy().into_owned()), "--store"),
            (false, None, Some(env)) => (Some(env), STORE_URL_ENV),
            (false, None, None) => (None, ""),
        };
        match target {
            Some(url) if is_postgres_url(&url) => {
                let shown = arbor_store_postgres::redacted_url(&url)
                    .map_err(|why| Fail::usage(format!("{origin}: {why}")))?;
                let schema = std::env::var(STORE_SCHEMA_ENV)
                    .ok()
                    .filter(|v| !v.trim().is_empty());
                Ok(Self {
                    name: StoreName::Postgres(shown),
                    busy_timeout,
                    postgres: Some((Url(url), schema)),
                })
            }
            Some(file) => Ok(Self::new(false, Some(Path::new(&file)), busy_timeout)),
            None => Ok(Self::new(memory, None, busy_timeout)),
        }
    }

    fn new(memory: bool, path: Option<&Path>, busy_timeout: Duration) -> Self {
        let name = if memory {
            StoreName::Memory
        } else {
            StoreName::Sqlite(path.map_or_else(|| PathBuf::from(DEFAULT_STORE), Path::to_path_buf))
        };
        Self {
            name,
            busy_timeout,
            postgres: None,
        }
    }

    /// The store chosen.
    pub(crate) fn name(&self) -> &StoreName {
        &self.name
    }

    /// Opens a store that must exist already (for commands that read what a run left): a
    /// SQLite file must be there; a PostgreSQL database is reached (an empty one is an empty
    /// store).
    pub(crate) async fn open_existing(&self) -> Result<Arc<dyn Store>, Fail> {
        if let StoreName::Sqlite(path) = &self.name
            && !path.exists()
        {
            return Err(Fail::usage(format!(
                "no store at {} (a run creates it: arbor run SPEC)",
                path.display()
            )));
        }
        self.open().await
    }

    /// The PostgreSQL store, when the choice is one (`None` for SQLite and memory), for what
    /// needs the database itself (the work queue).
    pub(crate) async fn open_postgres(&self) -> Result<Option<PostgresStore>, Fail> {
        let Some((url, schema)) = &self.postgres else {
            return Ok(None);
        };
        let mut options = PostgresOptions::new().acquire_timeout(self.busy_timeout);
        if let Some(schema) = schema {
            options = options.schema(schema);
        }
        let store = options
            .connect(&url.0)
            .await
            .map_err(|e| Fail::store(e.to_string()))?;
        Ok(Some(store))
    }

    /// Opens the store. Every failure is a store failure (exit 3) with the store's message.
    pub(crate) async fn open(&self) -> Result<Arc<dyn Store>, Fail> {
        let path = match (&self.name, &self.postgres) {
            (StoreName::Memory, _) => return Ok(Arc::new(MemoryStore::new())),
            (StoreName::Postgres(shown), _) => {
                let store = self
                    .open_postgres()
                    .await?
                    .ok_or_else(|| Fail::store(format!("store {shown}: no URL to connect with")))?;
                return Ok(Arc::new(store));
            }
            (StoreName::Sqlite(path), _) => path,
        };
        if path.as_os_str() == DEFAULT_STORE
            && let Some(dir) = path.parent()
        {
            private_dir(dir).map_err(|e| {
                Fail::store(format!(
                    "cannot create {}: {}",
                    dir.display(),
                    io_reason(&e)
                ))
            })?;
        }
        let store = SqliteOptions::new()
            .busy_timeout(self.busy_timeout)
            .open(path)
            .map_err(|e| Fail::store(e.to_string()))?;
        Ok(Arc::new(store))
    }
}

/// Creates the store's directory readable by its owner only (0700 on Unix: the store holds
/// every prompt and tool output), with a `.gitignore` holding `*` so that arbor's directory
/// never dirties the repository it is made in. An existing directory keeps its mode, with a
/// warning when others can read or enter it.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        warn_if_shared_dir(dir);
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)?;
    std::fs::write(dir.join(".gitignore"), "*\n")
}

#[cfg(unix)]
fn warn_if_shared_dir(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(dir) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            let mode = format!("{mode:o}");
            tracing::warn!(
                dir = %dir.display(),
                mode = mode.as_str(),
                "the store's directory is open to other users, and the store holds every prompt \
                 and tool output; arbor leaves an existing directory's mode alone: chmod 700 {}",
                dir.display()
            );
        }
    }
}

#[cfg(not(unix))]
fn warn_if_shared_dir(_dir: &Path) {}

fn parse_busy_timeout(value: Option<&str>) -> Result<Duration, Fail> {
    match value.map(str::trim) {
        None | Some("") => Ok(DEFAULT_BUSY_TIMEOUT),
        Some(v) => v.parse::<u64>().map(Duration::from_millis).map_err(|_| {
            Fail::usage(format!(
                "{BUSY_TIMEOUT_ENV} must be a number of milliseconds, not {v:?}"
            ))
        }),
    }
}

/// An I/O error's text without the ` (os error N)` suffix.
pub(crate) fn io_reason(err: &std::io::Error) -> String {
    let text = err.to_string();
    match text.rfind(" (os error ") {
        Some(i) if text.ends_with(')') => text[..i].to_owned(),
        _ => text,
    }
}

/// Updates the record `id` with what `change` makes of it, against the record's version,
/// reading it again when another writer (the owner's heartbeat, which writes `meta` too) got
/// there first; up to eight tries. A record that is gone is left alone.
pub(crate) async fn update_record(
    store: &dyn arbor_store::Store,
    id: arbor_protocol::SessionId,
    change: impl Fn(&arbor_store::SessionRecord) -> arbor_store::SessionUpdate,
) -> Result<(), arbor_store::StoreError> {
    for _ in 0..8 {
        let Some(record) = store.session(id).await? else {
            return Ok(());
        };
        let update = arbor_store::SessionUpdate {
            expected_version: Some(record.version),
            ..change(&record)
        };
        match store.update_session(id, &update).await {
            Err(arbor_store::StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(e),
            Ok(_) => return Ok(()),
        }
    }
    Ok(())
}

/// Opens the store of `args` (it must exist) and sweeps dead owners' runs.
pub(crate) async fn open(args: &crate::cli::StoreArgs) -> Result<Arc<dyn Store>, Fail> {
    let store = StoreChoice::from_args(false, args.store.as_deref())?
        .open_existing()
        .await?;
    crate::owner::sweep(&store).await?;
    Ok(store)
}

/// Opens the store of `args` for a command that only reads: as [`open`] does, and when the
/// store cannot be written (a read-only file or directory, a full disk), read-only, without
/// the sweep (what it shows is then as the last writer left it).
pub(crate) async fn open_to_read(args: &crate::cli::StoreArgs) -> Result<Arc<dyn Store>, Fail> {
    let choice = StoreChoice::from_args(false, args.store.as_deref())?;
    let store = match choice.open_existing().await {
        Ok(store) => store,
        Err(e) if e.code == crate::fail::EXIT_STORE => {
            let StoreName::Sqlite(path) = choice.name() else {
                return Err(e);
            };
            match arbor_store_sqlite::SqliteStore::open_read_only(path) {
                Ok(store) => {
                    tracing::warn!(error = %e.message, "the store cannot be written; reading it as it is");
                    return Ok(Arc::new(store));
                }
                Err(_) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    if let Err(e) = crate::owner::sweep(&store).await {
        // Reading still works: the runs of dead owners just show as they were left.
        tracing::warn!(error = %e.message, "could not mark the runs of dead processes interrupted");
    }
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choice_follows_the_flags() {
        let d = DEFAULT_BUSY_TIMEOUT;
        assert_eq!(StoreChoice::new(true, None, d).name(), &StoreName::Memory);
        assert_eq!(
            StoreChoice::new(false, None, d).name().to_string(),
            "sqlite .arbor/arbor.db"
        );
        let other = StoreChoice::new(false, Some(Path::new("x/y.db")), d);
        assert_eq!(other.name().kind(), "sqlite");
        assert_eq!(other.name().to_string(), "sqlite x/y.db");
        let pg = StoreChoice::from_args(
            false,
            Some(Path::new(
                "postgres://arbor:hunter2@db:5432/arbor?password=x&sslmode=require",
            )),
        )
        .unwrap_or_else(|f| panic!("{}", f.message));
        assert_eq!(pg.name().kind(), "postgres");
        let shown = format!("{} {pg:?}", pg.name());
        assert!(
            shown.starts_with("postgres postgres://arbor@db:5432/arbor?sslmode=require "),
            "{shown}"
        );
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn busy_timeout_is_parsed_strictly() {
        assert_eq!(parse_busy_timeout(None).ok(), Some(DEFAULT_BUSY_TIMEOUT));
        assert_eq!(
            parse_busy_timeout(Some("250")).ok(),
            Some(Duration::from_millis(250))
        );
        let err = parse_busy_timeout(Some("soon"))
            .err()
            .map(|f| (f.code, f.message));
        assert_eq!(
            err,
            Some((
                crate::fail::EXIT_USAGE,
                "ARBOR_BUSY_TIMEOUT_MS must be a number of milliseconds, not \"soon\"".to_owned()
            ))
        );
    }

    #[test]
    fn io_reasons_drop_the_os_error_number() {
        let e = std::io::Error::from_raw_os_error(2);
        assert_eq!(io_reason(&e), "No such file or directory");
    }
}
