//! Empty: cargo builds a package's [build-dependencies] only for a build script, and they
//! carry the host feature set (build scripts and proc macros resolve apart).
fn main() {}
