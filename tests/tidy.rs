//! The layering and the habits that can be checked by reading the source: every file of `src/`
//! and `harness/src/` opens with its `//!` doc and is at most 600 lines long; in the
//! service (`src/`) only `store/` names sea_orm, only the HTTP layer names axum, and no two
//! modules import each other, however far round; the tenant filter is written once
//! (`store::Scoped`), and an entity's ids are newtypes unless a comment says why not. Each rule's known exceptions are listed
//! beside it with the reason, and a listed exception that no longer breaks the rule fails the
//! test too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// No file is longer (STYLE.md: files of 100 to 400 lines, split before about 600).
const MAX_LINES: usize = 600;

/// Outside `src/store/`, sea_orm is named only by one test module of the subscription actor.
const SEA_ORM_ELSEWHERE: [&str; 1] = ["src/actors/subscription/tests.rs"];

/// Outside `src/api/`, `src/checkout/` and `src/documents/` (the pages customers open), axum
/// is named by `run` (which serves the router) and by the sandboxes (peer servers speaking the
/// processor's, DIAN's and WhatsApp's protocols, not our API).
const AXUM_ELSEWHERE: [&str; 4] = [
    "src/dian/sandbox/",
    "src/lib.rs",
    "src/processor/",
    "src/whatsapp/sandbox/",
];

/// The service's files (`src/`), by path from the workspace root.
fn sources() -> Vec<(String, String)> {
    sources_under(&["src"])
}

/// The service's and the harness's files.
fn all_sources() -> Vec<(String, String)> {
    sources_under(&["src", "harness/src"])
}

fn sources_under(roots: &[&str]) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    let mut folders: Vec<PathBuf> = roots.iter().map(|dir| root.join(dir)).collect();
    while let Some(folder) = folders.pop() {
        let entries = std::fs::read_dir(&folder).expect("read src");
        for entry in entries {
            let path: PathBuf = entry.expect("entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let text = std::fs::read_to_string(&path).expect("read source");
                let relative = path.strip_prefix(root).expect("under the root");
                files.push((relative.to_string_lossy().replace('\\', "/"), text));
            }
        }
    }
    files.sort();
    files
}

/// Whether a line of code (not a comment, not a string) names the crate `name`: a path through
/// it or a `use` of it.
fn names_crate(text: &str, name: &str) -> bool {
    let path = format!("{name}::");
    let used = format!("use {name}");
    text.lines().any(|line| {
        let code = line.trim_start();
        if code.starts_with("//") {
            return false;
        }
        let code = code.split("//").next().unwrap_or_default();
        code.contains(&used)
            || code
                .split('"')
                .step_by(2)
                .any(|outside| outside.contains(&path))
    })
}

fn outside(file: &str, homes: &[&str]) -> bool {
    !homes.iter().any(|home| file.starts_with(home))
}

fn check_exceptions(rule: &str, breaking: BTreeSet<String>, allowed: &[&str]) {
    let unexpected: Vec<_> = breaking
        .iter()
        .filter(|file| !allowed.iter().any(|allowed| file.starts_with(allowed)))
        .collect();
    assert!(unexpected.is_empty(), "{rule}: {unexpected:?}");
    let stale: Vec<_> = allowed
        .iter()
        .filter(|allowed| !breaking.iter().any(|file| file.starts_with(**allowed)))
        .collect();
    assert!(
        stale.is_empty(),
        "{rule}: listed as exceptions but no longer are (drop them from the list): {stale:?}"
    );
}

#[test]
fn every_source_file_opens_with_its_doc() {
    let undocumented: Vec<_> = all_sources()
        .into_iter()
        .filter(|(_, text)| !text.trim_start().starts_with("//!"))
        .map(|(file, _)| file)
        .collect();
    assert!(
        undocumented.is_empty(),
        "no `//!` at the top: {undocumented:?}"
    );
}

#[test]
fn only_the_store_names_sea_orm() {
    let breaking = sources()
        .into_iter()
        .filter(|(file, text)| outside(file, &["src/store/"]) && names_crate(text, "sea_orm"))
        .map(|(file, _)| file)
        .collect();
    check_exceptions(
        "sea_orm named outside src/store/",
        breaking,
        &SEA_ORM_ELSEWHERE,
    );
}

#[test]
fn only_the_harness_takes_the_raw_connections() {
    let taking: Vec<_> = sources()
        .into_iter()
        .filter(|(file, text)| file != "src/store/mod.rs" && text.contains("raw_connections"))
        .map(|(file, _)| file)
        .collect();
    assert!(
        taking.is_empty(),
        "the service goes through the tenant-scoped store: {taking:?}"
    );
}

/// Where the tenant filter is written: `store::Scoped`'s one implementation.
const TENANT_FILTER: &str = "src/store/scoped.rs";

