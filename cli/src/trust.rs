//! `foya trust [DIR]`, `foya trust --list`, `foya trust --revoke [DIR]`, and the
//! first-use question: whether a project's own `.foya/config.toml` (provider profiles,
//! hooks) applies. The trust list itself is `foya_config::trust`.

use crate::exit::{CommandError, failed};
use clap::Args;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

/// `foya trust` arguments.
#[derive(Debug, Clone, Args)]
pub struct TrustArgs {
    /// The project directory (default: the current directory); its project root (the
    /// nearest ancestor with `.git` or `.foya`) is what is trusted.
    pub(crate) dir: Option<PathBuf>,
    /// List the trusted projects, one per line.
    #[arg(long, conflicts_with_all = ["dir", "revoke"])]
    pub(crate) list: bool,
    /// Revoke the trust of the project instead.
    #[arg(long)]
    pub(crate) revoke: bool,
}

/// Runs `foya trust`.
///
/// # Errors
/// The trust list cannot be read or written; the directory does not exist (usage).
pub fn trust(args: &TrustArgs) -> Result<(), CommandError> {
    if args.list {
        return match foya_config::trust::list() {
            Ok(projects) => {
                for project in projects {
                    println!("{}", project.display());
                }
                Ok(())
            }
            Err(e) => Err(failed(e)),
        };
    }
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    if args.revoke {
        return match foya_config::trust::revoke(&dir) {
            Ok((root, true)) => {
                eprintln!(
                    "foya: no longer trusting {}: its .foya/config.toml and hooks are ignored",
                    root.display()
                );
                Ok(())
            }
            Ok((root, false)) => {
                eprintln!("foya: {} was not trusted", root.display());
                Ok(())
            }
            Err(e) => Err(failed(e)),
        };
    }
    match foya_config::trust::trust(&dir) {
        Ok(root) => {
            eprintln!(
                "foya: trusting {}: its .foya/config.toml and hooks now apply",
                root.display()
            );
            Ok(())
        }
        Err(e @ foya_config::trust::TrustError::Directory { .. }) => {
            Err(CommandError::usage(anyhow::anyhow!("{e}")))
        }
        Err(e) => Err(failed(e)),
    }
}

/// Before a command uses the project of `cwd`: when it has a `.foya/config.toml` (or a
/// `.mcp.json` at its root) that the user has not trusted, asks on a terminal (stdin and stderr both terminals)
/// whether to trust it, and otherwise says in one line that it is ignored and how to
/// trust it. Nothing when there is no project config or it is trusted.
pub(crate) fn announce(cwd: &Path) {
    let config = foya_config::provider::project_file(cwd);
    let root = foya_config::trust::project_key(cwd)
        .unwrap_or_else(|_| foya_actors::context::project_root(cwd));
    // The project's config, else its `.mcp.json` (servers it would start).
    let Some(file) = [config, root.join(".mcp.json")]
        .into_iter()
        .find(|f| f.exists())
    else {
        return;
    };
    if foya_config::trust::is_trusted(cwd) {
        return;
    }
    if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() && ask(&file) {
        match foya_config::trust::trust(cwd) {
            Ok(root) => eprintln!("foya: trusting {}", root.display()),
            Err(e) => eprintln!("foya: {e}; {} is ignored this time", file.display()),
        }
        return;
    }
    eprintln!("{}", untrusted_line(&file, &root));
}

/// The one line saying an untrusted project's config is ignored.
pub(crate) fn untrusted_line(file: &Path, root: &Path) -> String {
    format!(
        "foya: ignoring {} (provider profiles, hooks, MCP servers): this project is not trusted; run \
         `foya trust {}` to apply it",
        file.display(),
        root.display()
    )
}

/// Asks whether to trust the project whose config is `file`; a yes is `y` or `yes`.
fn ask(file: &Path) -> bool {
    use std::io::BufRead as _;
    eprint!(
        "foya: {} may set provider profiles, hooks (commands run around tool calls and \
         turns) and MCP servers (programs it starts). Trust this project and apply it? [y/N] ",
        file.display()
    );
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(n) if n > 0 => matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::untrusted_line;
    use std::path::Path;

    #[test]
    fn the_ignored_line_says_how_to_trust() {
        assert_eq!(
            untrusted_line(Path::new("/p/.foya/config.toml"), Path::new("/p")),
            "foya: ignoring /p/.foya/config.toml (provider profiles, hooks, MCP servers): this project is \
             not trusted; run `foya trust /p` to apply it"
        );
    }
}
