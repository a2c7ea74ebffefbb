//! Every example in the docs runs: each `sh` block of README.md and
//! docs/*.md is run by the binary under test (as `accord`, first on PATH),
//! in a sandbox that stands for the machine's paths, with a real sshd for
//! `server` (a host name of the docs). A page's test fails with the file,
//! line and output of each block that failed. How a block says what it
//! needs: `docs_common/parse.rs`.

mod docs_common;
mod mirror_common;
mod remote_common;

use docs_common::run_page;

/// The pages with examples, each run by a test below.
const TESTED: [&str; 8] = [
    "README.md",
    "docs/mirror.md",
    "docs/sync.md",
    "docs/remote.md",
    "docs/cluster.md",
    "docs/union.md",
    "docs/delta.md",
    "docs/flags.md",
];

#[test]
fn every_page_with_examples_has_a_test() {
    for page in docs_common::pages() {
        let examples = docs_common::examples_of(&page);
        assert!(
            examples.is_empty() || TESTED.contains(&page.as_str()),
            "{page} has {} example(s) and no test runs them: add it to TESTED and a test for it",
            examples.len()
        );
    }
}

#[test]
fn readme() {
    run_page("README.md");
}

#[test]
fn mirror() {
    run_page("docs/mirror.md");
}

#[test]
fn sync() {
    run_page("docs/sync.md");
}

#[test]
fn remote() {
    run_page("docs/remote.md");
}

#[test]
fn cluster() {
    run_page("docs/cluster.md");
}

#[test]
fn union() {
    run_page("docs/union.md");
}

#[test]
fn delta() {
    run_page("docs/delta.md");
}

#[test]
fn flags() {
    run_page("docs/flags.md");
}

/// The bound: a front page, not a reference.
#[test]
fn readme_is_a_front_page() {
    let text = std::fs::read_to_string(docs_common::top().join("README.md")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines; the front page keeps to 200"
    );
}

#[test]
fn links_between_pages_reach_their_page_and_heading() {
    let mut broken = Vec::new();
    for page in docs_common::pages()
        .iter()
        .chain(&["ARCHITECTURE.md".to_string()])
    {
        broken.extend(docs_common::links::broken(page));
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
