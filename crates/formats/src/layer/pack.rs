//! The layer pipeline: tree -> deterministic tar -> sha256 (diff_id) ->
//! compressor -> sha256 (digest) -> a blob in the cache.
//!
//! Four stages on their own threads, joined by bounded queues of 1 MiB
//! chunks, so that reading files, hashing, compressing and writing the blob
//! overlap and memory stays flat whatever the layer's size:
//! - the calling thread walks the tree and writes the tar;
//! - a hashing thread computes the tar's sha256 (the diff_id);
//! - a compressing thread drives the encoder (whose own workers compress
//!   gzip blocks or zstd jobs in parallel);
//! - a writing thread hashes the compressed bytes (the digest) and writes
//!   the blob (a `BlobWriter`, which names it by that digest).
//!
//! An uncompressed layer is the tar itself: the hashing thread writes it,
//! and its one digest is both the diff_id and the blob's digest.

use crate::layer::compress::{self, Compression, LayerCodec};
use crate::layer::write::{write_tar_to, CopyError, HostDigests, HostFile, TarSink, WriteError, WriteOptions};
use crate::layer::Tree;
use crate::oci::blob::{BlobDir, BlobError, BlobWriter, Stored};
use crate::oci::digest::{Digest, HashingWriter};
use crate::oci::LayerBlob;
use sha2::{Digest as _, Sha256};
use std::io::{self, Read, Write};
use std::ops::Range;
use std::sync::mpsc;

