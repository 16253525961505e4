//! A PostgreSQL server of a test's own, which it may stop, restart and kill: Debian's
//! `postgresql` binaries (which `.ci/postgres.sh` installs) on a throwaway cluster in a
//! temp dir, on a free loopback port, trusting local connections; stopped and deleted when
//! dropped. As root the cluster belongs to `nobody` (PostgreSQL refuses to run as root).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{PASSWORD, Pg};

/// A server [`OwnServer::start`] started.
pub(crate) struct OwnServer {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    root: bool,
}

impl OwnServer {
    /// A new cluster, started; `None` (said on stderr) when no PostgreSQL binaries exist.
    pub(crate) fn start(test: &str) -> Option<Self> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|versions| {
                let mut found: Vec<PathBuf> = versions
                    .filter_map(|v| v.ok().map(|v| v.path().join("bin")))
                    .filter(|b| b.join("pg_ctl").exists())
                    .collect();
                found.sort();
                found.pop()
            });
        let Some(bin) = bin else {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: no PostgreSQL binaries in /usr/lib/postgresql (run \
                 `. .ci/postgres.sh` once to install them)"
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
        if root {
            let ok = Command::new("chown")
                .args(["-R", "nobody"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(ok.success());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = Self {
            bin,
            dir,
            port,
            root,
        };
        let data = server.data();
        server.run(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "arbor",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        server.up();
        server.run(
            "createdb",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "arbor",
                "arbor",
            ],
        );
        Some(server)
    }

    /// The store of a test on this server: a URL with a password, a schema of its own.
    pub(crate) fn pg(&self) -> Pg {
        Pg {
            url: format!("postgres://arbor:{PASSWORD}@127.0.0.1:{}/arbor", self.port),
            schema: "arbor_restart".to_owned(),
        }
    }

    /// `pg_ctl restart -m fast`: every session is ended (transactions in flight are rolled
    /// back) and the server comes back on the same port.
    pub(crate) fn restart(&self) {
        self.ctl(&["restart", "-m", "fast"]);
    }

    /// Stops the server (`-m fast`), until [`OwnServer::up`].
    pub(crate) fn down(&self) {
        self.ctl(&["stop", "-m", "fast"]);
    }

    /// Starts the server stopped by [`OwnServer::down`].
    pub(crate) fn up(&self) {
        self.ctl(&["start"]);
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn ctl(&self, args: &[&str]) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=200 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let data = self.data();
        let log = self.dir.path().join("server.log");
        let mut all = vec![
            "-D",
            data.to_str().unwrap(),
            "-l",
            log.to_str().unwrap(),
            "-w",
            "-t",
            "30",
            "-o",
            &options,
        ];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all);
    }

    fn run(&self, program: &str, args: &[&str]) {
        let path = self.bin.join(program);
        let mut command = if self.root {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let out = command
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
        );
    }

    /// The server's log, for a failure's message.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Where the cluster lives.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.ctl(&["stop", "-m", "immediate"]);
        }));
    }
}
