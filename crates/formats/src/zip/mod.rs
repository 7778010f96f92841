//! The crate's zip engine: a deterministic, parallel, streaming zip writer
//! (`write`, with the entries it takes in `entry`, the pieces an entry is
//! cut into in `pieces` and the header bytes in `headers`), raw deflate in
//! independent pieces (`deflate`), and the reuse of an original member's
//! deflate blocks when a rewritten member keeps most of its bytes
//! (`inflate_index` finds the block boundaries, `reuse` copies them).
//!
//! It knows nothing of wheels: `wheel` (RECORD, repair) and `rocm` (the
//! packages it writes) sit on top of it. Reading zips is the `zip` crate's.

pub mod deflate;
pub mod entry;
mod error;
pub mod headers;
pub mod inflate_index;
pub mod pieces;
pub mod reuse;
pub mod time;
pub mod write;

pub use error::{DeflateError, ZipError};
