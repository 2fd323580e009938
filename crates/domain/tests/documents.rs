//! The house's documents stay short and their links stay true: README.md and
//! ARCHITECTURE.md keep to their bounds (a README that grows into a log, or an
//! architecture whose invariants carry measurements, is how documents go stale), and
//! every relative link of README.md, ARCHITECTURE.md, SECURITY.md, CHANGELOG.md and
//! docs/*.md names a file that exists and, with `#anchor`, a heading of that file.
//!
//! It lives in `drover-domain` only because that crate builds fastest: it reads files
//! of the repository and needs nothing of the crate.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The most lines README.md may have: what Drover is, the two commands, a tour, links.
const README_MAX_LINES: usize = 200;
/// The most lines ARCHITECTURE.md may have: the bird's-eye view, the code map, the rules.
const ARCHITECTURE_MAX_LINES: usize = 220;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// README.md, ARCHITECTURE.md, SECURITY.md, CHANGELOG.md and every docs/*.md.
fn documents() -> Vec<PathBuf> {
    let root = repository();
    let mut all: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "SECURITY.md",
        "CHANGELOG.md",
    ]
    .iter()
    .map(|name| root.join(name))
    .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    all.extend(docs);
    all
}

#[test]
fn the_readme_and_the_architecture_keep_to_their_bounds() {
    let root = repository();
    for (name, most) in [
        ("README.md", README_MAX_LINES),
        ("ARCHITECTURE.md", ARCHITECTURE_MAX_LINES),
    ] {
        let lines = read(&root.join(name)).lines().count();
        assert!(
            lines <= most,
            "{name} has {lines} lines, more than {most}: move the detail to docs/"
        );
    }
}

#[test]
fn every_relative_link_of_the_documents_resolves() {
    let mut broken = Vec::new();
    for document in documents() {
        let text = read(&document);
        for target in links(&text) {
            if let Err(why) = resolve(&document, &target) {
                let name = document.strip_prefix(repository()).unwrap_or(&document);
                broken.push(format!("{}: ({target}): {why}", name.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Checks a link's target: a file that exists, and a heading of it for `#anchor`.
/// Links to other sites are not followed.
fn resolve(document: &Path, target: &str) -> Result<(), String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return Ok(());
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        document.to_path_buf()
    } else {
        document
            .parent()
            .expect("a document's directory")
            .join(path)
    };
    if !file.exists() {
        return Err(format!("no file {}", file.display()));
    }
    match anchor {
        Some(anchor) if file.extension().is_some_and(|e| e == "md") => {
            if anchors(&read(&file)).contains(anchor) {
                Ok(())
            } else {
                Err(format!("no heading #{anchor} in {}", file.display()))
            }
        }
        _ => Ok(()),
    }
}

/// The lines outside fenced code blocks.
fn outside_fences(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
        } else if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// The text outside fenced code blocks and code spans, where links are links. A code
/// span opened by a run of backticks ends at a run as long; it may run over a line
/// break, not over a blank line.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut span = 0; // the length of the run that opened the code span we are in
    for line in outside_fences(text) {
        if line.trim().is_empty() {
            span = 0;
        }
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let run = chars[i..].iter().take_while(|&&c| c == '`').count();
            if run == 0 {
                if span == 0 {
                    out.push(chars[i]);
                }
                i += 1;
                continue;
            }
            if span == 0 {
                span = run;
            } else if span == run {
                span = 0;
            }
            i += run;
        }
        out.push('\n');
    }
    out
}

/// The targets of the inline links and images of `text`: `[text](target)`, and
/// `[text](target "title")`.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut targets = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        let target = target.trim_start_matches('<').trim_end_matches('>');
        if !target.is_empty() {
            targets.push(target.to_string());
        }
        rest = &after[end..];
    }
    targets
}

/// The anchors GitHub gives the headings of `text` (outside code blocks): the heading's
/// text in lower case, without punctuation, spaces as hyphens; `-1`, `-2`... for repeats.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for line in outside_fences(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#').trim());
        let mut anchor = base.clone();
        let mut n = 0;
        while !seen.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
    }
    seen
}

fn slug(heading: &str) -> String {
    let shown = link_texts(&heading.replace('`', ""));
    shown
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// `text` with each `[shown](target)` replaced by `shown`.
fn link_texts(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        out.push_str(&rest[..at]);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out.replace('[', "")
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    let text = "# The `drover` command\n## The job's process\n## Events: choices\n\
                ```\n# not a heading\n```\n## Events: choices\n## See [SECURITY](x.md)\n";
    let found = anchors(text);
    for expected in [
        "the-drover-command",
        "the-jobs-process",
        "events-choices",
        "events-choices-1",
        "see-security",
    ] {
        assert!(found.contains(expected), "{expected} not in {found:?}");
    }
    assert!(!found.contains("not-a-heading"));
    assert_eq!(
        links(
            "[a](b.md#c) `[x](y)` ![i](d.png \"t\")\n```\n[no](z)\n```\n`one\nspan` [e](f) ``a ` [g](h) `` [i](j)\n"
        ),
        ["b.md#c", "d.png", "f", "j"]
    );
}
