//! The GNU build-id of a rewritten host binary (tail layout only).
//!
//! ld's build-id hashed its whole output, device code included, and the
//! device code is no longer in the file: the id would name a file that
//! does not exist, and two shard builds with identical host parts would
//! still differ by it. The recomputed id names the host binary: the SHA-1
//! of the whole output with the descriptor's bytes zeroed, so shard builds
//! with identical host parts get the same id. A descriptor shorter than 20
//! bytes (ld's `--build-id=md5` is 16, some tools use 8) takes the digest's
//! first bytes; a longer one (none in practice) takes the digest followed
//! by the SHA-1 of the digest, of that, and so on.
//!
//! The output is streamed (1 MiB at a time), never held in memory.

use super::raw::*;
use crate::splice::Splice;
use sha1::{Digest, Sha1};
use std::io;

/// `n_type` of a GNU build-id note.
const NT_GNU_BUILD_ID: u32 = 3;

/// Note sections larger than this are not searched (a build-id note section is 36 bytes).
const MAX_NOTES: u64 = 1 << 20;

/// The output offset and length of the descriptor of the first GNU
/// build-id note (name "GNU", type 3) in the SHT_NOTE sections among
/// `sections` (whose offsets are `out`'s).
pub(super) fn find(out: &Splice, sections: &[Shdr]) -> io::Result<Option<(u64, u64)>> {
    for s in sections.iter().filter(|s| s.sh_type == SHT_NOTE && s.in_file() && s.sh_size <= MAX_NOTES) {
        let mut notes = vec![0u8; s.sh_size as usize];
        out.read_at(s.sh_offset, &mut notes)?;
        let align = if s.sh_addralign == 8 { 8 } else { 4 };
        let mut at = 0u64;
        let len = notes.len() as u64;
        while at + 12 <= len {
            let (namesz, descsz) = (u64::from(u32_at(&notes, at as usize)), u64::from(u32_at(&notes, at as usize + 4)));
            let kind = u32_at(&notes, at as usize + 8);
            let name = at + 12;
            let desc = name + namesz.next_multiple_of(align);
            let next = desc + descsz.next_multiple_of(align);
            if desc + descsz > len {
                break;
            }
            if kind == NT_GNU_BUILD_ID && notes[name as usize..(name + namesz) as usize] == *b"GNU\0" && descsz > 0 {
                return Ok(Some((s.sh_offset + desc, descsz)));
            }
            at = next;
        }
    }
    Ok(None)
}

/// Write the recomputed build-id into the `len`-byte descriptor at `at`.
pub(super) fn recompute(out: &mut Splice, at: u64, len: u64) -> io::Result<()> {
    out.overwrite(at, vec![0; len as usize]);
    let digest = sha1(out)?;
    out.overwrite(at, expand(digest, len as usize));
    Ok(())
}

/// The SHA-1 of every byte of `out`.
fn sha1(out: &Splice) -> io::Result<[u8; 20]> {
    let mut hasher = Sha1::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < out.len() {
        let n = (out.len() - at).min(buf.len() as u64) as usize;
        out.read_at(at, &mut buf[..n])?;
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hasher.finalize().into())
}

/// `len` bytes: the digest's first, or the digest, its SHA-1, that's SHA-1...
fn expand(digest: [u8; 20], len: usize) -> Vec<u8> {
    let mut out = digest.to_vec();
    let mut last = digest;
    while out.len() < len {
        last = Sha1::digest(last).into();
        out.extend_from_slice(&last);
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_descriptor_chains_digests_and_a_short_one_takes_the_first_bytes() {
        let d: [u8; 20] = Sha1::digest(b"host").into();
        assert_eq!(expand(d, 16), d[..16]);
        let long = expand(d, 45);
        let d2: [u8; 20] = Sha1::digest(d).into();
        let d3: [u8; 20] = Sha1::digest(d2).into();
        assert_eq!(long, [&d[..], &d2[..], &d3[..5]].concat());
    }
}
