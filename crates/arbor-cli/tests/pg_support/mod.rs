//! A PostgreSQL store for the CLI's tests: the test server of `ARBOR_TEST_POSTGRES_URL`
//! (`. .ci/postgres.sh`), a schema of each test's own, and `arbor` run against it with a
//! password in the URL that no output may show. Without a server the tests skip loudly.

pub(crate) mod fleet;
pub(crate) mod own;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// Trust authentication takes any password: this one must never be shown.
pub(crate) const PASSWORD: &str = "pw-never-shown-4711";

pub(crate) struct Pg {
    /// The URL with a password in it.
    pub(crate) url: String,
    pub(crate) schema: String,
}

pub(crate) fn server(test: &str) -> Option<Pg> {
    let Some(base) = std::env::var("ARBOR_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: no PostgreSQL server under CI=true (a CI run without one is not green)"
        );
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: no PostgreSQL server (set ARBOR_TEST_POSTGRES_URL, or run \
             `. .ci/postgres.sh` first)"
        );
        return None;
    };
    let url = base.replacen(
        "postgres://arbor@",
        &format!("postgres://arbor:{PASSWORD}@"),
        1,
    );
    assert!(
        url.contains(PASSWORD),
        "the test server's URL has another user: {base}"
    );
    // The clock alone is not enough: tests started at once in one process read the same
    // nanoseconds, shared a schema, and their workers ran each other's children.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let schema = format!(
        "arbor_cli_{}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    Some(Pg { url, schema })
}

pub(crate) fn arbor(dir: &Path, pg: &Pg, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env("ARBOR_STORE_URL", &pg.url)
        .env("ARBOR_STORE_SCHEMA", &pg.schema)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap();
    for stream in [&out.stdout, &out.stderr] {
        let text = String::from_utf8_lossy(stream);
        assert!(
            !text.contains(PASSWORD),
            "{args:?} showed the password: {text}"
        );
    }
    out
}

/// A process a test started, killed (and reaped) when the test is done with it, however the
/// test ends: a failed assertion never leaves a worker running.
#[derive(Debug)]
pub(crate) struct Proc(pub(crate) std::process::Child);

impl std::ops::Deref for Proc {
    type Target = std::process::Child;

    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Proc {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `arbor ARGS` in `dir` on the store of `pg`, not waited for. Its stderr goes to `stderr`,
/// and its stdout to the file [`stdout_of`] names: never to a pipe, which a report larger
/// than the pipe's buffer (64 KiB) would fill while nobody reads it before the process
/// ends, and the process would never end.
pub(crate) fn spawn(dir: &Path, pg: &Pg, args: &[&str], stderr: &Path) -> Proc {
    Proc(
        Command::new(env!("CARGO_BIN_EXE_arbor"))
            .args(args)
            .current_dir(dir)
            .env("ARBOR_STORE_URL", &pg.url)
            .env("ARBOR_STORE_SCHEMA", &pg.schema)
            .env("ARBOR_LOG", "info")
            .stdout(std::fs::File::create(stdout_of(stderr)).unwrap())
            .stderr(std::fs::File::create(stderr).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// Where [`spawn`] writes the stdout of the process whose stderr goes to `stderr`.
pub(crate) fn stdout_of(stderr: &Path) -> std::path::PathBuf {
    stderr.with_extension("out")
}

/// `arbor ARGS` on `pg`, which must succeed, its stdout read as JSON.
pub(crate) fn json(dir: &Path, pg: &Pg, args: &[&str]) -> Value {
    let out = arbor(dir, pg, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Drops the test's schema (on a thread of its own: callers may be inside a runtime).
pub(crate) fn drop_schema(pg: &Pg) {
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let pool = sqlx::PgPool::connect(&pg.url).await.unwrap();
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP SCHEMA \"{}\" CASCADE",
                    pg.schema
                )))
                .execute(&pool)
                .await
                .unwrap();
            });
        });
    });
}
