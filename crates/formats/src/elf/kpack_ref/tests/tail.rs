//! The tail layout: shard builds of the fixture linked with
//! [`FATBIN_LAST_LINK_SCRIPT`], with fatbins of different sizes and
//! contents, kpack to the same bytes, which load and read the marker.

use super::*;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, Sym};
use sha1::{Digest, Sha1};

type Elf = object::elf::FileHeader64<object::LittleEndian>;
const E: object::LittleEndian = object::LittleEndian;

/// Another shard's fatbin: 9 pages and 7 bytes, other content.
const OTHER_SHARD: [&str; 2] = ["-DFATBIN_LEN=(9 * PG + 7)", "-DFATBIN_INIT=\"__CLANG_OFFLOAD_BUNDLE__gfx1100\""];

/// The link script written in `dir`, as a `cc` argument.
fn script(dir: &Path) -> String {
    let path = dir.join("fatbin_last.ld");
    std::fs::write(&path, FATBIN_LAST_LINK_SCRIPT).unwrap();
    format!("-Wl,-T,{}", path.display())
}

/// Build two shards of the fixture with `args` and the script: the default
/// fatbin and [`OTHER_SHARD`]'s. None when there is no compiler.
fn shards(dir: &Path, name: &str, args: &[&str]) -> Option<[PathBuf; 2]> {
    let script = script(dir);
    let mut all: Vec<&str> = args.to_vec();
    all.push(&script);
    let first = build(dir, &format!("{name}.1"), &all)?;
    all.extend_from_slice(&OTHER_SHARD);
    let second = build(dir, &format!("{name}.2"), &all)?;
    Some([first, second])
}

/// Section `name`'s header in `data`.
fn section<'a>(data: &'a [u8], name: &str) -> &'a object::elf::SectionHeader64<object::LittleEndian> {
    let h = Elf::parse(data).unwrap();
    h.sections(E, data).unwrap().section_by_name(E, name.as_bytes()).unwrap().1
}

/// Symbol `name`'s value and size in the symbol table of type `kind`.
fn symbol(data: &[u8], kind: object::elf::SectionType, name: &str) -> Option<(u64, u64)> {
    let h = Elf::parse(data).unwrap();
    let table = h.sections(E, data).unwrap().symbols(E, data, kind).unwrap();
    let found = table.iter().find(|s| s.name(E, table.strings()) == Ok(name.as_bytes()));
    found.map(|s| (s.st_value(E), s.st_size(E)))
}

/// The GNU build-id descriptor's offset and bytes.
fn build_id(data: &[u8]) -> (usize, Vec<u8>) {
    let s = section(data, ".note.gnu.build-id");
    let note = &data[s.sh_offset(E) as usize..][..s.sh_size(E) as usize];
    assert_eq!(note[..4], 4u32.to_le_bytes());
    assert_eq!(note[8..16], [3, 0, 0, 0, b'G', b'N', b'U', 0]);
    let len = u32::from_le_bytes(note[4..8].try_into().unwrap()) as usize;
    (s.sh_offset(E) as usize + 16, note[16..16 + len].to_vec())
}

