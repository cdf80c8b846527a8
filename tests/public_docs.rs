//! The published documentation (docs.rs) names no file its reader cannot open: no private
//! source file (`slots.rs`, `due.rs`, a test file, ...) and no relative link to a Markdown
//! file of the repository (`docs/mta.md`), which is dead on docs.rs. Absolute `https://`
//! links are fine.
//!
//! Scans every published library crate of the workspace (`src/` and each `*/src/` beside
//! it whose manifest does not say `publish = false`): the
//! crate and module docs (`//!`) of every public module, found by following `pub mod`
//! declarations from `lib.rs`, and the `///` docs of every `pub` item in any file (an item of
//! a private module may be re-exported; `pub(crate)` items are skipped). Test files
//! (`tests.rs`, `*_tests.rs`, `tests/`) are not published and not scanned.

use std::path::{Path, PathBuf};

/// The `src/` directories of the workspace's library crates.
fn crate_sources() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dirs = vec![root.join("src")];
    for entry in std::fs::read_dir(root).expect("the workspace root is readable") {
        let path = entry.expect("a directory entry").path();
        let manifest = std::fs::read_to_string(path.join("Cargo.toml")).unwrap_or_default();
        let published = !manifest
            .lines()
            .any(|l| l.replace(' ', "") == "publish=false");
        if published && path.join("src/lib.rs").is_file() {
            dirs.push(path.join("src"));
        }
    }
    dirs
}

fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !is_test_file(&path) {
                files.push(path);
            }
        }
    }
    files
}

/// The files of the public modules: `lib.rs` and, recursively, every `pub mod name;` it
/// declares (`name.rs` or `name/mod.rs` beside the declaring module's own directory).
fn public_module_files(src: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![(src.join("lib.rs"), src.to_path_buf())];
    while let Some((file, dir)) = todo.pop() {
        let text = std::fs::read_to_string(&file).expect("a module file is readable");
        for line in text.lines() {
            let Some(rest) = line.trim_start().strip_prefix("pub mod ") else {
                continue;
            };
            let Some(name) = rest.strip_suffix(';') else {
                continue; // an inline module: its docs are in `file`, scanned below
            };
            let (flat, nested) = (
                dir.join(format!("{name}.rs")),
                dir.join(name).join("mod.rs"),
            );
            if flat.is_file() {
                todo.push((flat, dir.join(name)));
            } else if nested.is_file() {
                todo.push((nested, dir.join(name)));
            }
        }
        out.push(file);
    }
    out
}

fn names_a_file(doc: &str) -> bool {
    doc.split(|c: char| !(c.is_alphanumeric() || "_./:-".contains(c)))
        .any(|word| {
            let file = word.len() > 3 && (word.ends_with(".rs") || word.ends_with(".md"));
            file && !word.starts_with("https://") && !word.starts_with("http://")
        })
}

#[test]
fn public_docs_name_no_private_files() {
    let mut bad = Vec::new();
    let mut scanned = 0;
    for src in crate_sources() {
        let public = public_module_files(&src);
        for path in rust_files(&src) {
            scanned += 1;
            let text = std::fs::read_to_string(&path).expect("a source file is readable");
            let module_docs_published = public.contains(&path);
            let mut block: Vec<(usize, &str)> = Vec::new();
            for (n, line) in text.lines().enumerate() {
                let trimmed = line.trim_start();
                if let Some(doc) = trimmed.strip_prefix("//!") {
                    if module_docs_published && names_a_file(doc) {
                        bad.push(format!("{}:{}: {doc}", path.display(), n + 1));
                    }
                } else if let Some(doc) = trimmed.strip_prefix("///") {
                    block.push((n + 1, doc));
                } else if trimmed.starts_with("#[") {
                    // Attributes between a doc block and its item.
                } else {
                    if trimmed.starts_with("pub ") {
                        for &(n, doc) in block.iter().filter(|(_, doc)| names_a_file(doc)) {
                            bad.push(format!("{}:{n}: {doc}", path.display()));
                        }
                    }
                    block.clear();
                }
            }
        }
    }
    assert!(scanned > 40, "found the sources ({scanned} files)");
    assert!(
        bad.is_empty(),
        "public docs name files:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_scan_recognises_file_names() {
    assert!(names_a_file(" see `slots.rs` for the layout"));
    assert!(names_a_file(" described in [docs/mta.md](docs/mta.md)"));
    assert!(names_a_file(" see docs/design.md"));
    assert!(!names_a_file(
        " see <https://github.com/tickwheel/tickwheel/blob/main/docs/mta.md>"
    ));
    assert!(!names_a_file(" returns the value in O(1)"));
}

/// The fenced blocks of a Markdown text whose info string is `lang` (or empty, for `lang ==
/// ""`), each with its lines.
fn fenced_blocks(text: &str, lang: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_start().strip_prefix("```")) {
            (None, Some(info)) => {
                if info.trim() == lang {
                    current = Some(String::new());
                } else {
                    // Another language: skip to its end.
                    current = Some("\u{0}".to_string());
                }
            }
            (Some(block), Some(_)) => {
                if !block.starts_with('\u{0}') {
                    blocks.push(std::mem::take(block));
                }
                current = None;
            }
            (Some(block), None) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

/// The README is not compiled; each of its Rust blocks must be, as shown, one of the crate
/// docs' examples (which run as doctests) with rustdoc's hidden `# ` lines left out. A README
/// block therefore never shows a hidden line, and never drifts from tested code.
#[test]
fn readme_examples_are_the_tested_crate_examples() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md is readable");
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("src/lib.rs is readable");
    let crate_docs: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| format!("{}\n", l.strip_prefix(' ').unwrap_or(l)))
        .collect();
    let tested: Vec<String> = fenced_blocks(&crate_docs, "")
        .into_iter()
        .map(|block| {
            block
                .lines()
                .filter(|l| !(l.starts_with("# ") || *l == "#"))
                .map(|l| format!("{l}\n"))
                .collect()
        })
        .collect();
    let shown = fenced_blocks(&readme, "rust");
    assert!(shown.len() >= 3, "README's Rust blocks: {}", shown.len());
    for block in &shown {
        assert!(
            tested.contains(block),
            "a README block is not one of src/lib.rs's examples:\n{block}"
        );
        assert!(
            !block.lines().any(|l| l.starts_with("# ")),
            "a hidden line shows:\n{block}"
        );
    }
}
