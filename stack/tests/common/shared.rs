//! The reference files of `../shared` (ROCEV2 vectors, public vectors),
//! for every test tree: `stack/tests/common` declares this module, and
//! `tests/common` and `ibverbs/tests` include it by path.

use std::path::{Path, PathBuf};

use roce_stack::testing::unhex;

/// `../shared` beside the repository (CI lays a copy there), or
/// `$ROCE_SHARED_DIR`. The repository is the manifest directory of the
/// test's crate or an ancestor of it (a workspace member).
pub fn shared_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("ROCE_SHARED_DIR") {
        return PathBuf::from(d);
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .map(|a| a.join("../shared"))
        .find(|d| d.join("reference").is_dir())
        .unwrap_or_else(|| here.join("../shared"))
}

/// The named frames of `reference/vectors.txt`: (`## name`, bytes).
pub fn reference_vectors() -> Vec<(String, Vec<u8>)> {
    let text = std::fs::read_to_string(shared_dir().join("reference/vectors.txt"))
        .expect("read ../shared/reference/vectors.txt");
    let mut out = Vec::new();
    let mut name = String::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("## ") {
            name = n.trim().to_string();
        } else if let Some(h) = line.strip_prefix("hex: ") {
            out.push((name.clone(), unhex(h)));
        }
    }
    out
}

/// The fenced hex frames of `reference/public-vectors.md`, each with the `###`
/// heading it sits under.
pub fn public_vectors() -> Vec<(String, Vec<u8>)> {
    let text = std::fs::read_to_string(shared_dir().join("reference/public-vectors.md"))
        .expect("read ../shared/reference/public-vectors.md");
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut in_block = false;
    let mut block = String::new();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("### ") {
            heading = h.trim().to_string();
        } else if line.trim() == "```" {
            if in_block {
                out.push((heading.clone(), unhex(&block)));
                block.clear();
            }
            in_block = !in_block;
        } else if in_block {
            block.push_str(line.trim());
        }
    }
    out
}
