//! The crate's top-level modules import one another without a circle: `config` composes
//! the settings the sources and sinks own, and no source, sink or control module reaches
//! back into it. Read from the source text (`crate::module` paths outside comments and
//! test modules), so a new import that closes a circle fails here with the files named.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules: `src/<name>.rs` and `src/<name>/`.
fn modules() -> BTreeSet<String> {
    std::fs::read_dir("src")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_stem()?.to_str()?.to_string();
            (p.is_dir() || p.extension().is_some_and(|e| e == "rs")).then_some(name)
        })
        .filter(|n| n != "lib" && n != "main")
        .collect()
}

fn files_of(module: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let file = PathBuf::from(format!("src/{module}.rs"));
    if file.is_file() {
        files.push(file);
    }
    let mut dirs = vec![PathBuf::from(format!("src/{module}"))];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for path in entries.map(|e| e.unwrap().path()) {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// The code of `path` that ships: without comments and without its test module.
fn shipped_code(path: &Path) -> String {
    let name = path.file_name().unwrap().to_str().unwrap();
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return String::new();
    }
    let text = without_test_module(&std::fs::read_to_string(path).unwrap());
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` without its inline `#[cfg(test)] mod tests { … }` (braces counted).
fn without_test_module(text: &str) -> String {
    let Some(start) = text.find("#[cfg(test)]\nmod tests {") else {
        return text.to_string();
    };
    let mut depth = 0;
    for (i, c) in text[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return format!("{}{}", &text[..start], &text[start + i + 1..]);
                }
            }
            _ => {}
        }
    }
    text[..start].to_string()
}

/// module → the modules it imports, each with the files that do.
fn imports(modules: &BTreeSet<String>) -> BTreeMap<String, BTreeMap<String, Vec<PathBuf>>> {
    let mut graph = BTreeMap::new();
    for module in modules {
        let mut edges: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for file in files_of(module) {
            let code = shipped_code(&file);
            for (i, _) in code.match_indices("crate::") {
                let name: String = code[i + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if &name != module && modules.contains(&name) {
                    let files = edges.entry(name).or_default();
                    if !files.contains(&file) {
                        files.push(file.clone());
                    }
                }
            }
        }
        graph.insert(module.clone(), edges);
    }
    graph
}

/// A circle through `start`, if there is one: the modules in order.
fn circle_through(
    start: &str,
    graph: &BTreeMap<String, BTreeMap<String, Vec<PathBuf>>>,
) -> Option<Vec<String>> {
    let mut path = vec![start.to_string()];
    let mut seen = BTreeSet::new();
    fn walk(
        start: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
        graph: &BTreeMap<String, BTreeMap<String, Vec<PathBuf>>>,
    ) -> bool {
        let here = path.last().unwrap().clone();
        for next in graph[&here].keys() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(start, path, seen, graph) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    walk(start, &mut path, &mut seen, graph).then_some(path)
}

#[test]
fn no_two_top_level_modules_import_each_other_in_a_circle() {
    let modules = modules();
    assert!(modules.len() > 20, "found only {modules:?}");
    let graph = imports(&modules);
    assert!(
        graph["config"].contains_key("sink") && graph["config"].contains_key("source"),
        "config composes the sinks' and sources' settings: {:?}",
        graph["config"].keys()
    );
    let mut circles = Vec::new();
    for module in &modules {
        if let Some(circle) = circle_through(module, &graph) {
            let steps: Vec<String> = circle
                .windows(2)
                .map(|w| format!("{} -> {} ({:?})", w[0], w[1], graph[&w[0]][&w[1]]))
                .collect();
            circles.push(steps.join("\n  "));
        }
    }
    assert!(circles.is_empty(), "{}", circles.join("\n\n"));
}
