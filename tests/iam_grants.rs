//! Least privilege, measured: every grant of every function's role in template.yaml that the
//! whole suite did not use is listed, and one without an explanation beside it in the template
//! (a comment above its statement saying why no test exercises it) fails. `make test` runs this
//! after the rest of the suite, whose functions record each grant they use
//! (local_aws::iam::record_grants_in).

use std::path::Path;

/// Ignored by a plain `cargo test`: it needs the grants of the whole suite, so `make test`
/// runs it on its own, last.
#[test]
#[ignore = "run by make test after the whole suite"]
fn every_grant_is_exercised_by_a_test_or_explained_in_the_template() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(career_service::GRANTS_DIR);
    let used = local_aws::iam::recorded_grants(&dir).expect("the suite recorded its grants");
    assert!(!used.is_empty(), "no grant recorded in {}: run the whole suite first", dir.display());
    let declared = local_aws::iam::declared_grants(local_aws::template::TEMPLATE).expect("template.yaml's roles");
    let (mut explained, mut unexplained) = (Vec::new(), Vec::new());
    for ((function, sid, action), comment) in &declared {
        let exercised = used.iter().any(|(f, s, a)| f == function && s == sid && a.eq_ignore_ascii_case(action));
        if exercised {
            continue;
        }
        let grant = format!("{function} {sid} {action}");
        match comment.contains("Not exercised by the tests:") {
            true => explained.push(grant),
            false => unexplained.push(grant),
        }
    }
    // make test shows this list in a green run: say that it is expected, and where each reason is.
    println!(
        "iam_grants: {} grants no test used, as expected: template.yaml says why above each (\"Not exercised by \
         the tests: …\"):\n  {}",
        explained.len(),
        explained.join("\n  ")
    );
    assert!(
        unexplained.is_empty(),
        "grants in template.yaml that no test used, with no comment \"Not exercised by the tests: <why>\" above \
         their statement: drop them, or say why they are needed:\n  {}",
        unexplained.join("\n  ")
    );
}
