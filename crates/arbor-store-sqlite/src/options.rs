//! Options of a [`SqliteStore`](crate::SqliteStore) connection.

use std::time::Duration;

/// How hard SQLite pushes each commit to disk (`PRAGMA synchronous`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Synchronous {
    /// `NORMAL`: with WAL, a commit survives a process crash; a power loss may lose the last
    /// commits but never corrupts the file. The default.
    #[default]
    Normal,
    /// `FULL`: every commit is synced to disk before it returns; survives a power loss.
    Full,
}

impl Synchronous {
    /// The pragma value.
    pub(crate) fn as_pragma(self) -> &'static str {
        match self {
            Self::Normal => "NORMAL",
            Self::Full => "FULL",
        }
    }
}

/// How a [`SqliteStore`](crate::SqliteStore) opens its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    pub(crate) busy_timeout: Duration,
    pub(crate) synchronous: Synchronous,
    pub(crate) read_only: bool,
    pub(crate) checkpoint_pages: u32,
}

/// The default [`SqliteOptions::checkpoint_pages`]: 8,192 pages, 32 MiB of log.
pub const CHECKPOINT_PAGES: u32 = 8192;

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(5),
            synchronous: Synchronous::Normal,
            read_only: false,
            checkpoint_pages: CHECKPOINT_PAGES,
        }
    }
}

impl SqliteOptions {
    /// The defaults: a busy timeout of 5 s, [`Synchronous::Normal`] and a checkpoint every
    /// [`CHECKPOINT_PAGES`] pages of log.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long an operation waits for another connection to release the file before it
    /// fails with `Locked`.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// The durability of each commit.
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// How long the write-ahead log grows, in pages, before a commit copies it back into the
    /// file (`PRAGMA wal_autocheckpoint`; SQLite's own default is 1,000). Each checkpoint
    /// `fsync`s the file; a longer log copies each hot page (a table's last leaf, an index's)
    /// once for many commits and syncs less often, which took about a tenth off a root run's
    /// time. The price: a log file of up to this many pages, and a longer replay at the first
    /// open after a crash. `0` turns automatic checkpoints off (the log then grows until the
    /// last connection closes). Clamped to `i32::MAX`.
    pub fn checkpoint_pages(mut self, pages: u32) -> Self {
        self.checkpoint_pages = pages;
        self
    }

    /// Opens the file read-only, for inspection: nothing is created, switched or migrated,
    /// so it works on a file or directory this user cannot write. A store whose schema is
    /// older than this build's is refused (opening it read-write once upgrades it), and
    /// every write fails with `Invalid`.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Whether the store is opened read-only.
    pub fn read_only_value(&self) -> bool {
        self.read_only
    }

    /// The configured busy timeout.
    pub fn busy_timeout_value(&self) -> Duration {
        self.busy_timeout
    }

    /// The configured checkpoint threshold, in pages of log.
    pub fn checkpoint_pages_value(&self) -> u32 {
        self.checkpoint_pages
    }

    /// The configured durability.
    pub fn synchronous_value(&self) -> Synchronous {
        self.synchronous
    }
}
