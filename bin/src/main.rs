//! The `foya` command line. (Being built.)
fn main() {}
