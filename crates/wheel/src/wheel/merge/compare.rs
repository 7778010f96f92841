//! Are two shards' host parts the same? Byte for byte, streamed: plain
//! files as they are, fat binaries as the split rewrites them. When two
//! rewritten binaries differ, the difference is located for the error:
//! the ELF header, the program headers, or the first section (in section
//! header order) whose header or bytes differ.

use crate::splice::Splice;
use std::io::{self, Read};
use std::path::Path;

/// Equal streams, read in pieces (neither is held whole).
fn same_stream(mut a: impl Read, mut b: impl Read) -> io::Result<bool> {
    let (mut x, mut y) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = read_full(&mut a, &mut x)?;
        let m = read_full(&mut b, &mut y)?;
        if n != m || x[..n] != y[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

pub fn same_file(a: &Path, b: &Path) -> io::Result<bool> {
    let (ma, mb) = (std::fs::metadata(a)?, std::fs::metadata(b)?);
    if ma.len() != mb.len() {
        return Ok(false);
    }
    same_stream(std::fs::File::open(a)?, std::fs::File::open(b)?)
}

pub fn same_splice(a: &Splice, b: &Splice) -> io::Result<bool> {
    Ok(a.len() == b.len() && same_stream(a.reader(), b.reader())?)
}

/// Where two ELF files first differ, in words: `section .text differs
/// first (its bytes); also .eh_frame`, `program header 3 (...)`, ...
pub fn first_difference(a: &Path, b: &Path) -> io::Result<String> {
    use object::read::elf::{ElfFile64, FileHeader, ProgramHeader, SectionHeader};
    use object::{Endianness, Object, ObjectSection};
    let (da, db) = (std::fs::read(a)?, std::fs::read(b)?);
    let (Ok(fa), Ok(fb)) = (ElfFile64::<Endianness>::parse(&*da), ElfFile64::<Endianness>::parse(&*db)) else {
        return Ok(byte_difference(&da, &db));
    };
    let e = fa.endian();
    // Every differing section, in section header order. The build id is
    // derived from the rest: named first only when nothing else differs.
    let mut differing: Vec<(String, &str, bool)> = Vec::new();
    for (sa, sb) in fa.sections().zip(fb.sections()) {
        let name = sa.name().unwrap_or("?").to_string();
        let (xa, xb) = (sa.elf_section_header(), sb.elf_section_header());
        let shape = |s: &object::elf::SectionHeader64<Endianness>| {
            (s.sh_type(e), s.sh_flags(e), s.sh_addr(e), s.sh_size(e), s.sh_link(e), s.sh_info(e))
        };
        let code = xa.sh_flags(e).0 & object::elf::SHF_EXECINSTR.0 != 0;
        if sa.name().ok() != sb.name().ok() || shape(xa) != shape(xb) {
            differing.push((name, "its header: type, address or size", code));
        } else if sa.data().unwrap_or_default() != sb.data().unwrap_or_default() {
            differing.push((name, "its bytes", code));
        }
    }
    let derived = |n: &str| n == ".note.gnu.build-id";
    let first = differing.iter().position(|(n, _, _)| !derived(n)).or((!differing.is_empty()).then_some(0));
    if let Some(i) = first {
        let (name, what, _) = &differing[i];
        let others = differing.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, d)| d);
        let code: Vec<&str> = others.clone().filter(|d| d.2).map(|d| d.0.as_str()).collect();
        let rest = others.filter(|d| !d.2).count();
        let mut said = format!("section {name} differs first ({what})");
        if !code.is_empty() {
            said.push_str(&format!("; code differs too: {}", code.join(", ")));
        }
        if rest > 0 {
            said.push_str(&format!("; {rest} other section(s) differ"));
        }
        return Ok(said);
    }
    // Sections alike: the segments or the header say where.
    let (ha, hb) = (fa.elf_header(), fb.elf_header());
    let header_fields = |h: &object::elf::FileHeader64<Endianness>| {
        (h.e_type(e), h.e_machine(e), h.e_entry(e), h.e_phnum(e), h.e_shnum(e), h.e_shstrndx(e), h.e_flags(e))
    };
    if header_fields(ha) != header_fields(hb) {
        return Ok("the ELF header (type, entry point or table sizes)".into());
    }
    let (pa, pb) = (fa.elf_program_headers(), fb.elf_program_headers());
    let segment =
        |p: &object::elf::ProgramHeader64<Endianness>| (p.p_type(e), p.p_flags(e), p.p_vaddr(e), p.p_memsz(e));
    if let Some(i) = (0..pa.len().min(pb.len())).find(|&i| segment(&pa[i]) != segment(&pb[i])) {
        return Ok(format!("program header {i} (a segment's address, size or flags)"));
    }
    Ok(byte_difference(&da, &db))
}

fn byte_difference(a: &[u8], b: &[u8]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(at) => format!("the bytes at file offset {at:#x}"),
        None => format!("the length ({} and {} bytes)", a.len(), b.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_compare_by_content_and_length() {
        assert!(same_stream(&b"abc"[..], &b"abc"[..]).unwrap());
        assert!(!same_stream(&b"abc"[..], &b"abd"[..]).unwrap());
        assert!(!same_stream(&b"abc"[..], &b"abcd"[..]).unwrap());
        let big = vec![7u8; 200_000];
        let mut other = big.clone();
        other[150_000] = 8;
        assert!(same_stream(&big[..], &big[..]).unwrap());
        assert!(!same_stream(&big[..], &other[..]).unwrap());
    }

    #[test]
    fn a_difference_is_named_by_section() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("a.c");
        let build = |name: &str, value: &str| {
            std::fs::write(&src, format!("int f(int x) {{ return x * {value}; }}\n")).unwrap();
            let out = d.path().join(name);
            let ok = std::process::Command::new("cc")
                .args(["-O2", "-shared", "-fPIC", "-Wl,--build-id=none", "-o"])
                .arg(&out)
                .arg(&src)
                .status()
                .is_ok_and(|s| s.success());
            ok.then_some(out)
        };
        let (Some(a), Some(b)) = (build("a.so", "3"), build("b.so", "5")) else {
            assert!(std::env::var_os("CI").is_none(), "CI is set but `cc` cannot build the fixture");
            return;
        };
        let said = first_difference(&a, &b).unwrap();
        assert!(said.starts_with("section .text differs first (its bytes)"), "{said}");
        assert_eq!(byte_difference(b"ab", b"abc"), "the length (2 and 3 bytes)");
    }
}
