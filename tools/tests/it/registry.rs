//! The registry an embedder starts from.

use foya_tools::ToolRegistry;

#[test]
fn the_read_only_built_ins_have_no_side_effect_and_no_shell() {
    let tools = ToolRegistry::read_only_builtin();
    let mut names = tools.names();
    names.sort();
    assert_eq!(
        names,
        ["glob", "grep", "list_dir", "read_file"],
        "{names:?}"
    );
    assert!(ToolRegistry::new().names().is_empty());
}
