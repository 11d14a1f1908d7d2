//! `foya-storage`: the redb event log. (Being built.)
#![warn(missing_docs)]
