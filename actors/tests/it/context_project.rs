//! Integration tests of `ProjectContext::load` on real directories: root detection,
//! instruction order, rules, skills, commands and the diagnostics for skipped files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_actors::context::{
    CommandAction, CommandTemplate, ContextError, ProjectContext, SkillMeta, expand_command,
};
use foya_protocol::CommandInvocation;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn loads_everything_from_root_down_to_cwd_and_reports_skipped_files() {
    let tmp = tempfile::tempdir().unwrap();
    let outer = tmp.path().join("outer");
    let root = outer.join("repo");
    let cwd = root.join("a/b");
    let user = tmp.path().join("user");
    std::fs::create_dir_all(&cwd).unwrap();
    // Above the root: never read.
    write(&outer.join("AGENTS.md"), "outside the project");
    write(&root.join(".foya/memory.md"), "\n");
    write(&root.join("FOYA.md"), "root foya");
    write(&root.join("AGENTS.md"), "root agents");
    write(&root.join("a/b/AGENTS.md"), "  leaf agents \n");
    write(
        &root.join(".foya/rules/always.md"),
        "---\nalways: true\n---\nA",
    );
    write(
        &root.join(".foya/rules/globbed.md"),
        "---\npaths:\n  - \"src/*.rs\"\n  - docs/**\n---\nB",
    );
    write(&root.join(".foya/rules/neither.md"), "just text");
    write(
        &root.join(".foya/rules/badglob.md"),
        "---\npaths: [\"src/[\"]\n---\nC",
    );
    write(
        &root.join(".foya/rules/badbool.md"),
        "---\nalways: yes\n---\nD",
    );
    write(&root.join(".foya/rules/notes.txt"), "not a rule");
    write(
        &root.join(".foya/skills/shared/SKILL.md"),
        "---\nname: shared\ndescription: project copy\n---\n",
    );
    write(
        &root.join(".foya/skills/nodesc/SKILL.md"),
        "---\nname: nodesc\n---\n",
    );
    write(
        &user.join("skills/shared/SKILL.md"),
        "---\nname: shared\ndescription: user copy\n---\n",
    );
    write(
        &user.join("skills/dirname/SKILL.md"),
        "---\ndescription: named after its directory\n---\n",
    );
    write(
        &user.join("commands/hello.md"),
        "---\ndescription: user hello\n---\nHi from user",
    );
    write(
        &root.join(".foya/commands/hello.md"),
        "---\ndescription: project hello\n---\nHi $ARGUMENTS!",
    );
    write(
        &root.join(".foya/commands/compact.md"),
        "shadowing a built-in",
    );

    let ctx = ProjectContext::load(&cwd, Some(&user));
    let d = |p: &Path| p.display().to_string();

    // `.foya` marks the root (no `.git` anywhere).
    assert_eq!(ctx.root, root);
    assert_eq!(
        ctx.instructions,
        vec![
            (root.join("AGENTS.md"), "root agents".to_owned()),
            (root.join("FOYA.md"), "root foya".to_owned()),
            (root.join("a/b/AGENTS.md"), "leaf agents".to_owned()),
        ]
    );
    let rules: Vec<(String, bool, Vec<String>, String)> = ctx
        .rules
        .iter()
        .map(|r| (r.name.clone(), r.always, r.paths.clone(), r.body.clone()))
        .collect();
    assert_eq!(
        rules,
        vec![
            ("always".to_owned(), true, vec![], "A".to_owned()),
            (
                "globbed".to_owned(),
                false,
                vec!["src/*.rs".to_owned(), "docs/**".to_owned()],
                "B".to_owned()
            ),
        ]
    );
    // Rule matching: relative to cwd, absolute, `*` stays in one component.
    let globbed = &ctx.rules[1];
    let hit = |paths: &[&str]| {
        let set: BTreeSet<PathBuf> = paths.iter().map(PathBuf::from).collect();
        globbed.triggered_by(&ctx.root, &cwd, &set)
    };
    assert_eq!(
        hit(&["../../src/main.rs"]),
        Some(PathBuf::from("src/main.rs"))
    );
    assert_eq!(
        hit(&[&d(&root.join("docs/x/y.md"))]),
        Some(PathBuf::from("docs/x/y.md"))
    );
    assert_eq!(hit(&["src/main.rs", "../../src/deep/mod.rs"]), None);

    assert_eq!(ctx.memory, vec![]);
    assert_eq!(
        ctx.skills,
        vec![
            SkillMeta {
                name: "shared".into(),
                description: "project copy".into(),
                path: root.join(".foya/skills/shared/SKILL.md")
            },
            SkillMeta {
                name: "dirname".into(),
                description: "named after its directory".into(),
                path: user.join("skills/dirname/SKILL.md")
            },
        ]
    );
    let hello = CommandTemplate {
        name: "hello".into(),
        description: "project hello".into(),
        template: "Hi $ARGUMENTS!".into(),
        path: root.join(".foya/commands/hello.md"),
    };
    assert_eq!(
        ctx.commands.values().cloned().collect::<Vec<_>>(),
        vec![hello]
    );
    let rules_dir = root.join(".foya/rules");
    assert_eq!(
        ctx.diagnostics,
        vec![
            format!(
                "{}: bad front matter: `always` must be true or false, got Str(\"yes\")",
                d(&rules_dir.join("badbool.md"))
            ),
            format!(
                "{}: bad glob \"src/[\": error parsing glob 'src/[': unclosed character class; missing ']'",
                d(&rules_dir.join("badglob.md"))
            ),
            format!(
                "{}: rule has neither `always: true` nor `paths`; it is never in force",
                d(&rules_dir.join("neither.md"))
            ),
            format!(
                "{}: skill has no `description`",
                d(&root.join(".foya/skills/nodesc/SKILL.md"))
            ),
            format!(
                "{}: command /compact is built in; the file is ignored",
                d(&root.join(".foya/commands/compact.md"))
            ),
        ]
    );

    let invoke = |name: &str, arguments: &str| {
        expand_command(
            &ctx,
            &CommandInvocation {
                name: name.into(),
                arguments: arguments.into(),
            },
        )
    };
    assert_eq!(
        invoke("/hello", "world"),
        Ok(CommandAction::Prompt("Hi world!".into()))
    );
    assert_eq!(invoke("compact", ""), Ok(CommandAction::Compact));
    assert_eq!(
        invoke("nope", "").map_err(|e| e.to_string()),
        Err("unknown command /nope; available commands: /compact, /hello, /title".to_owned())
    );
    assert!(matches!(
        invoke("nope", ""),
        Err(ContextError::UnknownCommand { .. })
    ));
}

#[test]
fn without_a_marker_the_cwd_is_the_root_and_missing_files_are_fine() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path().join("plain");
    std::fs::create_dir_all(&cwd).unwrap();
    let ctx = ProjectContext::load(&cwd, Some(&tmp.path().join("missing-user-dir")));
    assert_eq!(ctx.root, cwd);
    assert_eq!(
        (
            ctx.instructions,
            ctx.rules.len(),
            ctx.memory,
            ctx.skills,
            ctx.commands.len(),
            ctx.diagnostics
        ),
        (vec![], 0, vec![], vec![], 0, Vec::<String>::new())
    );
}
