//! Placing new strings in the dynamic string table: reuse an existing
//! `new\0`, overwrite the old string in place when the new one fits and
//! nothing else points into it, or append to a grown table.

use super::input::{Input, Site};

/// The string table as it will be written.
pub(super) struct Strings {
    /// The original table with the in-place writes applied (searched for
    /// existing strings; written out only through `writes`).
    pub current: Vec<u8>,
    /// In-place writes, as (offset in the table, bytes).
    pub writes: Vec<(u64, Vec<u8>)>,
    /// Strings appended after the original table (NUL-terminated).
    pub appended: Vec<u8>,
    /// Where each reference points now.
    pub refs: Vec<(Site, u64)>,
    refs_complete: bool,
}

impl Strings {
    pub fn new(input: &Input) -> Strings {
        Strings {
            current: input.dynstr.clone(),
            writes: Vec::new(),
            appended: Vec::new(),
            refs: input.refs.clone(),
            refs_complete: input.refs_complete,
        }
    }

    /// Point `site` at offset `at`.
    pub fn repoint(&mut self, site: Site, at: u64) {
        self.refs.retain(|(s, _)| *s != site);
        self.refs.push((site, at));
    }

    /// The offset of `new` in the final table. `replacing` is the offset of
    /// the string `site` points at now, which may be overwritten in place.
    pub fn place(&mut self, new: &str, replacing: Option<(u64, Site)>) -> u64 {
        let mut needle = new.as_bytes().to_vec();
        needle.push(0);
        if let Some(at) = memchr::memmem::find(&self.current, &needle) {
            return at as u64;
        }
        if let Some((old, site)) = replacing {
            if let Some(at) = self.in_place(&needle, old, site) {
                return at;
            }
        }
        let base = self.current.len() as u64;
        if let Some(at) = memchr::memmem::find(&self.appended, &needle) {
            return base + at as u64;
        }
        let at = base + self.appended.len() as u64;
        self.appended.extend_from_slice(&needle);
        at
    }

    /// Overwrite the string at `old` (NUL padded) when `needle` fits and no
    /// reference but `site` points into its bytes or into a string that
    /// runs into them.
    fn in_place(&mut self, needle: &[u8], old: u64, site: Site) -> Option<u64> {
        if !self.refs_complete {
            return None;
        }
        let start = usize::try_from(old).ok()?;
        let old_len = memchr::memchr(0, self.current.get(start..)?)?;
        if needle.len() - 1 > old_len {
            return None;
        }
        let run_start = memchr::memrchr(0, &self.current[..start]).map_or(0, |n| n + 1) as u64;
        let end = old + old_len as u64;
        if self.refs.iter().any(|&(s, r)| s != site && (run_start..end).contains(&r)) {
            return None;
        }
        let mut bytes = needle.to_vec();
        bytes.resize(old_len + 1, 0);
        self.current[start..start + bytes.len()].copy_from_slice(&bytes);
        self.writes.push((old, bytes));
        Some(old)
    }
}