/// Whether a line of code compares an entity's `account_id` column (`Column::AccountId.eq(…)`,
/// or through `Expr::col(Column::AccountId).eq(…)`), rather than naming it (a select list, an
/// upsert's key).
fn compares_the_account(text: &str) -> bool {
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .any(|line| {
            line.split("Column::AccountId")
                .skip(1)
                .any(|after| after.starts_with('.') || after.starts_with(")."))
        })
}

#[test]
fn the_tenant_filter_is_written_once() {
    let writing: Vec<_> = all_sources()
        .into_iter()
        .filter(|(file, text)| file != TENANT_FILTER && compares_the_account(text))
        .map(|(file, _)| file)
        .collect();
    assert!(
        writing.is_empty(),
        "an account's rows are found with `Entity::scoped(account)`, `find_scoped(account, id)` \
         or `of(account)` (store::Scoped), not a filter of their own: {writing:?}"
    );
    let (_, scoped) = sources()
        .into_iter()
        .find(|(file, _)| file == TENANT_FILTER)
        .expect("store::Scoped");
    assert!(
        compares_the_account(&scoped),
        "the filter moved: {TENANT_FILTER}"
    );
}

#[test]
fn every_entity_with_an_account_is_scoped() {
    let files = sources();
    let (_, scoped) = files
        .iter()
        .find(|(file, _)| file == TENANT_FILTER)
        .expect("store::Scoped");
    let listed: BTreeSet<&str> = scoped
        .split_once("scoped!(")
        .map(|(_, list)| list.split(')').next().unwrap_or_default())
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .collect();
    let unscoped: Vec<&str> = files
        .iter()
        .filter(|(_, text)| text.contains("pub account_id: AccountId"))
        .filter_map(|(file, _)| {
            file.strip_prefix("src/store/entities/")?
                .strip_suffix(".rs")
        })
        .filter(|entity| !listed.contains(entity))
        .collect();
    assert!(
        unscoped.is_empty(),
        "entities with an account not in {TENANT_FILTER}'s `scoped!` list: {unscoped:?}"
    );
}

#[test]
fn the_tenant_filter_test_finds_what_it_looks_for() {
    assert!(compares_the_account(
        ".filter(subscription::Column::AccountId.eq(account))"
    ));
    assert!(compares_the_account(
        "Expr::col(invoice::Column::AccountId).eq(account)"
    ));
    assert!(!compares_the_account(
        "Expr::col(idempotency_key::Column::AccountId),"
    ));
    assert!(!compares_the_account(
        ".column(webhook_endpoint::Column::AccountId)"
    ));
    assert!(!compares_the_account(
        "// never `.filter(x::Column::AccountId.eq(a))`"
    ));
}

/// The fields of entity source `text` whose name ends in `id` and whose type is `String` or
/// `Option<String>`, without a `// raw id:` comment (saying why) among the lines just above.
fn raw_ids(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut raw = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(field) = line.strip_prefix("pub ") else {
            continue;
        };
        let Some((name, kind)) = field.split_once(':') else {
            continue;
        };
        let kind = kind.trim().trim_end_matches(',');
        if !name.ends_with("id") || !matches!(kind, "String" | "Option<String>") {
            continue;
        }
        let explained = lines[..at]
            .iter()
            .rev()
            .take_while(|above| above.starts_with("//") || above.starts_with("#["))
            .any(|above| above.starts_with("// raw id:"));
        if !explained {
            raw.push(name.to_owned());
        }
    }
    raw
}

#[test]
fn entity_ids_are_newtypes_unless_said_otherwise() {
    let raw: Vec<String> = sources()
        .into_iter()
        .filter(|(file, _)| file.starts_with("src/store/entities/"))
        .flat_map(|(file, text)| {
            raw_ids(&text)
                .into_iter()
                .map(move |field| format!("{file}: {field}"))
        })
        .collect();
    assert!(
        raw.is_empty(),
        "an entity's id is its `crate::ids` newtype (a column through `entities::ids`), or a \
         String under a `// raw id:` comment saying why: {raw:?}"
    );
}

#[test]
fn the_raw_id_test_finds_what_it_looks_for() {
    let entity = "
        pub struct Model {
            pub id: SubscriptionId,
            pub plan_id: String,
            /// The processor's.
            // raw id: not ours.
            pub processor_id: Option<String>,
            pub customer_id: Option<String>,
            pub reference: String,
            pub id_hash: String,
        }";
    assert_eq!(raw_ids(entity), ["plan_id", "customer_id"]);
}

#[test]
fn only_the_http_layer_names_axum() {
    let breaking = sources()
        .into_iter()
        .filter(|(file, text)| {
            outside(
                file,
                &["src/api/", "src/checkout/", "src/documents/", "src/http/"],
            ) && names_crate(text, "axum")
        })
        .map(|(file, _)| file)
        .collect();
    check_exceptions(
        "axum named outside the HTTP layer",
        breaking,
        &AXUM_ELSEWHERE,
    );
}

