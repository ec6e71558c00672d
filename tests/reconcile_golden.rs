//! Fails when the committed golden files of the rendered objects (one per certificate mode
//! and passthrough layout, `tests/golden/reconcile/*.yaml`) differ from what the reconciler
//! renders for the shared test world (`reconcile::testing::busy_world`). `UPDATE_GOLDEN=1`
//! rewrites them instead. Review a regenerated diff against SPEC §3.2 and §3.10 before
//! committing it.

use std::path::PathBuf;

use tenant_gateway::reconcile::{plan, testing};

#[test]
fn rendered_objects_match_the_golden_files() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/reconcile");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (stem, inputs, cfg) in testing::golden_cases() {
        let p = plan(&inputs, &cfg);
        let want = testing::golden_yaml(&p).expect("rendered objects serialize");
        assert!(!want.is_empty(), "{stem}: the golden world must render");
        let path = dir.join(format!("{stem}.yaml"));
        if update {
            std::fs::create_dir_all(&dir).expect("create the golden directory");
            std::fs::write(&path, &want).expect("write a golden file");
            continue;
        }
        let got = std::fs::read_to_string(&path).unwrap_or_default();
        if got != want {
            let line = got
                .lines()
                .zip(want.lines())
                .position(|(a, b)| a != b)
                .map_or_else(
                    || got.lines().count().min(want.lines().count()) + 1,
                    |i| i + 1,
                );
            stale.push(format!(
                "{} (first difference at line {line})",
                path.display()
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "golden files out of date with the renderer: {}; regenerate with \
         `UPDATE_GOLDEN=1 cargo test --test reconcile_golden` and review the diff",
        stale.join(", ")
    );
}
