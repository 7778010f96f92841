//! Where two versions of one file differ, said the way its format is
//! read: for ELF files the first section whose bytes differ (diffoscope's
//! readelf and objdump view), for zip archives the first member and which
//! of its header fields or its content, for text the first differing line,
//! for anything else the first differing byte.

use object::{Object, ObjectSection};
use serde::Serialize;
use std::io::Read;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Detail {
    /// `section` holds the first differing byte, `offset` bytes into it;
    /// a section only one file has, or the headers, when no section does.
    Elf {
        section: String,
        offset: u64,
    },
    /// The first member that differs and what about it (`content`,
    /// `compression`, `mtime`, `mode`, `crc32`, `size`, `added`, `removed`, `order`).
    Zip {
        member: String,
        field: String,
    },
    /// The first differing line (1-based), each side's text of it.
    Text {
        line: usize,
        given: String,
        rebuilt: String,
    },
    Bytes {
        offset: u64,
    },
}

impl std::fmt::Display for Detail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Detail::Elf { section, offset } => write!(f, "ELF section {section} differs at offset {offset:#x} in it"),
            Detail::Zip { member, field } => write!(f, "zip member {member}: {field} differs"),
            Detail::Text { line, given, rebuilt } => {
                write!(f, "line {line} differs: {given:?} (given) vs {rebuilt:?} (rebuilt)")
            }
            Detail::Bytes { offset } => write!(f, "first differing byte at offset {offset:#x}"),
        }
    }
}

/// How `given` differs from `rebuilt`; None when they are equal.
pub fn explain(given: &[u8], rebuilt: &[u8]) -> Option<Detail> {
    if given == rebuilt {
        return None;
    }
    if given.starts_with(b"\x7fELF") && rebuilt.starts_with(b"\x7fELF") {
        if let Some(d) = elf(given, rebuilt) {
            return Some(d);
        }
    }
    if given.starts_with(b"PK\x03\x04") && rebuilt.starts_with(b"PK\x03\x04") {
        if let Some(d) = zip(given, rebuilt) {
            return Some(d);
        }
    }
    if let (Some(a), Some(b)) = (text(given), text(rebuilt)) {
        return Some(first_line(a, b));
    }
    Some(Detail::Bytes { offset: first_byte(given, rebuilt) as u64 })
}

fn first_byte(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()))
}

fn text(b: &[u8]) -> Option<&str> {
    if b.contains(&0) {
        return None;
    }
    std::str::from_utf8(b).ok()
}

fn first_line(a: &str, b: &str) -> Detail {
    let clip = |s: &str| s.chars().take(200).collect::<String>();
    let (mut la, mut lb) = (a.lines(), b.lines());
    let mut line = 0;
    loop {
        line += 1;
        match (la.next(), lb.next()) {
            (Some(x), Some(y)) if x == y => continue,
            (x, y) => {
                return Detail::Text { line, given: clip(x.unwrap_or("")), rebuilt: clip(y.unwrap_or("")) };
            }
        }
    }
}

/// The first section, in file order, whose bytes differ.
fn elf(a: &[u8], b: &[u8]) -> Option<Detail> {
    let (fa, fb) = (object::File::parse(a).ok()?, object::File::parse(b).ok()?);
    let range = |s: &object::Section| s.file_range().unwrap_or((0, 0));
    let mut sections: Vec<_> = fa.sections().collect();
    sections.sort_by_key(|s| range(s).0);
    for sa in &sections {
        let name = sa.name().unwrap_or("?").to_string();
        let Some(sb) = fb.section_by_name(&name) else {
            return Some(Detail::Elf { section: name, offset: 0 });
        };
        let (da, db) = (sa.data().unwrap_or(&[]), sb.data().unwrap_or(&[]));
        if da != db {
            return Some(Detail::Elf { section: name, offset: first_byte(da, db) as u64 });
        }
    }
    if let Some(extra) = fb.sections().find(|s| fa.section_by_name(s.name().unwrap_or("")).is_none()) {
        return Some(Detail::Elf { section: extra.name().unwrap_or("?").to_string(), offset: 0 });
    }
    // Every section alike: the bytes outside them (headers, padding).
    Some(Detail::Elf { section: "(headers)".into(), offset: first_byte(a, b) as u64 })
}

/// The first member, in the archive's order, that differs.
fn zip(a: &[u8], b: &[u8]) -> Option<Detail> {
    let mut za = zip::ZipArchive::new(std::io::Cursor::new(a)).ok()?;
    let mut zb = zip::ZipArchive::new(std::io::Cursor::new(b)).ok()?;
    let names_b: Vec<String> = zb.file_names().filter_map(|n| n.ok().map(|n| n.to_string())).collect();
    for i in 0..za.len() {
        let (name, fields, content) = {
            let mut m = za.by_index(i).ok()?;
            let fields = member_fields(&m);
            let mut content = Vec::new();
            m.read_to_end(&mut content).ok()?;
            (m.name().ok()?.to_string(), fields, content)
        };
        let member = |field: &str| Some(Detail::Zip { member: name.clone(), field: field.to_string() });
        let Ok(mut mb) = zb.by_name(&name) else { return member("removed") };
        let other = member_fields(&mb);
        for (k, (x, y)) in ["compression", "mtime", "mode", "crc32", "size"].iter().zip(fields.iter().zip(&other)) {
            if x != y {
                return member(k);
            }
        }
        let mut cb = Vec::new();
        mb.read_to_end(&mut cb).ok()?;
        if content != cb {
            return member("content");
        }
        if names_b.get(i) != Some(&name) {
            return member("order");
        }
    }
    if let Some(extra) = names_b.iter().find(|n| za.index_for_name(n).is_none()) {
        return Some(Detail::Zip { member: extra.clone(), field: "added".into() });
    }
    None
}

fn member_fields<R: Read>(m: &zip::read::ZipFile<'_, R>) -> [String; 5] {
    [
        format!("{:?}", m.compression()),
        format!("{:?}", m.last_modified()),
        format!("{:?}", m.unix_mode()),
        format!("{:08x}", m.crc32()),
        m.size().to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_names_the_first_line() {
        let d = explain(b"a\nb\nc\n", b"a\nB\nc\n").unwrap();
        assert_eq!(d, Detail::Text { line: 2, given: "b".into(), rebuilt: "B".into() });
        assert_eq!(explain(b"same", b"same"), None);
    }

    #[test]
    fn bytes_name_the_offset() {
        assert_eq!(explain(b"\x00\x01\x02", b"\x00\x01\x03"), Some(Detail::Bytes { offset: 2 }));
    }

    #[test]
    fn zip_names_the_member_and_field() {
        let make = |content: &[u8], method| {
            let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
            let o = zip::write::SimpleFileOptions::default().compression_method(method);
            w.start_file("a.txt", o).unwrap();
            std::io::Write::write_all(&mut w, b"same").unwrap();
            w.start_file("b.txt", o).unwrap();
            std::io::Write::write_all(&mut w, content).unwrap();
            w.finish().unwrap().into_inner()
        };
        let stored = zip::CompressionMethod::Stored;
        let d = explain(&make(b"one", stored), &make(b"two", stored)).unwrap();
        assert_eq!(d, Detail::Zip { member: "b.txt".into(), field: "crc32".into() });
        let d = explain(&make(b"one", stored), &make(b"one", zip::CompressionMethod::Deflated)).unwrap();
        assert_eq!(d, Detail::Zip { member: "a.txt".into(), field: "compression".into() });
    }
}
