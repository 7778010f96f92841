//! Reading bytes that are read once (a file streamed into an archive):
//! from the page cache when they are all there, else straight from the
//! device with `O_DIRECT`.
//!
//! Filling the page cache is the kernel's work, on the reading thread's
//! CPU: about 0.9 CPU s a GB on this kind of machine, against 0.1 for a
//! direct read of the same bytes (`dd` buffered and `iflag=direct`). A
//! packaging run reads its gigabytes once, so from a cold cache that fill
//! is pure cost, and on a busy two-core machine it is compression time
//! lost; it would also push out what the user had cached. Bytes already
//! cached (a warm run) are read the ordinary way, which is cheaper still.
//!
//! Whether a file is cached is asked with `mincore` on a mapping of it
//! (no page is touched, nothing is read), once per file ([`read_directly`]):
//! a file only partly cached is read directly throughout, because one
//! ordinary read of its cached pages sets off the kernel's readahead of
//! the pages after them, and from then on every read finds its pages
//! cached, paying for the fill after all. Direct reads go through an
//! aligned buffer per thread; where the file system refuses `O_DIRECT`
//! (tmpfs on older kernels, some network and FUSE file systems) the
//! ordinary read is used. Only reads of at least [`DIRECT_MIN`] bytes go
//! direct: small ones (an ELF header, a symbol name) are cheaper cached.
//!
//! Depends on nothing else in the crate.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

/// Reads shorter than this are always ordinary reads.
pub const DIRECT_MIN: usize = 256 << 10;

/// The alignment `O_DIRECT` asks of offsets, lengths and buffers (the
/// largest logical block size in common use).
const ALIGN: usize = 4096;

/// Bytes per direct read.
const CHUNK: usize = 4 << 20;

/// Whether `file`'s large reads should be direct: it is not all in the
/// page cache and direct reads can be opened for it. Chosen once per file;
/// see the module docs.
pub fn read_directly(file: &File) -> bool {
    let Ok(len) = file.metadata().map(|m| m.len()) else { return false };
    len >= DIRECT_MIN as u64 && !all_cached(file, 0, len as usize) && direct_twin(file).is_some()
}

/// Fill `buf` with the bytes of `file` at `offset`, as
/// [`FileExt::read_exact_at`] does (a file too short is `UnexpectedEof`);
/// directly when `direct` (from [`read_directly`]) and `buf` is large.
/// The direct descriptor is opened for the read and closed after it, so
/// a caller holding many files open holds no more than before.
pub fn read_exact_at(file: &File, direct: bool, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let twin = if direct && buf.len() >= DIRECT_MIN { direct_twin(file) } else { None };
    if let Some(twin) = twin {
        match read_direct(&twin, buf, offset) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {} // alignment refused: read as usual
            done => return done,
        }
    }
    file.read_exact_at(buf, offset)
}

/// Whether every page of `offset..offset + len` is in the page cache
/// (false when that cannot be told: the ordinary read is then still
/// correct, only dearer).
fn all_cached(file: &File, offset: u64, len: usize) -> bool {
    let page = page_size();
    let start = offset - offset % page as u64;
    let span = (offset - start) as usize + len;
    let Ok(size) = file.metadata().map(|m| m.len()) else { return false };
    if offset + len as u64 > size {
        return false; // let the read report it
    }
    // SAFETY: a read-only shared mapping of a range inside the file, never
    // dereferenced: mincore only asks the kernel about its pages, and the
    // mapping is dropped before returning.
    let map = unsafe { memmap2::MmapOptions::new().offset(start).len(span).map(file) };
    let Ok(map) = map else { return false };
    let mut resident = vec![0u8; span.div_ceil(page)];
    // SAFETY: the address and length are the mapping's, and `resident` has
    // one byte per page of it, as mincore requires.
    let rc = unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, span, resident.as_mut_ptr()) };
    rc == 0 && resident.iter().all(|b| b & 1 == 1)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// The same open file again, for direct reads (through /proc, so a file
/// renamed or replaced since it was opened is still this one); None where
/// that is not possible.
fn direct_twin(file: &File) -> Option<File> {
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path).ok()
}

