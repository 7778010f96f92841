//! The code objects of one fat binary, into the per-architecture `.kpack`
//! archives being written. Wrapper `i` of `.hipFatBinSegment` points at
//! one offload bundle in `.hip_fatbin` (the runtime registers each
//! separately: `-fgpu-rdc` binaries have several); its code objects become
//! the kernels `{binary}#{i}` of their architectures, the key the runtime
//! looks up with the wrapper's index. Bundles are read where the wrappers
//! point, never found by searching for magic bytes (which code objects may
//! hold), and streamed from the file with positional reads, one code
//! object at a time: memory holds one kernel (a compressed bundle is read
//! whole, as its frame must be), never the section, and no mapping makes
//! the file's pages count as the process's own.

use super::SplitError;
use crate::code_objects::bundle::{self, Entry, EntryId};
use crate::code_objects::compressed;
use crate::code_objects::kpack_writer::{KpackWriter, Scheme};
use crate::code_objects::target_id::TargetId;
use crate::elf::kpack_ref::FatBinary;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The archives of one package being written, by architecture (a full target id).
pub struct Archives {
    pub dir: PathBuf,
    pub group: String,
    pub scheme: Scheme,
    pub writers: BTreeMap<String, KpackWriter<BufWriter<File>>>,
}

impl Archives {
    fn writer(&mut self, arch: &str) -> Result<&mut KpackWriter<BufWriter<File>>, SplitError> {
        if !self.writers.contains_key(arch) {
            let path = self.dir.join(format!("{}_{arch}.kpack", self.group));
            let file = File::create(&path).map_err(|e| SplitError::io(&path, e))?;
            let w = KpackWriter::new(BufWriter::with_capacity(1 << 20, file), &self.group, arch, self.scheme)
                .map_err(|e| SplitError::io(&path, e))?;
            self.writers.insert(arch.to_string(), w);
        }
        Ok(self.writers.get_mut(arch).expect("just inserted"))
    }
}

/// What one binary held.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct BinaryCode {
    /// Code objects per architecture.
    pub code_objects: BTreeMap<String, u32>,
    pub wrappers: usize,
}

/// Move every code object of `path` (`rel` in the package: `lib/libx.so`)
/// into `archives`; `keep` says which architectures a split keeps.
pub fn extract(
    path: &Path,
    rel: &str,
    fat: &FatBinary,
    archives: &mut Archives,
    keep: &mut dyn FnMut(&TargetId) -> bool,
) -> Result<BinaryCode, SplitError> {
    let bad = |why: String| SplitError::Binary { file: path.to_path_buf(), why };
    let file = File::open(path).map_err(|e| SplitError::io(path, e))?;
    let len = file.metadata().map_err(|e| SplitError::io(path, e))?.len();
    let end = fat.fatbin_offset.checked_add(fat.fatbin_size).filter(|e| *e <= len);
    let Some(end) = end else {
        return Err(bad(format!(
            ".hip_fatbin ({} bytes at {:#x}) runs past the file",
            fat.fatbin_size, fat.fatbin_offset
        )));
    };
    let mut code = BinaryCode { wrappers: fat.wrappers.len(), ..Default::default() };
    // Bundles already read (by offset): their kernels per architecture.
    let mut seen: BTreeMap<u64, Vec<(String, u32, u64)>> = BTreeMap::new();
    for (i, &at) in fat.wrappers.iter().enumerate() {
        let key = format!("{rel}#{i}");
        if let Some(kernels) = seen.get(&at) {
            for (arch, ordinal, size) in kernels {
                let w = archives.writers.get_mut(arch).expect("written before");
                w.alias(&key, *ordinal, *size).map_err(|e| bad(e.to_string()))?;
            }
            continue;
        }
        let start = fat.fatbin_offset + at;
        if start >= end {
            return Err(bad(format!(
                "wrapper {i} points at offset {at:#x}, past .hip_fatbin's {} bytes",
                fat.fatbin_size
            )));
        }
        let mut magic = [0u8; 24];
        let head = &mut magic[..(end - start).min(24) as usize];
        file.read_exact_at(head, start).map_err(|e| SplitError::io(path, e))?;
        let mut failure: Option<SplitError> = None;
        let mut kernels = Vec::new();
        let mut visit = |e: &Entry, r: &mut dyn Read| -> Result<(), bundle::BundleError> {
            match take(e, r, &key, archives, keep, &mut code) {
                Ok(taken) => {
                    kernels.extend(taken);
                    Ok(())
                }
                Err(err) => {
                    failure = Some(err);
                    Err(bundle::BundleError::Corrupt("stopped".into()))
                }
            }
        };
        let read = if magic.starts_with(bundle::MAGIC) {
            let mut r = bundle::Stream(Range { file: &file, pos: start, end });
            bundle::read_with(&mut r, Some(end - start), &mut visit).map(drop)
        } else if magic.starts_with(compressed::MAGIC) {
            let whole = read_compressed(&file, start, end).map_err(|e| SplitError::io(path, e))?;
            compressed::read_with(&whole, &mut visit).map(drop)
        } else {
            return Err(bad(format!(
                "wrapper {i} points at offset {at:#x} of .hip_fatbin, where no offload bundle starts"
            )));
        };
        if let Some(f) = failure {
            return Err(f);
        }
        read.map_err(|e| bad(format!("the bundle of wrapper {i} (offset {at:#x} of .hip_fatbin): {e}")))?;
        seen.insert(at, kernels);
    }
    Ok(code)
}

