//! Inflating a zip member while noting where each of its deflate blocks
//! begins, so a rewritten member can copy the unchanged stretch of the
//! original stream instead of compressing it again (the zip writer's
//! reuse of a [`StreamIndex`], in `reuse`).
//!
//! A block boundary is a point where the decoder needs nothing but the
//! last 32 KiB of output: from there, the original blocks decode the same
//! after any new prefix that ends with those 32 KiB. zlib's `Z_BLOCK` flush
//! stops at every boundary and reports the bits it holds unread; no safe
//! Rust inflater exposes that (flate2 and zlib-rs' safe API hide
//! `data_type`), hence the small use of zlib-rs' C API here, with the one
//! `z_stream` owned by [`IndexedInflate`].

use libz_rs_sys as z;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Where a deflate block begins: its offset in the output and its first
/// bit in the compressed stream (counted from the stream's first byte,
/// least significant bit first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boundary {
    pub out: u64,
    pub bit: u64,
}

/// A member's compressed stream in a zip file, with its block boundaries.
#[derive(Debug, Clone)]
pub struct StreamIndex {
    /// The zip holding the stream.
    pub zip: PathBuf,
    /// Where the stream's first byte is in `zip`.
    pub data_start: u64,
    /// The stream's length in bytes.
    pub compressed: u64,
    /// The member's uncompressed size.
    pub size: u64,
    /// Every non-final block's start, in order.
    pub boundaries: Vec<Boundary>,
    /// The extracted file as written, to tell whether it was changed
    /// since (stripped or patched in place: its blocks no longer apply).
    pub extracted: Option<FileStamp>,
}

/// A file's size, inode and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    len: u64,
    ino: u64,
    mtime_ns: i128,
}

impl FileStamp {
    pub fn of(path: &Path) -> io::Result<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path)?;
        Ok(FileStamp {
            len: m.len(),
            ino: m.ino(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }
}

/// Input read from the zip at a time.
const INPUT: usize = 1 << 18;

/// A [`Read`] over one raw deflate member of a zip that checks the member's
/// CRC-32 and size at its end and records its block boundaries.
pub struct IndexedInflate {
    stream: Box<z::z_stream>,
    input: BufReader<io::Take<File>>,
    buf: Vec<u8>,
    at: usize,
    consumed: u64,
    produced: u64,
    crc: crc32fast::Hasher,
    expect_crc: u32,
    index: StreamIndex,
    ended: bool,
    /// Calls in a row that moved nothing (a guard against a stuck loop).
    stalls: u8,
}

impl IndexedInflate {
    /// Inflate the member of `zip` whose stream starts at `data_start`.
    pub fn open(
        zip: &Path,
        data_start: u64,
        compressed: u64,
        size: u64,
        expect_crc: u32,
    ) -> io::Result<IndexedInflate> {
        let mut file = File::open(zip)?;
        file.seek(SeekFrom::Start(data_start))?;
        let mut stream = Box::new(z::z_stream::default());
        // SAFETY: `stream` is a default (zeroed, allocator-less) z_stream,
        // which inflateInit2_ fills in; -15: raw deflate, 32 KiB window.
        let rc =
            unsafe { z::inflateInit2_(&mut *stream, -15, z::zlibVersion(), std::mem::size_of::<z::z_stream>() as i32) };
        if rc != z::Z_OK {
            return Err(io::Error::other(format!("inflate could not start (zlib code {rc})")));
        }
        Ok(IndexedInflate {
            stream,
            input: BufReader::with_capacity(INPUT, file.take(compressed)),
            buf: Vec::new(),
            at: 0,
            consumed: 0,
            produced: 0,
            crc: crc32fast::Hasher::new(),
            expect_crc,
            index: StreamIndex {
                zip: zip.to_path_buf(),
                data_start,
                compressed,
                size,
                boundaries: Vec::new(),
                extracted: None,
            },
            ended: false,
            stalls: 0,
        })
    }

    /// The index, once the whole member has been read.
    pub fn into_index(self) -> Option<StreamIndex> {
        self.ended.then(|| self.index.clone())
    }

    fn note_boundary(&mut self) {
        let state = self.stream.data_type;
        // 128: waiting for a block header; 64: the block just read was the
        // last. zlib-rs keeps up to 63 unread bits (zlib: 7).
        if state & 128 != 0 && state & 64 == 0 {
            let unread = u64::from((state & 63) as u32);
            let b = Boundary { out: self.produced, bit: self.consumed * 8 - unread };
            if self.index.boundaries.last() != Some(&b) {
                self.index.boundaries.push(b);
            }
        }
    }

    fn finish(&mut self) -> io::Result<()> {
        self.ended = true;
        let crc = std::mem::take(&mut self.crc).finalize();
        if self.produced != self.index.size {
            return Err(io::Error::other(format!(
                "holds {} bytes, its header says {}",
                self.produced, self.index.size
            )));
        }
        if crc != self.expect_crc {
            return Err(io::Error::other(format!("its CRC-32 is {crc:08x}, its header says {:08x}", self.expect_crc)));
        }
        Ok(())
    }
}

impl Read for IndexedInflate {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.ended || out.is_empty() {
            return Ok(0);
        }
        loop {
            let mut input_ended = false;
            if self.at == self.buf.len() {
                self.buf.clear();
                self.buf.extend_from_slice(self.input.fill_buf()?);
                self.input.consume(self.buf.len());
                self.at = 0;
                input_ended = self.buf.is_empty();
            }
            let avail_in = self.buf.len() - self.at;
            let asked = out.len().min(u32::MAX as usize);
            let stream = &mut *self.stream;
            stream.next_in = self.buf[self.at..].as_ptr();
            stream.avail_in = avail_in as u32;
            stream.next_out = out.as_mut_ptr();
            stream.avail_out = asked as u32;
            // SAFETY: next_in/next_out point into live buffers of the sizes
            // given; the stream was initialized in `open` and is ended only
            // in `drop`. Z_BLOCK: stop at each block boundary.
            let rc = unsafe { z::inflate(stream, z::Z_BLOCK) };
            let used = avail_in - stream.avail_in as usize;
            let made = asked - stream.avail_out as usize;
            self.at += used;
            self.consumed += used as u64;
            self.produced += made as u64;
            self.crc.update(&out[..made]);
            match rc {
                z::Z_STREAM_END => {
                    self.finish()?;
                    return Ok(made);
                }
                z::Z_OK | z::Z_BUF_ERROR => {
                    self.note_boundary();
                    if made > 0 {
                        return Ok(made);
                    }
                    if used == 0 && input_ended {
                        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "its deflate stream ends early"));
                    }
                    self.stalls = if used == 0 { self.stalls + 1 } else { 0 };
                    if self.stalls > 2 {
                        return Err(io::Error::other("inflate stopped making progress"));
                    }
                }
                rc => return Err(io::Error::other(format!("its deflate data is invalid (zlib code {rc})"))),
            }
        }
    }
}

impl Drop for IndexedInflate {
    fn drop(&mut self) {
        // SAFETY: the stream was initialized in `open`; ended once, here.
        unsafe { z::inflateEnd(&mut *self.stream) };
    }
}

/// One zip member's bytes as they are read: through the zip crate, or
/// through [`IndexedInflate`].
pub enum Member<'a, R: Read> {
    Zip(zip::read::ZipFile<'a, R>),
    Indexed(IndexedInflate),
}

impl<R: Read> Read for Member<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Member::Zip(z) => z.read(buf),
            Member::Indexed(i) => i.read(buf),
        }
    }
}
