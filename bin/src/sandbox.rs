//! `foya-sandbox`: a stand-alone Sandbox Runner helper (`foya-sandbox __sandbox-exec
//! --policy <json> --cwd <dir> --tmp <dir> -- <program> <args>`), for tests and for
//! embedders whose own binary does not call `sandbox_entry_if_requested`.

fn main() {
    foya_actors::tools::sandbox::sandbox_entry_if_requested();
    eprintln!(
        "usage: foya-sandbox {} --policy <json> --cwd <dir> --tmp <dir> -- <program> [args...]",
        foya_actors::tools::sandbox::SANDBOX_EXEC_ARG
    );
    std::process::exit(foya_actors::tools::sandbox::EXIT_SANDBOX_USAGE);
}
