//! Fails when the committed `policies/` differ from what `tenant-gateway policies` renders
//! for the committed configuration (SPEC §5). `UPDATE_POLICIES=1` rewrites the file instead.

use std::path::PathBuf;

use tenant_gateway::policies::{COMMITTED_FILE, COMMITTED_ROOT_HOST, committed_config, render};

#[test]
fn committed_policies_match_the_generator() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(COMMITTED_FILE);
    let want = render(&committed_config()).expect("the committed configuration renders");

    if std::env::var_os("UPDATE_POLICIES").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).expect("write the policies file");
        return;
    }

    let regenerate = format!(
        "regenerate with `UPDATE_POLICIES=1 cargo test --test policies_drift` or \
         `cargo run -- policies --root-host {COMMITTED_ROOT_HOST} > {COMMITTED_FILE}`"
    );
    let got = match std::fs::read_to_string(&path) {
        Ok(s) => s,
        Err(e) => panic!("cannot read {}: {e}; {regenerate}", path.display()),
    };
    if got == want {
        return;
    }
    // Point at the first differing line: the whole file is too long to be a useful diff.
    let (line, committed, generated) = got
        .lines()
        .zip(want.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| (i + 1, a.to_string(), b.to_string()))
        .unwrap_or_else(|| {
            let n = got.lines().count().min(want.lines().count()) + 1;
            (
                n,
                "<end or trailing difference>".into(),
                "<end or trailing difference>".into(),
            )
        });
    panic!(
        "{COMMITTED_FILE} is out of date with `tenant-gateway policies` (first difference at \
         line {line}:\n  committed: {committed}\n  generated: {generated}\n); {regenerate}"
    );
}
