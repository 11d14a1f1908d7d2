//! No code: see this crate's manifest and `.ci/feature-sets`.
