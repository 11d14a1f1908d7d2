//! Owns loading a project's context files from disk — the only I/O of the context
//! compiler. Everything else in `context` is pure.
//!
//! Layout (project root = nearest ancestor of the working directory, itself included,
//! holding `.git` or `.foya`; else the working directory):
//! - `AGENTS.md`, `FOYA.md` in every directory from the root down to the working
//!   directory, outer first (in one directory: `AGENTS.md` before `FOYA.md`);
//! - `.foya/rules/*.md` (front matter `always`, `paths`, optional `description`);
//! - `.foya/memory.md` and `<user_dir>/memory.md`;
//! - `.foya/skills/*/SKILL.md` and `<user_dir>/skills/*/SKILL.md` (front matter `name`,
//!   `description`; a project skill hides a user skill of the same name);
//! - `<user_dir>/commands/*.md` and `.foya/commands/*.md` (front matter `description`;
//!   a project command hides a user command of the same name).

use super::frontmatter::{self, Document};
use globset::{GlobSet, GlobSetBuilder};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// Everything loaded from the project and the user directory for context compilation.
#[derive(Debug, Clone, Default)]
pub struct ProjectContext {
    /// Project root (see the module docs).
    pub root: PathBuf,
    /// Instruction files (`AGENTS.md`, `FOYA.md`), outer first, with their absolute paths.
    pub instructions: Vec<(PathBuf, String)>,
    /// Rules, sorted by file name.
    pub rules: Vec<Rule>,
    /// Memory files: the project's first, then the user's.
    pub memory: Vec<(PathBuf, String)>,
    /// Skill metadata: project skills first, then user skills, each sorted by name.
    pub skills: Vec<SkillMeta>,
    /// Project and user commands by name (without `/`).
    pub commands: BTreeMap<String, CommandTemplate>,
    /// Files that were skipped, one human-readable line each (`path: why`).
    pub diagnostics: Vec<String>,
}

/// A `.foya/rules/*.md` rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// File stem (`rust-style` for `rust-style.md`).
    pub name: String,
    /// Absolute path of the rule file.
    pub path: PathBuf,
    /// `always: true`: in force in every step.
    pub always: bool,
    /// Glob patterns (globset syntax, relative to the project root) that put the rule in
    /// force once a matching file was read or written in the session.
    pub paths: Vec<String>,
    /// The rule text (body after the front matter).
    pub body: String,
    matcher: GlobSet,
}

impl Rule {
    /// Builds a rule; `paths` are compiled as globs (`literal_separator`, so `*` stays
    /// inside one path component and `**` crosses them).
    ///
    /// # Errors
    /// The glob error text when a pattern is invalid.
    pub(crate) fn new(
        name: String,
        path: PathBuf,
        always: bool,
        paths: Vec<String>,
        body: String,
    ) -> Result<Self, String> {
        let mut builder = GlobSetBuilder::new();
        for pattern in &paths {
            let glob = globset::GlobBuilder::new(pattern)
                .literal_separator(true)
                .build()
                .map_err(|e| format!("bad glob {pattern:?}: {e}"))?;
            builder.add(glob);
        }
        let matcher = builder.build().map_err(|e| e.to_string())?;
        Ok(Self {
            name,
            path,
            always,
            paths,
            body,
            matcher,
        })
    }

    /// The first touched path (relative to `root`, or as given when outside it) that puts
    /// this rule in force; `None` for `always` rules and rules not triggered.
    /// Relative touched paths are taken relative to `cwd`.
    #[must_use]
    pub fn triggered_by(
        &self,
        root: &Path,
        cwd: &Path,
        touched: &BTreeSet<PathBuf>,
    ) -> Option<PathBuf> {
        touched.iter().find_map(|p| {
            let absolute = normalize(&cwd.join(p));
            let relative = absolute
                .strip_prefix(root)
                .map_or(p.clone(), Path::to_path_buf);
            self.matcher.is_match(&relative).then_some(relative)
        })
    }
}

