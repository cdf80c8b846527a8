//! Runs `examples/admission` (the simulated server against tokio's Semaphore) at a small
//! size and checks what it promises: the `admission: OK` line adds up to the requests made,
//! and bad options end with exit status 2, not a panic. The example needs feature `tokio`.
#![cfg(feature = "tokio")]

use std::process::Output;

use tickwheel_testkit::example::Example;

const ADMISSION: Example = Example::new("tickwheel", "admission").with_features(&["tokio"]);

fn run(args: &[&str]) -> Output {
    ADMISSION.run(args)
}

#[test]
fn small_run_is_ok_and_adds_up() {
    let out = run(&[
        "--waiters",
        "2000",
        "--connections",
        "20",
        "--global",
        "512",
        "--seed",
        "3",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("some output");
    assert!(
        last.starts_with("admission: OK (2000 requests = "),
        "{last}"
    );
    // "N requests = G granted + X expired + C cancelled, each once; ..."
    let nums: Vec<u64> = last
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("a number"))
        .collect();
    assert_eq!(nums[0], nums[1] + nums[2] + nums[3], "{last}");
    assert!(nums[2] > nums[1], "most of them expire: {last}");
    assert!(
        stdout.contains("per waiter") && stdout.contains("ratio"),
        "{stdout}"
    );
    // Each side's cost above the harness is its total less the harness's: a column apart.
    let row = |name: &str| -> Vec<f64> {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row {name:?}: {stdout}"));
        line[name.len()..]
            .split_whitespace()
            .filter_map(|w| w.trim_end_matches('x').parse().ok())
            .collect()
    };
    let (total, above) = (
        row("CPU time, all threads"),
        row("CPU time above the harness"),
    );
    // The two sides come first, the harness last (the ratio between may read "–").
    let harness = *total.last().expect("a harness figure");
    assert!(harness > 0.0, "{stdout}");
    for side in 0..2 {
        assert!(
            (total[side] - harness - above[side]).abs() <= 1.5,
            "side {side}: {total:?} less the harness is not {above:?}\n{stdout}"
        );
    }
}

#[test]
fn bad_options_exit_2() {
    for args in [
        &["--waiters", "0"][..],
        &["--local", "3"],
        // 20 × 256 KiB of local limits cannot hold the 8 192 KiB in flight.
        &["--waiters", "2000", "--connections", "20"],
        &["--no-such-option"],
        &["--seed", "x"],
    ] {
        let out = run(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("panicked"),
            "{args:?}"
        );
    }
}
