//! The stat memo on disk (one postcard file per source) and the table it
//! loads into for lookups by path.

use super::{FileDigest, StatFingerprint};
use serde::{Deserialize, Serialize};
use std::cell::Cell;

#[derive(Serialize, Deserialize)]
pub(super) struct MemoFile {
    pub(super) version: u32,
    pub(super) entries: Vec<MemoEntry>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct MemoEntry {
    /// The path relative to the source.
    pub(super) path: Vec<u8>,
    pub(super) stat: StatFingerprint,
    pub(super) sha256: [u8; 32],
    pub(super) capability: Option<Vec<u8>>,
}

/// The memo as loaded, sorted by path. A scan lists its files in path
/// order, so lookups follow a cursor and rarely search: a hash map of tens
/// of thousands of paths cost more to build than its lookups saved.
#[derive(Default)]
pub(super) struct Memo {
    entries: Vec<(Vec<u8>, StatFingerprint, FileDigest)>,
    /// Where the next lookup most likely is: after the last one found.
    next: Cell<usize>,
}

impl Memo {
    pub(super) fn new(mut entries: Vec<(Vec<u8>, StatFingerprint, FileDigest)>) -> Memo {
        if !entries.is_sorted_by(|a, b| a.0 <= b.0) {
            entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
        Memo { entries, next: Cell::new(0) }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn get(&self, path: &[u8]) -> Option<(&StatFingerprint, &FileDigest)> {
        let hint = self.next.get();
        let at = if self.entries.get(hint).is_some_and(|e| e.0 == path) {
            Some(hint)
        } else {
            self.entries.binary_search_by(|e| e.0.as_slice().cmp(path)).ok()
        };
        let i = at?;
        self.next.set(i + 1);
        let (_, stat, digest) = &self.entries[i];
        Some((stat, digest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lookups find every entry in any order (a memo written in another
    /// order is sorted on load), and nothing else.
    #[test]
    fn memo_lookups_follow_the_scan_and_still_find_anything() {
        let fp = |n: u64| StatFingerprint {
            size: n,
            mtime: 0,
            mtime_nsec: 0,
            ctime: 0,
            ctime_nsec: 0,
            ino: n,
            dev: 1,
            mode: 0,
        };
        let d = |n: u8| FileDigest { sha256: [n; 32], capability: None };
        let names: Vec<Vec<u8>> =
            ["b/x", "a", "b", "a.txt", "b/a", "c"].iter().map(|n| n.as_bytes().to_vec()).collect();
        let memo = Memo::new(names.iter().enumerate().map(|(i, n)| (n.clone(), fp(i as u64), d(i as u8))).collect());
        let mut order: Vec<usize> = (0..names.len()).collect();
        order.sort_by(|&a, &b| names[a].cmp(&names[b]));
        for i in order.iter().copied().chain([5, 0, 3, 3, 1]) {
            let (got_fp, got) = memo.get(&names[i]).unwrap();
            assert_eq!((*got_fp, got), (fp(i as u64), &d(i as u8)), "{}", String::from_utf8_lossy(&names[i]));
        }
        for absent in ["", "a/", "b/y", "d", "0"] {
            assert!(memo.get(absent.as_bytes()).is_none(), "{absent}");
        }
    }
}
