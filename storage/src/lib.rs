//! `foya-storage`: the redb event log. (Docs being written.)
#![warn(missing_docs)]

pub mod codec;
mod db;
mod error;
mod read;
mod schema;
mod store;
mod writer;

pub use error::{AppendError, Error, OpenError, ReadError};
pub use store::{Durability, Store, StoreOptions, StoreStats};
