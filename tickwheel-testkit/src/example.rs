//! Runs an example of a workspace package as its users do: built (once per test process,
//! with the test's own profile and target directory, so a stale binary is never run), then
//! started as a child process.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Mutex, PoisonError};

/// An example: its package, its name and the features it is built with.
#[derive(Debug, Clone, Copy)]
pub struct Example {
    package: &'static str,
    name: &'static str,
    features: &'static [&'static str],
}

impl Example {
    /// The example `name` of the workspace package `package`, without features.
    pub const fn new(package: &'static str, name: &'static str) -> Self {
        Example {
            package,
            name,
            features: &[],
        }
    }

    /// The same example built with `features` of its package.
    pub const fn with_features(self, features: &'static [&'static str]) -> Self {
        Example { features, ..self }
    }

    /// The example's binary, built by `cargo build -p PACKAGE --example NAME` in the test's
    /// profile (`--release` when the test binary is in `target/release`) and target directory,
    /// the first time in this process it is asked for.
    ///
    /// # Panics
    /// If the test binary's path does not lie in `target/<profile>/deps/`, cargo fails, or no
    /// binary is where cargo puts it.
    pub fn binary(&self) -> PathBuf {
        static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
        let key = format!("{}/{}/{}", self.package, self.name, self.features.join(","));
        // Held across the build: tests asking at once wait for one build.
        let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
        let built = built.get_or_insert_with(HashMap::new);
        if let Some(path) = built.get(&key) {
            return path.clone();
        }
        let path = self.build();
        built.insert(key, path.clone());
        path
    }

    fn build(&self) -> PathBuf {
        let exe = std::env::current_exe().expect("test binary path");
        // target/<profile>/deps/<test>-<hash> -> target/<profile>/examples/<name>
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("profile dir");
        let target_dir = profile_dir.parent().expect("target dir");
        let binary = profile_dir.join("examples").join(format!(
            "{}{}",
            self.name,
            std::env::consts::EXE_SUFFIX
        ));
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "-p", self.package, "--example", self.name])
            .arg("--target-dir")
            .arg(target_dir);
        if !self.features.is_empty() {
            cargo.arg("--features").arg(self.features.join(","));
        }
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cargo.arg("--release");
        }
        let status = cargo
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build");
        assert!(
            status.success(),
            "cargo build -p {} --example {} failed",
            self.package,
            self.name
        );
        assert!(binary.exists(), "no example binary at {}", binary.display());
        binary
    }

    /// A command running the example's [binary](Example::binary).
    pub fn command(&self) -> Command {
        Command::new(self.binary())
    }

    /// Runs the example with `args` and waits for it.
    ///
    /// # Panics
    /// As [`Example::binary`], or if the program cannot be started.
    pub fn run<S: AsRef<OsStr>>(&self, args: impl IntoIterator<Item = S>) -> Output {
        self.command()
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run the {} example: {e}", self.name))
    }

    /// Runs the example with each of `lines` (bad command lines) and asserts that it exits
    /// with status 2, a usage error, and that its standard error reports no panic.
    ///
    /// # Panics
    /// On the first line that exits otherwise or panics, naming it with the standard error;
    /// as [`Example::run`].
    pub fn assert_usage_errors(&self, lines: &[&[&str]]) {
        for line in lines {
            let out = self.run(*line);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{line:?}: {err}");
            assert!(!err.contains("panicked"), "{line:?}: {err}");
        }
    }
}

/// `bytes` as text (invalid UTF-8 replaced).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The last line of the output's standard output, `""` if it wrote none.
pub fn last_line(out: &Output) -> String {
    text(&out.stdout).lines().last().unwrap_or("").to_owned()
}

/// Of `programs` (binary, Debian package), those that cannot be run (`BINARY --version`
/// fails to start), each as `BINARY is not installed (apt-get install PACKAGE)`.
pub fn missing(programs: &[(&str, &str)]) -> Vec<String> {
    programs
        .iter()
        .filter(|(bin, _)| Command::new(bin).arg("--version").output().is_err())
        .map(|(bin, pkg)| format!("{bin} is not installed (apt-get install {pkg})"))
        .collect()
}

/// Whether a test can go on: `true` if `why` is `None`; else, outside CI (`CI` unset), prints
/// the reason and returns `false` (the test skips).
///
/// # Panics
/// If `why` is `Some` and `CI` is set: CI must run every test.
pub fn can_run(why: Option<String>) -> bool {
    let Some(why) = why else { return true };
    assert!(std::env::var_os("CI").is_none(), "cannot run in CI: {why}");
    eprintln!("skipped: {why}");
    false
}

/// [`can_run`] with the [`missing`] programs as the reason.
///
/// # Panics
/// As [`can_run`].
pub fn installed(programs: &[(&str, &str)]) -> bool {
    let missing = missing(programs);
    can_run((!missing.is_empty()).then(|| missing.join("; ")))
}
