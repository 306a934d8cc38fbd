//! The README and docs/ link to each other and to the code: every relative link (a file, and
//! a heading's anchor where it names one) resolves.

use std::path::{Path, PathBuf};

/// GitHub's anchor of a heading: lower case, spaces to hyphens, punctuation other than
/// hyphens and underscores dropped.
fn anchor(heading: &str) -> String {
    let text = heading.trim_start_matches('#').trim().to_lowercase();
    text.chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(markdown: &str) -> Vec<String> {
    let mut in_code = false;
    let mut found = Vec::new();
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            found.push(anchor(line));
        }
    }
    found
}

/// The targets of the inline links `[text](target)` outside code blocks.
fn links(markdown: &str) -> Vec<String> {
    let mut in_code = false;
    let mut found = Vec::new();
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    found
}

fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let docs = std::fs::read_dir(root.join("docs")).expect("docs/");
    files.extend(docs.map(|entry| entry.unwrap().path()).filter(|path| path.extension().is_some_and(|e| e == "md")));
    files
}

#[test]
fn every_relative_link_of_the_readme_and_docs_resolves() {
    let mut broken = Vec::new();
    for document in documents() {
        let text = std::fs::read_to_string(&document).unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = link.split_once('#').map_or((link.as_str(), None), |(f, a)| (f, Some(a)));
            let target = if file.is_empty() { document.clone() } else { document.parent().unwrap().join(file) };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", document.display()));
                continue;
            }
            let is_markdown = target.extension().is_some_and(|e| e == "md");
            if let (Some(fragment), true) = (fragment, is_markdown) {
                if !anchors(&std::fs::read_to_string(&target).unwrap()).iter().any(|a| a == fragment) {
                    broken.push(format!("{}: {link} (no such heading)", document.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n  {}", broken.join("\n  "));
}

#[test]
fn anchors_and_links_are_read_as_github_renders_them() {
    assert_eq!(anchor("### `cargo lambda` with the sample events"), "cargo-lambda-with-the-sample-events");
    assert_eq!(anchor("## 12. Deliveries that heal themselves"), "12-deliveries-that-heal-themselves");
    assert_eq!(links("see [a](docs/a.md#x) and [b](#y)\n```\n[c](nowhere)\n```"), ["docs/a.md#x", "#y"]);
}

/// Cargo runs each file of `tests/` as a binary of its own, but a file of `tests/it/` only
/// when `tests/it/main.rs` declares it: every one is.
#[test]
fn every_file_of_tests_runs() {
    let it = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let main = std::fs::read_to_string(it.join("main.rs")).unwrap();
    let mut idle = Vec::new();
    for entry in std::fs::read_dir(&it).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().and_then(|n| n.to_str()).filter(|_| path.extension().is_some_and(|e| e == "rs"));
        if let Some(name) = name.filter(|name| *name != "main" && !main.contains(&format!("mod {name};"))) {
            idle.push(name.to_owned());
        }
    }
    assert!(idle.is_empty(), "files of tests/it/ that no binary runs: {idle:?} (add `mod` lines to tests/it/main.rs)");
}

/// A crate target that says `test = false` has no unit test, and a library that says
/// `doctest = false` no example in its docs: else they would never run.
#[test]
fn no_test_is_where_a_manifest_says_there_is_none() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = workspace.split("members = [").nth(1).unwrap().split(']').next().unwrap();
    let mut hidden = Vec::new();
    for member in members.split('"').skip(1).step_by(2) {
        let manifest = std::fs::read_to_string(root.join(member).join("Cargo.toml")).unwrap();
        // Each target section's lines: `[lib]` or `[[bin]]`, then its keys.
        for section in manifest.split("\n[").skip(1) {
            let (header, keys) = section.split_once('\n').unwrap_or((section, ""));
            let says = |key: &str| keys.lines().take_while(|line| !line.is_empty()).any(|line| line == key);
            let bin =
                keys.lines().find_map(|line| line.strip_prefix("path = \"")).map(|path| path.trim_end_matches('"'));
            let sources: Vec<PathBuf> = match header {
                "lib]" => rust_files(&root.join(member).join("src"))
                    .into_iter()
                    .filter(|file| !file.ends_with("main.rs"))
                    .collect(),
                "[bin]]" => vec![root.join(member).join(bin.unwrap())],
                _ => continue,
            };
            for file in sources {
                let text = std::fs::read_to_string(&file).unwrap();
                if says("test = false") && text.contains("#[cfg(test)]") {
                    hidden.push(format!("{}: a unit test, and `test = false`", file.display()));
                }
                let example = text.lines().any(|line| {
                    let line = line.trim_start();
                    (line.starts_with("///") || line.starts_with("//!")) && line.contains("```")
                });
                if says("doctest = false") && example {
                    hidden.push(format!("{}: an example in the docs, and `doctest = false`", file.display()));
                }
            }
        }
    }
    assert!(hidden.is_empty(), "tests that would never run: {hidden:#?}");
}

fn rust_files(folder: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(folder).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}