/// Bytes per chunk passed between stages.
const CHUNK: usize = 1 << 20;
/// Chunks each queue holds: enough read-ahead to ride out a slow file or a
/// slow disk, small enough to keep memory flat (2 queues x 8 MiB).
const QUEUE_CHUNKS: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error(transparent)]
    Blob(#[from] BlobError),
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// A piece of a stream passed between stages, and which of its bytes are
/// the content of files hashed for a cache key (by file number; a file's
/// ranges come in order, one file after another, and an empty file has
/// one empty range).
struct Chunk {
    bytes: Vec<u8>,
    files: Vec<(u32, Range<usize>)>,
}

/// A writer that cuts its input into `CHUNK`-sized buffers and sends them
/// down a bounded queue (blocking while the queue is full).
struct ChunkSender {
    tx: mpsc::SyncSender<Chunk>,
    buf: Chunk,
    /// The trace stage for time spent waiting on a full queue.
    waiting: &'static str,
}

impl ChunkSender {
    fn new(tx: mpsc::SyncSender<Chunk>, waiting: &'static str) -> Self {
        ChunkSender { tx, buf: Chunk { bytes: Vec::with_capacity(CHUNK), files: Vec::new() }, waiting }
    }

    fn send(&mut self) -> io::Result<()> {
        if self.buf.bytes.is_empty() && self.buf.files.is_empty() {
            return Ok(());
        }
        let next = Chunk { bytes: Vec::with_capacity(CHUNK), files: Vec::new() };
        let full = std::mem::replace(&mut self.buf, next);
        // The receiver only goes away when its stage failed; that stage's
        // error is the one reported.
        let _waiting = crate::trace::span(self.waiting);
        self.tx.send(full).map_err(|_| next_stage_stopped())
    }

    /// Read exactly `len` bytes of `src` into chunks; `file` marks them as
    /// that file's content.
    fn read_from(&mut self, src: &mut dyn Read, len: u64, file: Option<u32>) -> Result<(), CopyError> {
        if let Some(f) = file {
            let at = self.buf.bytes.len();
            self.buf.files.push((f, at..at));
        }
        let mut left = len;
        while left > 0 {
            if self.buf.bytes.len() == CHUNK {
                self.send().map_err(CopyError::Write)?;
            }
            let want = ((CHUNK - self.buf.bytes.len()) as u64).min(left);
            let start = self.buf.bytes.len();
            match src.take(want).read_to_end(&mut self.buf.bytes) {
                Ok(0) => return Err(CopyError::Short),
                Ok(n) => left -= n as u64,
                Err(e) => return Err(CopyError::Read(e)),
            }
            if let Some(f) = file {
                let end = self.buf.bytes.len();
                match self.buf.files.last_mut() {
                    Some((last, r)) if *last == f && r.end == start => r.end = end,
                    _ => self.buf.files.push((f, start..end)),
                }
            }
        }
        if self.buf.bytes.len() == CHUNK {
            self.send().map_err(CopyError::Write)?;
        }
        Ok(())
    }
}

impl Write for ChunkSender {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = (CHUNK - self.buf.bytes.len()).min(data.len());
        self.buf.bytes.extend_from_slice(&data[..n]);
        if self.buf.bytes.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

impl TarSink for ChunkSender {
    /// File content goes straight into the chunk: `read_to_end` fills the
    /// spare capacity without zeroing it, and never grows the chunk (`want`
    /// fits), so each byte is copied once, by the kernel.
    fn append_from(&mut self, src: &mut dyn Read, len: u64) -> Result<(), CopyError> {
        self.read_from(src, len, None)
    }

    /// The file's ranges travel with the chunks: the tar hashing thread
    /// hashes them, off the thread that walks the tree and reads files.
    fn append_hashed(&mut self, src: &mut dyn Read, len: u64, file: u32) -> Result<(), CopyError> {
        self.read_from(src, len, Some(file))
    }
}

/// The sha256 of numbered files, by number.
type FileDigests = Vec<(u32, [u8; 32])>;

/// The sha256 of each numbered file whose ranges the chunks carry.
#[derive(Default)]
struct FileHashes {
    current: Option<(u32, Sha256)>,
    done: FileDigests,
}

impl FileHashes {
    fn feed(&mut self, chunk: &Chunk) {
        for (f, r) in &chunk.files {
            match &mut self.current {
                Some((cur, sha)) if cur == f => sha.update(&chunk.bytes[r.clone()]),
                _ => {
                    self.finish_current();
                    let mut sha = Sha256::new();
                    sha.update(&chunk.bytes[r.clone()]);
                    self.current = Some((*f, sha));
                }
            }
        }
    }

    fn finish_current(&mut self) {
        if let Some((f, sha)) = self.current.take() {
            self.done.push((f, sha.finalize().into()));
        }
    }

    fn finish(mut self) -> FileDigests {
        self.finish_current();
        self.done
    }
}

/// Pack `tree` into a blob in `cache`. `on_bytes` sees content progress;
/// `host_digests`, when given, receives the sha256 and capability of every
/// `Content::HostToHash` file (hashed on the tar hashing thread).
pub fn pack_tree(
    blobs: &BlobDir,
    tree: &Tree,
    codec: LayerCodec,
    threads: usize,
    opts: &WriteOptions,
    on_bytes: &mut dyn FnMut(u64),
    host_digests: Option<&mut HostDigests>,
) -> Result<LayerBlob, PackError> {
    let uncompressed = codec.compression == Compression::None;
    // The blob's writer: the tar hashing stage's for an uncompressed layer,
    // else the last stage's.
    let mut blob = Some(blobs.writer()?);
    let tar_blob = if uncompressed { blob.take() } else { None };
    let (tar_tx, tar_rx) = mpsc::sync_channel::<Chunk>(QUEUE_CHUNKS);
    let (hashed_tx, hashed_rx) = mpsc::sync_channel::<Vec<u8>>(QUEUE_CHUNKS);
    let (blob_tx, blob_rx) = mpsc::sync_channel::<Chunk>(QUEUE_CHUNKS);
    let mut hashed_files = host_digests.is_some().then(Vec::new);

    let (produced, hashed, compressed, written) = std::thread::scope(|s| {
        let writer = stage(s, "blob-write", move || -> io::Result<Option<BlobWriter>> {
            let mut out = blob;
            for chunk in blob_rx {
                let _busy = crate::trace::span("blob write (busy)");
                out.as_mut().ok_or_else(next_stage_stopped)?.write_all(&chunk.bytes)?;
            }
            Ok(out)
        });
        // Hashing the tar on its own thread keeps the walk and the
        // compressor busy on both cores instead of waiting for it.
        let hasher = stage(s, "tar-hash", move || -> io::Result<(TarEnd, FileDigests)> {
            let mut files = FileHashes::default();
            match tar_blob {
                Some(mut w) => {
                    for chunk in tar_rx {
                        files.feed(&chunk);
                        w.write_all(&chunk.bytes)?;
                    }
                    Ok((TarEnd::Blob(w), files.finish()))
                }
                None => {
                    let mut h = HashingWriter::new(io::sink());
                    for chunk in tar_rx {
                        crate::trace::time("tar sha256 (busy)", || {
                            files.feed(&chunk);
                            h.write_all(&chunk.bytes)
                        })?;
                        hashed_tx.send(chunk.bytes).map_err(|_| next_stage_stopped())?;
                    }
                    Ok((TarEnd::Hashed(h.finish().1), files.finish()))
                }
            }
        });
        let compressor = stage(s, "compress", move || -> io::Result<()> {
            if uncompressed {
                drop(blob_tx);
                return Ok(());
            }
            let mut enc = compress::encoder(codec, threads, ChunkSender::new(blob_tx, "compress: wait on blob queue"))?;
            for chunk in hashed_rx {
                crate::trace::time("compress (busy)", || enc.write_all(&chunk))?;
            }
            crate::trace::time("compress (busy)", || enc.finish()?.flush())
        });
        let produced = (|| -> Result<(), WriteError> {
            let _tar = crate::trace::span("tar (walk tree, headers, read)");
            let sink = ChunkSender::new(tar_tx, "tar: wait on hash queue");
            let mut sender = write_tar_to(tree, sink, opts, on_bytes, hashed_files.as_mut())?;
            sender.flush()?;
            Ok(())
        })();
        // The tar sender is dropped by now: the other stages drain and end.
        let hashed = join(hasher, "tar hashing");
        let compressed = join(compressor, "compressing");
        let written = join(writer, "blob writing");
        (produced, hashed, compressed, written)
    });
    // A stage's failure makes the stages before it fail with BrokenPipe:
    // report the furthest one, which is the cause.
    let compressed_blob = written.map_err(WriteError::Io)?;
    compressed.map_err(WriteError::Io)?;
    let (tar_end, file_digests) = hashed.map_err(WriteError::Io)?;
    produced?;
    if let (Some(digests), Some(files)) = (host_digests, hashed_files) {
        for (n, sha256) in file_digests {
            let f = &files[n as usize];
            digests.insert(f.inode, HostFile { sha256, capability: f.capability.clone() });
        }
    }
    let (diff_id, stored): (Digest, Stored) = match (tar_end, compressed_blob) {
        (TarEnd::Blob(w), _) => {
            let stored = w.commit()?;
            (stored.digest, stored)
        }
        (TarEnd::Hashed(diff_id), Some(w)) => (diff_id, crate::trace::time("blob commit", || w.commit())?),
        (TarEnd::Hashed(_), None) => unreachable!("a compressed layer's writer is the last stage's"),
    };
    Ok(LayerBlob { digest: stored.digest, diff_id, size: stored.size, media_type: codec.media_type().to_string() })
}

/// How the tar stage ends: it wrote the blob itself (uncompressed), or
/// hashed the tar on its way to the compressor.
enum TarEnd {
    Blob(BlobWriter),
    Hashed(Digest),
}

/// Start a pipeline stage on a named thread (names show in `top -H` and
/// profilers); a thread that cannot start is that stage's error.
fn stage<'scope, 'env, T: Send + 'scope>(
    s: &'scope std::thread::Scope<'scope, 'env>,
    name: &str,
    f: impl FnOnce() -> io::Result<T> + Send + 'scope,
) -> StageHandle<'scope, T> {
    std::thread::Builder::new().name(format!("quarry-{name}")).spawn_scoped(s, f)
}

