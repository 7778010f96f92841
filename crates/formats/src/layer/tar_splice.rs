//! A tree as a tar described by parts (a [`Splice`]) rather than written
//! out: the headers are small byte blocks, each file's content is a range
//! of its source (or an edited file's own splice). The tar can then be
//! streamed into an archive without being written to disk first (the
//! devel package's `_devel.tar`). Same bytes as [`super::write::write_tar`].

use super::tree::{Content, Kind, Tree};
use super::write::{header_for, WriteError, WriteOptions};
use crate::splice::{Splice, SpliceWriter};
use std::io::{self, Write};
use std::path::Path;

/// The tar of `tree`; `host_file(path, size)` gives the content of a host
/// file entry (by default [`Splice::unopened`]: read when the tar is).
pub fn tar_splice(
    tree: &Tree,
    opts: &WriteOptions,
    host_file: &dyn Fn(&Path, u64) -> Splice,
) -> Result<Splice, WriteError> {
    let mut b = tar::Builder::new(SpliceWriter::default());
    for (path, node) in tree.iter() {
        let (header, pax) = header_for(path, node, opts);
        if !pax.is_empty() {
            b.append_pax_extensions(pax.iter().map(|(k, v)| (k.as_str(), v.as_slice())))?;
        }
        let Kind::File { size, content } = &node.kind else {
            b.append(&header, io::empty())?;
            continue;
        };
        let w = b.get_mut();
        w.write_all(header.as_bytes())?;
        match content {
            Content::Host(p) | Content::HostToHash(p) => {
                let s = host_file(p, *size);
                if s.len() != *size {
                    return Err(WriteError::Changed { source_path: p.display().to_string(), expected: *size });
                }
                w.append(&s);
            }
            Content::Bytes(bytes) => w.write_all(bytes)?,
            Content::Slice { file, offset } => w.append(&Splice::unopened_range(file, *offset, *size)),
        }
        let tail = (*size % 512) as usize;
        if tail != 0 {
            w.write_all(&[0u8; 512][..512 - tail])?;
        }
    }
    Ok(b.into_inner()?.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::tree::Node;
    use std::io::Read;

    #[test]
    fn same_bytes_as_the_tar_writer() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("lib.so");
        std::fs::write(&host, vec![7u8; 1000]).unwrap();
        let mut t = Tree::new();
        let size = 1000;
        t.insert(b"d/lib.so".to_vec(), Node::new(Kind::File { size, content: Content::Host(host.clone()) }, 0o755))
            .unwrap();
        t.insert(format!("d/{}", "long".repeat(40)).into_bytes(), Node::bytes(b"x".to_vec(), 0o644)).unwrap();
        t.insert(b"d/link".to_vec(), Node::new(Kind::Symlink(b"lib.so".to_vec()), 0o777)).unwrap();
        let opts = WriteOptions { source_date_epoch: 5 };
        let written = crate::layer::write::write_tar(&t, Vec::new(), &opts, &mut |_| {}).unwrap();
        let spliced = tar_splice(&t, &opts, &|p, n| Splice::unopened(p, n)).unwrap();
        let mut got = Vec::new();
        spliced.reader().read_to_end(&mut got).unwrap();
        assert!(got == written, "the spliced tar differs from the written one");
        let short = tar_splice(&t, &opts, &|p, n| Splice::unopened(p, n - 1));
        assert!(matches!(short, Err(WriteError::Changed { .. })));
    }
}
