//! Tar handling: the in-memory layer tree, the deterministic tar writer,
//! reading foreign archives (tar, compressed tars, zip/whl) into the tree,
//! and safe extraction to disk.

pub mod archive;
pub mod compress;
pub mod extract;
pub mod pack;
pub mod path;
pub mod stream;
pub mod tar_splice;
pub mod tree;
pub mod write;

pub use tree::{Content, Kind, Node, Tree, TreeError};