#[test]
fn no_file_grows_past_600_lines() {
    let too_long: Vec<_> = all_sources()
        .into_iter()
        .map(|(file, text)| (file, text.lines().count()))
        .filter(|(_, lines)| *lines > MAX_LINES)
        .collect();
    assert!(too_long.is_empty(), "split these files: {too_long:?}");
}

#[test]
fn the_crate_test_finds_what_it_looks_for() {
    assert!(names_crate("use sea_orm::EntityTrait;", "sea_orm"));
    assert!(names_crate("    let x = axum::serve(l, r);", "axum"));
    assert!(!names_crate("// only store names sea_orm::x", "sea_orm"));
    assert!(!names_crate(r#"let f = "sea_orm::x=warn";"#, "sea_orm"));
    assert!(!names_crate("(\"sea_orm\", Level::INFO)", "sea_orm"));
}

/// A file's module path: `src/store/mod.rs` is `store`, `src/api/openapi/schemas.rs` is
/// `api::openapi::schemas`.
fn module_of(file: &str) -> Vec<String> {
    let path = file.trim_start_matches("src/").trim_end_matches(".rs");
    let mut parts: Vec<String> = path.split('/').map(str::to_owned).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The modules a file's code (its tests left out) refers to by `crate::` or `super::` paths,
/// each cut to the longest prefix that is a module.
fn references(file: &str, text: &str, modules: &BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    let own = module_of(file);
    let code: String = text
        .split("#[cfg(test)]")
        .next()
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeSet::new();
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':' || c == '{' || c == ','))
        .collect();
    for word in words {
        let (base, rest) = if let Some(rest) = word.strip_prefix("crate::") {
            (Vec::new(), rest)
        } else if word.starts_with("super::") {
            let ups = word.matches("super::").count();
            let keep = own.len().saturating_sub(ups);
            (own[..keep].to_vec(), word.trim_start_matches("super::"))
        } else {
            continue;
        };
        let (head, group) = match rest.split_once('{') {
            Some((head, group)) => (head, Some(group)),
            None => (rest, None),
        };
        let mut paths = Vec::new();
        match group {
            Some(group) => {
                for member in group.split(',') {
                    paths.push(format!(
                        "{head}{}",
                        member.trim_matches(|c| c == '}' || c == ' ')
                    ));
                }
            }
            None => paths.push(head.to_owned()),
        }
        for path in paths {
            let mut full = base.clone();
            full.extend(
                path.split("::")
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned),
            );
            while !full.is_empty() && !modules.contains(&full) {
                full.pop();
            }
            if !full.is_empty() {
                found.insert(full);
            }
        }
    }
    found
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let files = sources();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(file, _)| module_of(file)).collect();
    // An edge between the two siblings under the lowest common ancestor of a file and what it
    // refers to: `store::charges` naming `crate::cluster::lease` is `store` → `cluster`.
    let mut edges: std::collections::BTreeMap<Vec<String>, BTreeSet<Vec<String>>> =
        Default::default();
    // A test module's file (`tests.rs`) may reach anywhere.
    for (file, text) in files
        .iter()
        .filter(|(file, _)| !file.ends_with("/tests.rs"))
    {
        let from = module_of(file);
        for to in references(file, text, &modules) {
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common < from.len() && common < to.len() {
                edges
                    .entry(from[..=common].to_vec())
                    .or_default()
                    .insert(to[..=common].to_vec());
            }
        }
    }
    let cycles = strongly_connected(&edges);
    let found: BTreeSet<String> = cycles
        .iter()
        .map(|cycle| {
            cycle
                .iter()
                .map(|m| m.join("::"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect();
    assert!(found.is_empty(), "modules importing each other: {found:?}");
}

/// Tarjan's strongly connected components of more than one module, each sorted.
fn strongly_connected(
    edges: &std::collections::BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> Vec<Vec<Vec<String>>> {
    struct Walk<'a> {
        edges: &'a std::collections::BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: std::collections::BTreeMap<Vec<String>, (usize, usize)>,
        stack: Vec<Vec<String>>,
        next: usize,
        found: Vec<Vec<Vec<String>>>,
    }
    fn visit(walk: &mut Walk<'_>, node: &Vec<String>) {
        walk.index.insert(node.clone(), (walk.next, walk.next));
        walk.next += 1;
        walk.stack.push(node.clone());
        let edges = walk.edges;
        for next in edges.get(node).into_iter().flatten() {
            if !walk.index.contains_key(next) {
                visit(walk, next);
                let low = walk.index[next].1.min(walk.index[node].1);
                walk.index.get_mut(node).expect("visited").1 = low;
            } else if walk.stack.contains(next) {
                let low = walk.index[next].0.min(walk.index[node].1);
                walk.index.get_mut(node).expect("visited").1 = low;
            }
        }
        if walk.index[node].0 == walk.index[node].1 {
            let mut component = Vec::new();
            while let Some(top) = walk.stack.pop() {
                let done = &top == node;
                component.push(top);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                walk.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: Default::default(),
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node) {
            visit(&mut walk, node);
        }
    }
    walk.found
}
