//! `arbor` on a pseudo-terminal: its standard input and error are the terminal (what a
//! person types and reads), its standard output a pipe (the report). What the terminal shows
//! is collected as it comes, so a test can wait for a prompt and answer it.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};

/// A running `arbor` on a terminal.
pub(crate) struct OnTerminal {
    pub(crate) child: Child,
    master: std::fs::File,
    screen: Arc<Mutex<String>>,
}

impl OnTerminal {
    /// Starts `arbor ARGS` in `dir` on a new terminal of `cols` columns, with `env` set.
    pub(crate) fn start(dir: &Path, args: &[&str], cols: u16, env: &[(&str, &str)]) -> Self {
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let slave: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().unwrap())
            .unwrap()
            .into();
        let size = rustix::termios::Winsize {
            ws_row: 40,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(&slave, size).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_arbor"));
        cmd.args(args)
            .current_dir(dir)
            .env_remove("ARBOR_LOG")
            .env_remove("NO_COLOR")
            .env("TERM", "xterm-256color")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave))
            .stdout(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap();
        let master = std::fs::File::from(master);
        let screen = Arc::new(Mutex::new(String::new()));
        let mut reader = master.try_clone().unwrap();
        let seen = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self {
            child,
            master,
            screen,
        }
    }

    /// Everything the terminal showed so far.
    pub(crate) fn screen(&self) -> String {
        self.screen.lock().unwrap().clone()
    }

    /// Waits (up to 30 s) until the terminal has shown `text` `times` times.
    pub(crate) fn wait_for(&self, text: &str, times: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.screen().matches(text).count() < times {
            assert!(
                Instant::now() < deadline,
                "no {text:?} (x{times}) on the terminal:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `line` and Enter.
    pub(crate) fn type_line(&mut self, line: &str) {
        self.master
            .write_all(format!("{line}\r").as_bytes())
            .unwrap();
        self.master.flush().unwrap();
    }

    /// Types raw bytes (Ctrl-D is `\x04` at the start of a line).
    pub(crate) fn type_raw(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
        self.master.flush().unwrap();
    }

    /// Sends SIGINT to the process, as Ctrl-C on its terminal would.
    pub(crate) fn interrupt(&self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    }

    /// Waits for the process to end; its exit code and standard output.
    pub(crate) fn finish(mut self) -> (Option<i32>, String, String) {
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let status = self.child.wait().unwrap();
        // Let the reader take what is left on the terminal.
        std::thread::sleep(Duration::from_millis(100));
        (status.code(), out, self.screen())
    }
}