type StageHandle<'scope, T> = io::Result<std::thread::ScopedJoinHandle<'scope, io::Result<T>>>;

fn join<T>(stage: StageHandle<'_, T>, what: &str) -> io::Result<T> {
    stage?.join().unwrap_or_else(|_| Err(io::Error::other(format!("the {what} thread panicked"))))
}

fn next_stage_stopped() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the next pipeline stage stopped")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::{Node, Tree};
    use std::io::Read;

    /// A tree of several MiB (many chunks and gzip blocks) from memory.
    fn tree() -> Tree {
        let mut t = Tree::new();
        for i in 0..40u32 {
            let data: Vec<u8> = (0..200_000u32)
                .map(|j| if i % 3 == 0 { (j.wrapping_mul(2654435761) >> 13) as u8 } else { (j % 251) as u8 })
                .collect();
            t.insert(format!("d{}/f{i}", i % 4).into_bytes(), Node::bytes(data, 0o644)).unwrap();
        }
        t
    }

    fn decompress(c: Compression, blob: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match c {
            Compression::Gzip => {
                flate2::read::MultiGzDecoder::new(blob).read_to_end(&mut out).unwrap();
            }
            Compression::Zstd => out = zstd::decode_all(blob).unwrap(),
            Compression::None => out = blob.to_vec(),
        }
        out
    }

    #[test]
    fn blob_and_digests_match_the_tar() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = BlobDir::open(tmp.path(), &tmp.path().join("tmp")).unwrap();
        let t = tree();
        let opts = WriteOptions::default();
        let tar = crate::layer::write::write_tar(&t, Vec::new(), &opts, &mut |_| {}).unwrap();
        for c in [Compression::Gzip, Compression::Zstd, Compression::None] {
            let mut progress = 0;
            let codec = LayerCodec::new(c, None).unwrap();
            let one = pack_tree(&cache, &t, codec, 1, &opts, &mut |n| progress += n, None).unwrap();
            let two = pack_tree(&cache, &t, codec, 2, &opts, &mut |_| {}, None).unwrap();
            assert_eq!(one, two, "{c:?}: thread count changed the blob");
            assert_eq!(progress, t.content_bytes());
            let blob = std::fs::read(cache.path(&one.digest)).unwrap();
            assert_eq!(blob.len() as u64, one.size);
            assert_eq!(Digest::of_bytes(&blob), one.digest);
            assert_eq!(Digest::of_bytes(&tar), one.diff_id);
            assert!(decompress(c, &blob) == tar, "{c:?}: the blob decompresses to the tar");
        }
    }

    #[test]
    fn a_source_shorter_than_recorded_is_an_error_for_every_sink() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = BlobDir::open(&tmp.path().join("cache"), &tmp.path().join("tmp")).unwrap();
        let file = tmp.path().join("short");
        std::fs::write(&file, vec![7u8; 3000]).unwrap();
        let mut t = tree();
        // A slice is read without a size check at open: the copy itself
        // must notice that the source ends early (past a chunk boundary).
        let content = crate::layer::Content::Slice { file: std::sync::Arc::new(file.clone()), offset: 0 };
        let node = Node::new(crate::layer::Kind::File { size: (3 * CHUNK) as u64, content }, 0o644);
        t.insert(b"zz/short".to_vec(), node).unwrap();
        let plain = crate::layer::write::write_tar(&t, Vec::new(), &WriteOptions::default(), &mut |_| {});
        let err = plain.map(|_| ()).unwrap_err().to_string();
        assert!(err.contains("changed while") && err.contains("short"), "{err}");
        let err =
            pack_tree(&cache, &t, LayerCodec::default(), 2, &WriteOptions::default(), &mut |_| {}, None).unwrap_err();
        let err = err.to_string();
        assert!(err.contains("changed while") && err.contains("short"), "{err}");
        assert_eq!(std::fs::read_dir(tmp.path().join("tmp")).unwrap().count(), 0, "the temporary blob is removed");
    }

    #[test]
    fn a_failing_source_is_reported_and_leaves_no_blob() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = BlobDir::open(tmp.path(), &tmp.path().join("tmp")).unwrap();
        let mut t = tree();
        let missing = tmp.path().join("gone");
        let node = Node::new(
            crate::layer::Kind::File { size: 5, content: crate::layer::Content::Host(missing.clone()) },
            0o644,
        );
        t.insert(b"zz/gone".to_vec(), node).unwrap();
        let err =
            pack_tree(&cache, &t, LayerCodec::default(), 2, &WriteOptions::default(), &mut |_| {}, None).unwrap_err();
        assert!(err.to_string().contains("gone"), "{err}");
        assert_eq!(std::fs::read_dir(cache.dir()).unwrap().count(), 0);
        assert_eq!(std::fs::read_dir(tmp.path().join("tmp")).unwrap().count(), 0, "the temporary blob is removed");
    }
}
