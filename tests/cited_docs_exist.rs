//! Every Markdown file the repository cites by a relative name exists: in code comments,
//! tests, examples and the documents themselves (`docs/design.md`, `docs/handoff.md`, ...). A
//! citation resolves against the workspace root, the citing file's directory, or the root of
//! the workspace crate it is in. Addresses (`https://...`) are not checked.

use std::path::{Path, PathBuf};

/// The `.rs` and `.md` files of the workspace, without build output and hidden directories.
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" {
                text_files(&path, out);
            }
        } else if name.ends_with(".rs") || name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The relative Markdown file names `text` cites.
fn cited_markdown(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_alphanumeric() || "_./-".contains(c)))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| w.len() > 3 && w.ends_with(".md") && !w.starts_with('/'))
        .collect()
}

#[test]
fn every_cited_markdown_file_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    text_files(root, &mut files);
    assert!(
        files.len() > 100,
        "found the sources ({} files)",
        files.len()
    );
    let mut missing = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let rel = file.strip_prefix(root).unwrap_or(file);
        let crate_root = rel.components().next().map(|c| root.join(c));
        for cited in cited_markdown(&text) {
            let mut bases = vec![root.to_path_buf()];
            bases.extend(file.parent().map(Path::to_path_buf));
            bases.extend(
                crate_root
                    .clone()
                    .filter(|c| c.join("Cargo.toml").is_file()),
            );
            if !bases.iter().any(|b| b.join(cited).is_file()) {
                missing.push(format!("{}: {cited}", rel.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "cited but missing:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_scan_finds_citations() {
    assert_eq!(
        cited_markdown("see docs/design.md, and [fleet](docs/fleet.md)."),
        ["docs/design.md", "docs/fleet.md"]
    );
    assert!(cited_markdown("https://github.com/o/r/blob/main/README.md").is_empty());
}
