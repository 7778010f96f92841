//! The layer pipeline: tree -> deterministic tar -> sha256 (diff_id) ->
//! compressor -> sha256 (digest) -> a blob in the cache. One pass, streaming:
//! memory stays flat whatever the layer's size.

use crate::compress::{self, Compression};
use crate::digest::HashingWriter;
use crate::store::cache::{Cache, CacheError};
use crate::store::LayerBlob;
use crate::tarball::write::{write_tar, WriteError, WriteOptions};
use crate::tarball::Tree;
use std::io::{BufWriter, Write};

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// Pack `tree` into a blob in `cache`. `on_bytes` sees content progress.
pub fn pack_tree(
    cache: &Cache,
    tree: &Tree,
    compression: Compression,
    threads: usize,
    opts: &WriteOptions,
    on_bytes: &mut dyn FnMut(u64),
) -> Result<LayerBlob, PackError> {
    let tmp = cache.temp_file()?;
    let file = tmp.reopen().map_err(WriteError::Io)?;
    let blob_hash = HashingWriter::new(BufWriter::with_capacity(1 << 20, file));
    let encoder = compress::encoder(compression, threads, blob_hash).map_err(WriteError::Io)?;
    let tar_hash = HashingWriter::new(encoder);
    let tar_hash = write_tar(tree, tar_hash, opts, on_bytes)?;
    let (encoder, diff_hex, _) = tar_hash.finish();
    let blob_hash = encoder.finish().map_err(WriteError::Io)?;
    let (mut file, digest_hex, size) = blob_hash.finish();
    file.flush().map_err(WriteError::Io)?;
    drop(file);
    cache.commit_blob(tmp, &digest_hex)?;
    Ok(LayerBlob {
        digest: format!("sha256:{digest_hex}"),
        diff_id: format!("sha256:{diff_hex}"),
        size,
        media_type: compression.media_type().to_string(),
    })
}