thread_local! {
    /// Each thread's aligned buffer for direct reads, kept across reads.
    static BOUNCE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Direct reads of the aligned range around `offset..offset + buf.len()`,
/// copied into `buf`.
fn read_direct(direct: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    BOUNCE.with(|bounce| {
        let mut bounce = bounce.borrow_mut();
        if bounce.len() < CHUNK + ALIGN {
            bounce.resize(CHUNK + ALIGN, 0);
        }
        let pad = bounce.as_ptr().align_offset(ALIGN);
        let aligned = &mut bounce[pad..pad + CHUNK];
        let end = offset + buf.len() as u64;
        let mut at = offset - offset % ALIGN as u64;
        while at < end {
            let want = ((end - at) as usize).next_multiple_of(ALIGN).min(CHUNK);
            let got = direct.read_at(&mut aligned[..want], at)?;
            // The part of what was read that `buf` wants.
            let from = offset.max(at);
            let to = end.min(at + got as u64);
            if to <= from {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            buf[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&aligned[(from - at) as usize..(to - at) as usize]);
            if got < want && to < end {
                // A short read before the end: the file ends here.
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            at += got as u64;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_of(len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4099) as u8).collect();
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), &data).unwrap();
        (f, data)
    }

    #[test]
    fn direct_reads_give_the_bytes_at_any_offset_and_length() {
        let (f, data) = file_of(3 * CHUNK + 12_345);
        let file = File::open(f.path()).unwrap();
        let Some(direct) = direct_twin(&file) else { return }; // no O_DIRECT here: nothing to test
        for (offset, len) in [(0, CHUNK), (1, 5), (4095, CHUNK + 2), (7, 3 * CHUNK), (3 * CHUNK, 12_345)] {
            let mut buf = vec![0u8; len];
            match read_direct(&direct, &mut buf, offset as u64) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return, // file system refuses it
                r => r.unwrap(),
            }
            assert_eq!(buf, &data[offset..offset + len], "at {offset}, {len} bytes");
        }
    }

    #[test]
    fn a_read_past_the_end_is_unexpected_eof_either_way() {
        let (f, _) = file_of(DIRECT_MIN + 100);
        let file = File::open(f.path()).unwrap();
        let mut buf = vec![0u8; DIRECT_MIN];
        let err = read_exact_at(&file, false, &mut buf, 200).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        if direct_twin(&file).is_some() {
            let err = read_exact_at(&file, true, &mut buf, 200).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
        }
    }

    #[test]
    fn a_freshly_written_file_is_seen_as_cached_and_read_the_ordinary_way() {
        let (f, data) = file_of(DIRECT_MIN * 2);
        let file = File::open(f.path()).unwrap();
        assert!(all_cached(&file, 0, data.len()), "just written, so in the page cache");
        assert!(!all_cached(&file, 1, data.len()), "past the end");
        assert!(!read_directly(&file));
        let mut buf = vec![0u8; data.len() - 10];
        read_exact_at(&file, false, &mut buf, 10).unwrap();
        assert_eq!(buf, &data[10..]);
    }

    #[test]
    fn an_uncached_file_is_read_without_filling_the_page_cache() {
        let (f, data) = file_of(2 * CHUNK + 999);
        let file = File::open(f.path()).unwrap();
        file.sync_all().unwrap();
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        // A few pages cached (an ELF header read, say) still mean direct reads.
        file.read_exact_at(&mut [0u8; 64], 0).unwrap();
        if !read_directly(&file) {
            return; // a file system that keeps its pages (tmpfs) or refuses O_DIRECT
        }
        let mut buf = vec![0u8; data.len() - 3];
        read_exact_at(&file, true, &mut buf, 3).unwrap();
        assert_eq!(buf, &data[3..]);
        let resident = (0..data.len()).step_by(4096).filter(|&at| all_cached(&file, at as u64, 1)).count();
        // The header read's readahead is a few pages; a buffered read would
        // have brought in every one.
        assert!(resident <= 64, "{resident} pages came into the page cache: not a direct read");
    }
}