/// Metadata of one skill (its body is read on demand by a tool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillMeta {
    /// Skill name (front matter `name`, else the directory name).
    pub name: String,
    /// What it is for (front matter `description`).
    pub description: String,
    /// Absolute path of its `SKILL.md`.
    pub path: PathBuf,
}

/// A project command (`.foya/commands/NAME.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandTemplate {
    /// Name without `/` (the file stem).
    pub name: String,
    /// Front matter `description` (empty when absent).
    pub description: String,
    /// Prompt template; `$ARGUMENTS` is replaced by the invocation's arguments.
    pub template: String,
    /// Absolute path of the file.
    pub path: PathBuf,
}

impl ProjectContext {
    /// Loads the context files for working directory `cwd` (absolute) and the optional
    /// user-level directory (e.g. `~/.config/foya`). Missing files are fine; unreadable
    /// files and bad front matter are skipped with a line in [`Self::diagnostics`].
    #[must_use]
    pub fn load(cwd: &Path, user_dir: Option<&Path>) -> ProjectContext {
        Self::load_from(cwd, user_dir, true)
    }

    /// [`Self::load`] without the project's own files: only the root is found (nothing
    /// under it is read) and the user-level directory, if any, is loaded.
    #[must_use]
    pub fn load_user_only(cwd: &Path, user_dir: Option<&Path>) -> ProjectContext {
        Self::load_from(cwd, user_dir, false)
    }

    fn load_from(cwd: &Path, user_dir: Option<&Path>, project_files: bool) -> ProjectContext {
        let cwd = normalize(cwd);
        let root = root_of(&cwd);
        let mut ctx = ProjectContext {
            root: root.clone(),
            ..ProjectContext::default()
        };
        let foya = project_files.then(|| root.join(".foya"));
        if project_files {
            ctx.load_instructions(&cwd);
        }
        if let Some(foya) = &foya {
            for path in ctx.list(&foya.join("rules"), "md") {
                ctx.load_rule(&path);
            }
        }
        for path in [
            foya.as_ref().map(|f| f.join("memory.md")),
            user_dir.map(|u| u.join("memory.md")),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(text) = ctx.read_optional(&path)
                && !text.trim().is_empty()
            {
                ctx.memory.push((path, text.trim().to_owned()));
            }
        }
        let mut seen = BTreeSet::new();
        for base in [foya.clone(), user_dir.map(Path::to_path_buf)]
            .into_iter()
            .flatten()
        {
            let mut skills = ctx.load_skills(&base.join("skills"));
            skills.retain(|s| seen.insert(s.name.clone()));
            ctx.skills.extend(skills);
        }
        for base in [user_dir.map(Path::to_path_buf), foya]
            .into_iter()
            .flatten()
        {
            for path in ctx.list(&base.join("commands"), "md") {
                ctx.load_command(&path);
            }
        }
        ctx
    }

    /// The instruction files from the root down to `cwd`, outer first.
    fn load_instructions(&mut self, cwd: &Path) {
        let mut dirs: Vec<&Path> = cwd
            .ancestors()
            .take_while(|d| d.starts_with(&self.root))
            .collect();
        dirs.reverse();
        for dir in dirs {
            for name in ["AGENTS.md", "FOYA.md"] {
                if let Some(text) = self.read_optional(&dir.join(name))
                    && !text.trim().is_empty()
                {
                    self.instructions
                        .push((dir.join(name), text.trim().to_owned()));
                }
            }
        }
    }