/// Bytes of device code in `path` per architecture (a full target id):
/// the code objects its bundles list, from their headers alone (a
/// compressed bundle's first bytes decompressed). Binaries are numbered by
/// it (see `input::order`).
pub fn device_bytes(path: &Path, fat: &FatBinary) -> Result<BTreeMap<String, u64>, SplitError> {
    let bad = |why: String| SplitError::Binary { file: path.to_path_buf(), why };
    let file = File::open(path).map_err(|e| SplitError::io(path, e))?;
    let end = fat.fatbin_offset + fat.fatbin_size;
    let mut seen = std::collections::BTreeSet::new();
    let mut total: BTreeMap<String, u64> = BTreeMap::new();
    for (i, &at) in fat.wrappers.iter().enumerate() {
        if !seen.insert(at) {
            continue;
        }
        let start = fat.fatbin_offset + at;
        let mut r = std::io::BufReader::with_capacity(64 << 10, Range { file: &file, pos: start.min(end), end });
        let mut magic = [0u8; 24];
        let n = (end - start.min(end)).min(24) as usize;
        file.read_exact_at(&mut magic[..n], start).map_err(|e| SplitError::io(path, e))?;
        let listed = if magic.starts_with(bundle::MAGIC) {
            bundle::entries(&mut r, Some(end - start))
        } else if magic.starts_with(compressed::MAGIC) {
            compressed::entries(&mut r)
        } else {
            return Err(bad(format!(
                "wrapper {i} points at offset {at:#x} of .hip_fatbin, where no offload bundle starts"
            )));
        };
        let entries =
            listed.map_err(|e| bad(format!("the bundle of wrapper {i} (offset {at:#x} of .hip_fatbin): {e}")))?;
        for e in entries {
            let Some(id) = EntryId::parse(&e.id) else { continue };
            if id.is_host() || e.size == 0 {
                continue;
            }
            if let Ok(t) = TargetId::parse(&id.target) {
                *total.entry(t.to_string()).or_default() += e.size;
            }
        }
    }
    Ok(total)
}

/// Bytes `pos..end` of a file, read with positional reads.
struct Range<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for Range<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = (buf.len() as u64).min(self.end - self.pos) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// A compressed bundle's bytes (its header says how many; a version 1
/// header does not, so the rest of the section is taken).
fn read_compressed(file: &File, start: u64, end: u64) -> std::io::Result<Vec<u8>> {
    let mut head = vec![0u8; (end - start).min(32) as usize];
    file.read_exact_at(&mut head, start)?;
    let total = match compressed::parse_header(&head) {
        Ok(h) => h.total_size.unwrap_or(end - start).min(end - start),
        Err(_) => end - start,
    };
    let mut whole = vec![0u8; total as usize];
    file.read_exact_at(&mut whole, start)?;
    Ok(whole)
}

/// One bundle entry: into its architecture's archive (returned: the
/// architecture, ordinal and size), or skipped (host code, left out).
fn take(
    e: &Entry,
    r: &mut dyn Read,
    key: &str,
    archives: &mut Archives,
    keep: &mut dyn FnMut(&TargetId) -> bool,
    code: &mut BinaryCode,
) -> Result<Option<(String, u32, u64)>, SplitError> {
    let bad = |why: String| SplitError::Entry { key: key.to_string(), id: e.id.clone(), why };
    let id = EntryId::parse(&e.id).ok_or_else(|| bad("not a `KIND-TRIPLE--TARGET` bundle entry id".into()))?;
    if id.is_host() || e.size == 0 {
        return Ok(None);
    }
    if !id.triple.starts_with("amdgcn") {
        return Err(bad(format!(
            "code for `{}` cannot be split out: the runtime's kpack lookup asks only for AMDGPU targets",
            id.triple
        )));
    }
    let target = TargetId::parse(&id.target).map_err(|err| bad(err.to_string()))?;
    if !keep(&target) {
        return Ok(None);
    }
    let arch = target.to_string();
    let path = archives.dir.join(format!("{}_{arch}.kpack", archives.group));
    let ordinal = archives.writer(&arch)?.add(key, r, e.size).map_err(|err| SplitError::io(&path, err))?;
    *code.code_objects.entry(arch.clone()).or_default() += 1;
    Ok(Some((arch, ordinal, e.size)))
}