/// Kpack a shard and check what the tail layout made of it; the output.
fn kpack_shard(path: &Path) -> Vec<u8> {
    let input = std::fs::read(path).unwrap();
    let fat = read_fat_binary(path).unwrap().unwrap();
    let k = kpack_host_layout(path, &marker()).unwrap();
    assert_eq!(k.layout, KpackLayout::Tail);
    assert!(!k.table_moved);
    assert_eq!(k.removed, fat.fatbin_size);
    // The fatbin starts its own PT_LOAD, which is the marker's now.
    assert_eq!(k.marker_vaddr, fat.fatbin_vaddr);
    assert_eq!(k.marker_offset, fat.fatbin_offset);
    let out = bytes(&k.splice);
    check_structure(&input, &out, &k, false);
    assert!(out.len() < input.len() - fat.fatbin_size as usize + 0x100);

    // `.hip_fatbin`: no bytes, its address, at the marker's offset.
    let s = section(&out, ".hip_fatbin");
    assert_eq!((s.sh_type(E), s.sh_size(E)), (object::elf::SHT_NOBITS, 0));
    assert_eq!((s.sh_addr(E), s.sh_offset(E)), (fat.fatbin_vaddr, k.marker_offset));
    // As many program headers; the last PT_LOAD maps the marker, read-only.
    let (h, ih) = (Elf::parse(&*out).unwrap(), Elf::parse(&*input).unwrap());
    let phdrs = h.program_headers(E, &*out).unwrap();
    assert_eq!(phdrs.len(), ih.program_headers(E, &*input).unwrap().len());
    let load = phdrs.iter().rfind(|p| p.p_type(E) == object::elf::PT_LOAD).unwrap();
    let len = marker().to_msgpack().len() as u64;
    let got = (load.p_offset(E), load.p_vaddr(E), load.p_filesz(E), load.p_memsz(E), load.p_flags(E));
    assert_eq!(got, (k.marker_offset, k.marker_vaddr, len, len, object::elf::PF_R));
    // Before the marker, the sections keep their bytes, but for those the
    // rewrite edits: the wrappers, their RELA entries, `.dynsym`'s sizes
    // and the build-id.
    let isections = ih.sections(E, &*input).unwrap();
    let edited: [&[u8]; 4] = [b".hipFatBinSegment", b".rela.dyn", b".dynsym", b".note.gnu.build-id"];
    for s in isections.iter().filter(|s| s.sh_type(E) != object::elf::SHT_NOBITS && s.sh_offset(E) < k.marker_offset) {
        let (at, len) = (s.sh_offset(E) as usize, s.sh_size(E) as usize);
        if !edited.contains(&isections.section_name(E, s).unwrap()) {
            assert!(out[at..at + len] == input[at..at + len], "section at {at:#x}");
        }
    }
    // The sections after the marker: their bytes, in their order, each at
    // its alignment after the one before; the section header table last.
    let sections = h.sections(E, &*out).unwrap();
    let mut after: Vec<_> = sections
        .iter()
        .filter(|s| s.sh_type(E) != object::elf::SHT_NOBITS && s.sh_offset(E) > k.marker_offset)
        .collect();
    after.sort_by_key(|s| s.sh_offset(E));
    let mut end = k.marker_offset + len;
    for s in &after {
        let name = sections.section_name(E, s).unwrap();
        assert_eq!(s.sh_offset(E), end.next_multiple_of(s.sh_addralign(E).max(1)), "{}", String::from_utf8_lossy(name));
        // `.symtab` has its fatbin symbols changed (checked below).
        if name != b".shstrtab" && name != b".symtab" {
            let old = section(&input, std::str::from_utf8(name).unwrap());
            assert!(s.data(E, &*out).unwrap() == old.data(E, &*input).unwrap(), "{}", String::from_utf8_lossy(name));
        }
        end = s.sh_offset(E) + s.sh_size(E);
    }
    assert_eq!(h.e_shoff(E), end.next_multiple_of(8));

    // Symbols in `.hip_fatbin` are empty at its address.
    assert_eq!(symbol(&out, object::elf::SHT_SYMTAB, "fatbin"), Some((fat.fatbin_vaddr, 0)));
    if symbol(&input, object::elf::SHT_DYNSYM, "fatbin").is_some() {
        assert_eq!(symbol(&out, object::elf::SHT_DYNSYM, "fatbin"), Some((fat.fatbin_vaddr, 0)));
    }
    // A new build-id: the SHA-1 of the output with the descriptor zeroed.
    let (at, id) = build_id(&out);
    assert_ne!(id, build_id(&input).1);
    let mut zeroed = out.clone();
    zeroed[at..at + id.len()].fill(0);
    assert_eq!(id, Sha1::digest(&zeroed)[..id.len()]);
    out
}

/// Kpack both shards: the same bytes, written next to the first; its path
/// and what `report` prints for it.
fn kpack_shards(dir: &Path, [first, second]: &[PathBuf; 2]) -> (PathBuf, String) {
    let (a, b) = (std::fs::read(first).unwrap(), std::fs::read(second).unwrap());
    assert_ne!(a.len(), b.len());
    let one = kpack_shard(first);
    assert!(one == kpack_shard(second), "shards with the same host parts kpack to different bytes");
    let path = dir.join(format!("{}.kpacked", first.file_name().unwrap().to_string_lossy()));
    std::fs::write(&path, &one).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    crate::elf::verify(&path).unwrap();
    // To look at the shards and their rewrite with readelf: KPACK_DEBUG_DIR=/some/dir.
    if let Some(d) = std::env::var_os("KPACK_DEBUG_DIR") {
        for p in [first, second, &path] {
            std::fs::copy(p, Path::new(&d).join(p.file_name().unwrap())).unwrap();
        }
    }
    let k = kpack_host_layout(first, &marker()).unwrap();
    (path, expected_report(&k, segment_vaddr(&one)))
}