    fn read_optional(&mut self, path: &Path) -> Option<String> {
        match std::fs::read_to_string(path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                self.diagnostics
                    .push(format!("{}: unreadable: {e}", path.display()));
                None
            }
        }
    }

    /// Files (or, with `ext` empty, directories) in `dir`, sorted by name.
    fn list(&mut self, dir: &Path, ext: &str) -> Vec<PathBuf> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => {
                self.diagnostics
                    .push(format!("{}: unreadable: {e}", dir.display()));
                return Vec::new();
            }
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                if ext.is_empty() {
                    p.is_dir()
                } else {
                    p.is_file() && p.extension().is_some_and(|e| e == ext)
                }
            })
            .collect();
        paths.sort();
        paths
    }

    fn read_document(&mut self, path: &Path) -> Option<Document> {
        let text = self.read_optional(path)?;
        match frontmatter::parse(&text) {
            Ok(doc) => Some(doc),
            Err(e) => {
                self.diagnostics
                    .push(format!("{}: bad front matter: {e}", path.display()));
                None
            }
        }
    }

    fn load_rule(&mut self, path: &Path) {
        let Some(doc) = self.read_document(path) else {
            return;
        };
        let always = match doc.bool("always") {
            Ok(b) => b.unwrap_or(false),
            Err(e) => {
                self.diagnostics
                    .push(format!("{}: bad front matter: {e}", path.display()));
                return;
            }
        };
        let paths = doc.list("paths");
        if !always && paths.is_empty() {
            self.diagnostics.push(format!(
                "{}: rule has neither `always: true` nor `paths`; it is never in force",
                path.display()
            ));
            return;
        }
        let name = stem(path);
        match Rule::new(name, path.to_path_buf(), always, paths, doc.body) {
            Ok(rule) => self.rules.push(rule),
            Err(e) => self.diagnostics.push(format!("{}: {e}", path.display())),
        }
    }

    fn load_skills(&mut self, dir: &Path) -> Vec<SkillMeta> {
        let mut skills = Vec::new();
        for skill_dir in self.list(dir, "") {
            let path = skill_dir.join("SKILL.md");
            if !path.is_file() {
                continue;
            }
            let Some(doc) = self.read_document(&path) else {
                continue;
            };
            let Some(description) = doc.str("description").filter(|d| !d.trim().is_empty()) else {
                self.diagnostics
                    .push(format!("{}: skill has no `description`", path.display()));
                continue;
            };
            let name = doc
                .str("name")
                .map_or_else(|| stem(&skill_dir), str::to_owned);
            skills.push(SkillMeta {
                name,
                description: description.trim().to_owned(),
                path,
            });
        }
        skills.sort_by(|a, b| a.name.cmp(&b.name));
        skills
    }

    fn load_command(&mut self, path: &Path) {
        let Some(doc) = self.read_document(path) else {
            return;
        };
        let name = stem(path);
        if super::BUILTIN_COMMANDS.contains(&name.as_str()) {
            self.diagnostics.push(format!(
                "{}: command /{name} is built in; the file is ignored",
                path.display()
            ));
            return;
        }
        let description = doc.str("description").unwrap_or_default().to_owned();
        let command = CommandTemplate {
            name: name.clone(),
            description,
            template: doc.body,
            path: path.into(),
        };
        self.commands.insert(name, command);
    }
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Lexically removes `.` and `..` components (no file-system access).
/// The project root of working directory `cwd`: its nearest ancestor (itself included)
/// that holds a `.git` or a `.foya` entry, else `cwd` itself (`.` and `..` components
/// resolved lexically, symlinks not followed). Project instructions, rules, skills,
/// commands and the project's `.foya/config.toml` are looked up from there, so a
/// command run in a subdirectory sees the same project as one run at its root (as git,
/// Codex and Claude Code do).
#[must_use]
pub fn project_root(cwd: &Path) -> PathBuf {
    root_of(&normalize(cwd))
}

/// [`project_root`] of an already normalised `cwd`.
fn root_of(cwd: &Path) -> PathBuf {
    cwd.ancestors()
        .find(|d| d.join(".git").exists() || d.join(".foya").exists())
        .unwrap_or(cwd)
        .to_path_buf()
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}
