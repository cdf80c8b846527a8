//! The parent of a proof program (an example that runs child processes and checks a
//! property at the end): its run directory and its exit status.

use std::path::Path;
use std::process::ExitCode;

/// Runs `run` in a new temporary directory named `<name>-…`, removed afterwards unless
/// `keep` (then its path is printed on standard error).
///
/// Exit status: success when `run` returns `Ok(true)`; failure for `Ok(false)` (the property
/// does not hold: `run` printed why), for `Err(e)` (the run could not be carried out: the
/// last line of standard output is then `<verdict>: FAILED the run did not finish: e`), and
/// when the directory cannot be made.
pub fn run_in_temp_dir(
    name: &str,
    verdict: &str,
    keep: bool,
    run: impl FnOnce(&Path) -> Result<bool, String>,
) -> ExitCode {
    let dir = match tempfile::Builder::new()
        .prefix(&format!("{name}-"))
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{name}: cannot make the run's directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = run(dir.path());
    if keep {
        eprintln!("run directory kept: {}", dir.keep().display());
    }
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{name}: {e}");
            println!("{verdict}: FAILED the run did not finish: {e}");
            ExitCode::FAILURE
        }
    }
}