#[test]
fn shard_libraries_linked_fatbin_last_kpack_to_the_same_bytes_and_load() {
    let mut variants = vec![vec!["-DFATBIN_LINKAGE="], vec!["-DFATBIN_LINKAGE=static"]];
    if ld_packs_relative_relocs() {
        variants.push(vec!["-DFATBIN_LINKAGE=static", "-Wl,-z,pack-relative-relocs"]);
    }
    for args in variants {
        let dir = tempfile::tempdir().unwrap();
        let mut all = vec!["-shared", "-fPIC", "-Wl,--build-id=sha1"];
        all.extend_from_slice(&args);
        let Some(shards) = shards(dir.path(), "libfixture.so", &all) else {
            return;
        };
        // An exported fatbin array is in `.dynsym` too, sized.
        let exported = symbol(&std::fs::read(&shards[0]).unwrap(), object::elf::SHT_DYNSYM, "fatbin");
        assert_eq!(exported.is_some(), args[0] == "-DFATBIN_LINKAGE=", "{args:?}");
        let (out, expected) = kpack_shards(dir.path(), &shards);
        if let Some(report) = dlopen_report(&out) {
            assert_eq!(report, expected, "{args:?}");
        }
    }
}

#[test]
fn shard_executables_linked_fatbin_last_kpack_to_the_same_bytes_and_run() {
    let n = marker().to_msgpack().len().to_string();
    for args in [["-fPIE", "-pie"], ["-fno-PIE", "-no-pie"]] {
        let dir = tempfile::tempdir().unwrap();
        // An md5 build-id: 16 bytes, the digest's first.
        let mut all = vec!["-DMAIN", "-DFATBIN_LINKAGE=", "-Wl,--build-id=md5"];
        all.extend_from_slice(&args);
        let Some(shards) = shards(dir.path(), "fixture", &all) else {
            return;
        };
        // ld sets `_end` after the fatbin; the rewrite puts it at its start.
        let fat = read_fat_binary(&shards[0]).unwrap().unwrap();
        let end = symbol(&std::fs::read(&shards[0]).unwrap(), object::elf::SHT_SYMTAB, "_end").unwrap();
        assert!(end.0 >= fat.fatbin_vaddr + fat.fatbin_size, "{end:?}");
        let (out, expected) = kpack_shards(dir.path(), &shards);
        let data = std::fs::read(&out).unwrap();
        assert_eq!(symbol(&data, object::elf::SHT_SYMTAB, "_end"), Some((fat.fatbin_vaddr, 0)));
        assert_eq!(build_id(&data).1.len(), 16);
        assert_eq!(run(Command::new(&out).arg(&n)), expected, "{args:?}");
    }
}

#[test]
fn a_default_link_takes_the_middle_layout() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lib) = build(dir.path(), "libfixture.so", &["-shared", "-fPIC", "-DFATBIN_LINKAGE=static"]) else {
        return;
    };
    let k = kpack_host_layout(&lib, &marker()).unwrap();
    assert_eq!(k.layout, KpackLayout::Middle);
}

#[test]
fn corrupted_tail_headers_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path());
    let args = ["-shared", "-fPIC", "-DFATBIN_LINKAGE=", "-Wl,--build-id=sha1", &script];
    let Some(lib) = build(dir.path(), "libfuzz.so", &args) else {
        return;
    };
    assert_eq!(kpack_host_layout(&lib, &marker()).unwrap().layout, KpackLayout::Tail);
    mutate_headers(dir.path(), &lib);
    // And the build-id note.
    let good = std::fs::read(&lib).unwrap();
    let s = section(&good, ".note.gnu.build-id");
    let path = dir.path().join("note.so");
    for at in s.sh_offset(E) as usize..(s.sh_offset(E) + s.sh_size(E)) as usize {
        for value in [0xff, good[at] ^ 0x10, 0] {
            let mut bad = good.clone();
            bad[at] = value;
            std::fs::write(&path, &bad).unwrap();
            if let Err(e) = kpack_host(&path, &marker()) {
                assert!(e.to_string().contains("note.so"), "{e}");
            }
        }
    }
}
