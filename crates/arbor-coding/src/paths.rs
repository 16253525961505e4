//! Confinement: every path a coding tool takes is relative to the worktree and must stay in
//! it, out of git's own data. Absolute paths, `..` components and symlinks that lead out
//! are refused; so is any path that names, or (symlinks resolved) leads into, a `.git`
//! entry, the worktree's git directory or the repository's common one (hooks and config
//! there are what git runs on the host).

use std::path::{Component, Path, PathBuf};

use crate::error::{CodingError, CodingResult};

/// A directory the tools of one child are confined to.
#[derive(Debug, Clone)]
pub struct Workdir {
    root: PathBuf,
    /// The git directories the worktree uses (canonical): its `.git` folder, or the one its
    /// `.git` file points to and that one's common directory.
    git_dirs: Vec<PathBuf>,
}

impl Workdir {
    /// Confines tools to `dir`, which must exist (it is canonicalized once).
    pub fn new(dir: impl AsRef<Path>) -> CodingResult<Self> {
        let dir = dir.as_ref();
        let root = std::fs::canonicalize(dir)
            .map_err(|e| CodingError::Io(format!("cannot use {}: {e}", dir.display())))?;
        if !root.is_dir() {
            return Err(CodingError::Io(format!(
                "{} is not a directory",
                dir.display()
            )));
        }
        let git_dirs = git_dirs(&root);
        Ok(Self { root, git_dirs })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `path` resolved inside the directory. It may name something that does not exist yet
    /// (a file to write); whatever part exists is checked with symlinks followed.
    pub fn resolve(&self, path: &str) -> CodingResult<PathBuf> {
        let escape = || CodingError::Escape {
            path: path.to_owned(),
        };
        let rel = Path::new(path);
        let mut joined = self.root.clone();
        for c in rel.components() {
            match c {
                // A `.git` entry would let a tool rewrite what git runs on the host (hooks,
                // fsmonitor, a gitdir pointer): refused, in any case.
                c if is_git_component(c) => return Err(escape()),
                Component::Normal(part) => joined.push(part),
                Component::CurDir => {}
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    return Err(escape());
                }
            }
        }
        // The deepest part that exists, with symlinks followed, must still be inside.
        let mut existing = joined.as_path();
        loop {
            if existing.symlink_metadata().is_ok() {
                let real = std::fs::canonicalize(existing).map_err(|_| escape())?;
                // Checked where it really is, not as written: a link to `.git` is `.git`.
                let Ok(inside) = real.strip_prefix(&self.root) else {
                    return Err(escape());
                };
                if inside.components().any(is_git_component)
                    || self.git_dirs.iter().any(|g| real.starts_with(g))
                {
                    return Err(escape());
                }
                break;
            }
            match existing.parent() {
                Some(parent) => existing = parent,
                None => return Err(escape()),
            }
        }
        Ok(joined)
    }

    /// `path` shown relative to the directory.
    pub fn display(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.display().to_string())
    }
}

/// Whether `c` is a `.git` entry (any case: some file systems ignore it).
fn is_git_component(c: Component<'_>) -> bool {
    matches!(c, Component::Normal(part) if part.eq_ignore_ascii_case(".git"))
}

/// The git directories of the work tree at `root` (canonical; none for a plain folder):
/// `root/.git` when it is a folder; when it is a file (a linked worktree), the directory
/// its `gitdir:` line names and that one's `commondir` (the main repository's `.git`).
fn git_dirs(root: &Path) -> Vec<PathBuf> {
    let dot_git = root.join(".git");
    let mut dirs = Vec::new();
    if dot_git.is_dir() {
        dirs.extend(std::fs::canonicalize(&dot_git));
        return dirs;
    }
    let Ok(text) = std::fs::read_to_string(&dot_git) else {
        return dirs;
    };
    let Some(gitdir) = text.lines().find_map(|l| l.strip_prefix("gitdir:")) else {
        return dirs;
    };
    let Ok(gitdir) = std::fs::canonicalize(root.join(gitdir.trim())) else {
        return dirs;
    };
    if let Ok(common) = std::fs::read_to_string(gitdir.join("commondir")) {
        dirs.extend(std::fs::canonicalize(gitdir.join(common.trim())));
    }
    dirs.push(gitdir);
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_leave_the_directory_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        let w = Workdir::new(dir.path()).unwrap();
        assert!(w.resolve("src/main.rs").unwrap().ends_with("src/main.rs"));
        assert!(w.resolve("./new/dir/file.txt").is_ok());
        assert!(w.resolve("").unwrap() == w.root());
        for bad in [
            "../x",
            "src/../../x",
            "/etc/passwd",
            "src/..",
            ".git/config",
            "a/.GIT",
        ] {
            let e = w.resolve(bad).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("path {bad:?} is outside the worktree")
            );
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
            assert!(w.resolve("out/secret").is_err());
            assert!(w.resolve("out").is_err());
            std::os::unix::fs::symlink(dir.path().join("src"), dir.path().join("in")).unwrap();
            assert!(
                w.resolve("in/lib.rs").is_ok(),
                "a link that stays inside is fine"
            );
        }
    }
}
