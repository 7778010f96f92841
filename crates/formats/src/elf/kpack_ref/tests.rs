use super::*;
use std::io::Read;
use std::process::Command;

mod tail;

/// The fixture: a 3-page-and-a-bit `.hip_fatbin` starting with a bundle
/// magic (`-DFATBIN_LEN=`, `-DFATBIN_INIT=` change its size and content)
/// and two wrappers (the -fgpu-rdc shape), the second pointing two
/// pages in, and a bss that must stay zeroed memory. `report(n)` prints, per wrapper, its magic, its pointer as an
/// offset from the wrappers, its dummy1 and the first `n` bytes it points at.
const SOURCE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#define PG 4096
#ifndef FATBIN_CONST
#define FATBIN_CONST const
#endif
#ifndef FATBIN_LEN
#define FATBIN_LEN (3 * PG + 100)
#endif
#ifndef FATBIN_INIT
#define FATBIN_INIT "__CLANG_OFFLOAD_BUNDLE__"
#endif
FATBIN_LINKAGE __attribute__((section(".hip_fatbin"), aligned(4096), used))
FATBIN_CONST unsigned char fatbin[FATBIN_LEN] = FATBIN_INIT;
static volatile char bss[3 * PG];
struct wrapper { unsigned magic, version; const void *binary; void *dummy1; };
__attribute__((section(".hipFatBinSegment"), used))
struct wrapper w[2] = {{0x48495046, 1, fatbin, 0}, {0x48495046, 1, fatbin + PG * 2, 0}};
int report(int n) {
    if (bss[0] || bss[sizeof bss - 1]) return 3;
    bss[sizeof bss - 1] = 1;
    for (int i = 0; i < 2; i++) {
        const unsigned char *m = w[i].binary;
        printf("%d %08x %ld %lu ", i, w[i].magic, (long)((const char *)m - (const char *)w), (unsigned long)w[i].dummy1);
        for (int j = 0; j < n; j++) printf("%02x", m[j]);
        printf("\n");
    }
    fflush(stdout);
    return 0;
}
#ifdef MAIN
int main(int argc, char **argv) { return report(argc > 1 ? atoi(argv[1]) : 0); }
#endif
"#;

/// Build the fixture with `cc` and `args`, or None (skipped, with the
/// reason printed) when there is no compiler; CI installs gcc, so there it fails.
fn build(dir: &Path, name: &str, args: &[&str]) -> Option<PathBuf> {
    let src = dir.join("fixture.c");
    std::fs::write(&src, SOURCE).unwrap();
    let out = dir.join(name);
    let ok = Command::new("cc").args(args).arg(&src).arg("-o").arg(&out).status().is_ok_and(|s| s.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "CI is set but `cc` cannot build {name}");
        println!("skipping: `cc` cannot build {name}");
        return None;
    }
    Some(out)
}

fn ld_packs_relative_relocs() -> bool {
    let help = Command::new("ld").arg("--help").output().map(|o| o.stdout).unwrap_or_default();
    String::from_utf8_lossy(&help).contains("pack-relative-relocs")
}

fn bytes(s: &Splice) -> Vec<u8> {
    let mut out = Vec::new();
    s.reader().read_to_end(&mut out).unwrap();
    out
}

fn marker() -> KpackRef {
    KpackRef {
        kpack_search_paths: vec!["../.kpack/fixture_@GFXARCH@.kpack".into()],
        kernel_name: "lib/libfixture.so".into(),
    }
}

/// The wrappers' address (`.hipFatBinSegment`) in the file at `path`.
fn segment_vaddr(data: &[u8]) -> u64 {
    let file = object::File::parse(data).unwrap();
    use object::{Object, ObjectSection};
    file.section_by_name(".hipFatBinSegment").unwrap().address()
}

/// Check the output's structure with the `object` crate and by hand.
fn check_structure(input: &[u8], out: &[u8], k: &Kpacked, smaller: bool) {
    use object::read::elf::{FileHeader, SectionHeader};
    let h = object::elf::FileHeader64::<object::LittleEndian>::parse(out).unwrap();
    let e = object::LittleEndian;
    let sections = h.sections(e, out).unwrap();
    let fat = sections.section_by_name(e, b".hip_fatbin").unwrap().1;
    assert_eq!(fat.sh_type(e), object::elf::SHT_NOBITS);
    let marker_section = sections.section_by_name(e, b".rocm_kpack_ref").unwrap().1;
    assert_eq!(marker_section.sh_addr(e), k.marker_vaddr);
    assert_eq!(marker_section.sh_flags(e), object::elf::SHF_ALLOC);
    let m = marker().to_msgpack();
    let at = marker_section.sh_offset(e) as usize;
    assert_eq!(&out[at..at + m.len()], &m[..]);
    // One section header table, ending the file; .shstrtab just before it.
    assert_eq!(h.e_shoff(e) + u64::from(h.e_shnum(e)) * 64, out.len() as u64);
    // Smaller by the removed pages, less the marker's page and the tables' growth.
    assert!(k.removed >= 0x1000, "{}", k.removed);
    if smaller {
        let most = input.len() as u64 - k.removed + 0x1000 + 16 + 64 + 56 * 20;
        assert!(out.len() as u64 <= most, "{} vs {}", out.len(), input.len());
    }
    // No bundle bytes left anywhere.
    assert!(!out.windows(24).any(|w| w == b"__CLANG_OFFLOAD_BUNDLE__"));
    // The pointer written in place is the marker's address, the index is in dummy1.
    let seg = sections.section_by_name(e, b".hipFatBinSegment").unwrap().1;
    let at = seg.sh_offset(e) as usize;
    for i in 0..2 {
        let w = &out[at + 24 * i..at + 24 * (i + 1)];
        assert_eq!(&w[..8], &[0x48, 0x49, 0x50, 0x4B, 1, 0, 0, 0]);
        assert_eq!(u64::from_le_bytes(w[8..16].try_into().unwrap()), k.marker_vaddr);
        assert_eq!(u64::from_le_bytes(w[16..24].try_into().unwrap()), i as u64);
    }
}

/// What `report` prints for the kpack'd file, given the wrappers' address.
fn expected_report(k: &Kpacked, segment: u64) -> String {
    let m = marker().to_msgpack();
    let hex: String = m.iter().map(|b| format!("{b:02x}")).collect();
    (0..2).map(|i| format!("{i} 4b504948 {} {i} {hex}\n", k.marker_vaddr as i64 - segment as i64)).collect()
}

/// Kpack the file at `input`, check it, write it next to the input.
fn kpack_and_check(dir: &Path, input: &Path, smaller: bool) -> (PathBuf, String) {
    let original = std::fs::read(input).unwrap();
    let fat = read_fat_binary(input).unwrap().unwrap();
    assert_eq!(fat.wrappers, vec![0, 0x2000]);
    assert_eq!(fat.fatbin_size, 3 * 4096 + 100);
    assert_eq!(&original[fat.fatbin_offset as usize..][..24], b"__CLANG_OFFLOAD_BUNDLE__");
    let k = kpack_host_layout(input, &marker()).unwrap();
    let out = bytes(&k.splice);
    check_structure(&original, &out, &k, smaller);
    // The same input gives the same bytes.
    assert_eq!(bytes(&kpack_host(input, &marker()).unwrap()), out);
    let name = format!("{}.kpacked", input.file_name().unwrap().to_string_lossy());
    let path = dir.join(name);
    std::fs::write(&path, &out).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    crate::elf::verify(&path).unwrap();
    // To look at a fixture and its rewrite with readelf: KPACK_DEBUG_DIR=/some/dir.
    if let Some(d) = std::env::var_os("KPACK_DEBUG_DIR") {
        std::fs::copy(input, Path::new(&d).join(input.file_name().unwrap())).unwrap();
        std::fs::copy(&path, Path::new(&d).join(path.file_name().unwrap())).unwrap();
    }
    // A kpack'd file is refused a second time, and read_fat_binary says why.
    assert!(matches!(kpack_host(&path, &marker()), Err(ElfError::Kpack { problem: KpackProblem::AlreadyKpacked, .. })));
    (path, expected_report(&k, segment_vaddr(&out)))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn check_executable(args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let mut all = vec!["-DMAIN", "-DFATBIN_LINKAGE="];
    let smaller = !args.contains(&"-DFATBIN_CONST=");
    all.extend_from_slice(args);
    let Some(exe) = build(dir.path(), "fixture", &all) else {
        return;
    };
    let (out, expected) = kpack_and_check(dir.path(), &exe, smaller);
    let n = marker().to_msgpack().len().to_string();
    assert_eq!(run(Command::new(&out).arg(&n)), expected);
}

fn check_library(linkage: &str, args: &[&str]) {
    check_library_sized(linkage, args, true)
}

fn check_library_sized(linkage: &str, args: &[&str], smaller: bool) {
    let dir = tempfile::tempdir().unwrap();
    let define = format!("-DFATBIN_LINKAGE={linkage}");
    let mut all = vec!["-shared", "-fPIC", define.as_str()];
    all.extend_from_slice(args);
    let Some(lib) = build(dir.path(), "libfixture.so", &all) else {
        return;
    };
    let (out, expected) = kpack_and_check(dir.path(), &lib, smaller);
    if let Some(report) = dlopen_report(&out) {
        assert_eq!(report, expected);
    }
}

/// What `report` prints (with the marker's length) when python3 dlopens
/// `lib`, or None (skipped, with the reason printed) without python3.
fn dlopen_report(lib: &Path) -> Option<String> {
    let n = marker().to_msgpack().len().to_string();
    let script = "import ctypes, sys; sys.exit(ctypes.CDLL(sys.argv[1]).report(int(sys.argv[2])))";
    let Ok(python) = Command::new("python3").arg("-c").arg(script).arg(lib).arg(&n).output() else {
        assert!(std::env::var_os("CI").is_none(), "CI is set but there is no python3");
        println!("skipping the dlopen check: no python3");
        return None;
    };
    assert!(python.status.success(), "{python:?}");
    Some(String::from_utf8(python.stdout).unwrap())
}

#[test]
fn a_shared_library_with_r_x86_64_64_pointers_loads_and_reads_the_marker() {
    check_library("", &[]);
}

#[test]
fn a_shared_library_with_relative_pointers_loads_and_reads_the_marker() {
    check_library("static", &[]);
}

#[test]
fn a_shared_library_with_relr_pointers_loads_and_reads_the_marker() {
    if !ld_packs_relative_relocs() {
        println!("skipping: this ld has no -z pack-relative-relocs");
        return;
    }
    check_library("static", &["-Wl,-z,pack-relative-relocs"]);
}

#[test]
fn a_pie_runs_and_reads_the_marker() {
    check_executable(&["-fPIE", "-pie"]);
}

#[test]
fn a_pie_with_relr_runs_and_reads_the_marker() {
    if !ld_packs_relative_relocs() {
        println!("skipping: this ld has no -z pack-relative-relocs");
        return;
    }
    check_executable(&["-fPIE", "-pie", "-Wl,-z,pack-relative-relocs"]);
}

#[test]
fn a_non_pie_executable_runs_and_reads_the_marker() {
    check_executable(&["-fno-PIE", "-no-pie"]);
}

/// A writable `.hip_fatbin` lands in the read-write PT_LOAD, before
/// `.hipFatBinSegment` and a bss: the part after the fatbin pages keeps
/// both. An executable's program headers then go to the tail, where their
/// address-offset delta must be the first PT_LOAD's (padding the file).
#[test]
fn a_writable_fatbin_keeps_the_segment_tail_and_its_bss() {
    check_library("", &["-DFATBIN_CONST="]);
    check_executable(&["-fPIE", "-pie", "-DFATBIN_CONST="]);
    check_executable(&["-fno-PIE", "-no-pie", "-DFATBIN_CONST="]);
}

/// Write `data` as `name` in `dir` and kpack it; the error's text.
fn kpack_error(dir: &Path, name: &str, data: &[u8]) -> (ElfError, String) {
    let path = dir.join(name);
    std::fs::write(&path, data).unwrap();
    let err = kpack_host(&path, &marker()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains(name), "{text}");
    (err, text)
}

fn problem_of(err: &ElfError) -> Option<&KpackProblem> {
    match err {
        ElfError::Kpack { problem, .. } => Some(problem),
        _ => None,
    }
}

#[test]
fn bad_inputs_are_typed_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lib) = build(dir.path(), "libgood.so", &["-shared", "-fPIC", "-DFATBIN_LINKAGE=static"]) else {
        return;
    };
    let good = std::fs::read(&lib).unwrap();
    let elf = object::File::parse(&*good).unwrap();
    use object::{Object, ObjectSection};
    let segment = elf.section_by_name(".hipFatBinSegment").unwrap();
    let (seg_at, _) = segment.file_range().unwrap();
    let seg_at = seg_at as usize;
    let seg_header = 64 * segment.index().0 + u64::from_le_bytes(good[40..48].try_into().unwrap()) as usize;
    drop(elf);

    let (err, text) = kpack_error(dir.path(), "truncated.so", &good[..good.len() - 100]);
    assert!(matches!(err, ElfError::Corrupt { .. }), "{text}");

    let mut bad = good.clone();
    bad[seg_header + 32..seg_header + 40].copy_from_slice(&40u64.to_le_bytes()); // sh_size
    let (err, text) = kpack_error(dir.path(), "size.so", &bad);
    assert_eq!(problem_of(&err), Some(&KpackProblem::WrapperSize(40)), "{text}");

    let mut bad = good.clone();
    bad[seg_at + 24..seg_at + 28].copy_from_slice(&0x1234_5678u32.to_le_bytes());
    let (err, text) = kpack_error(dir.path(), "magic.so", &bad);
    assert_eq!(problem_of(&err), Some(&KpackProblem::UnknownMagic { index: 1, magic: 0x1234_5678 }), "{text}");
    assert!(text.contains("0x12345678"), "{text}");

    let mut bad = good.clone();
    bad[seg_at + 4] = 2;
    let (err, text) = kpack_error(dir.path(), "version.so", &bad);
    assert_eq!(problem_of(&err), Some(&KpackProblem::Version { index: 0, version: 2 }), "{text}");

    // No .hipFatBinSegment: its name in .shstrtab no longer matches.
    let name_at = good.windows(17).position(|w| w == b".hipFatBinSegment").unwrap();
    let mut bad = good.clone();
    bad[name_at + 1] = b'X';
    let (err, text) = kpack_error(dir.path(), "nosegment.so", &bad);
    assert_eq!(problem_of(&err), Some(&KpackProblem::NoSegment), "{text}");

    // No .hip_fatbin: read_fat_binary says None, kpack_host refuses.
    let name_at = good.windows(12).position(|w| w == b".hip_fatbin\0").unwrap();
    let mut bad = good.clone();
    bad[name_at + 1] = b'X';
    let (err, text) = kpack_error(dir.path(), "nofatbin.so", &bad);
    assert_eq!(problem_of(&err), Some(&KpackProblem::NoFatbin), "{text}");
    assert_eq!(read_fat_binary(&dir.path().join("nofatbin.so")).unwrap(), None);

    // A pointer outside .hip_fatbin (the RELATIVE addend moved away).
    let fat = read_fat_binary(&lib).unwrap().unwrap();
    let addend = (fat.fatbin_vaddr + 0x2000).to_le_bytes();
    let at = good.windows(8).position(|w| w == addend).unwrap();
    let mut bad = good.clone();
    bad[at..at + 8].copy_from_slice(&0x10u64.to_le_bytes());
    let (err, text) = kpack_error(dir.path(), "outside.so", &bad);
    assert!(matches!(problem_of(&err), Some(KpackProblem::PointerOutside { index: 1, pointer: 0x10, .. })), "{text}");

    let (err, _) = kpack_error(dir.path(), "text.so", b"not an ELF file at all, just some text here, long enough");
    assert!(matches!(err, ElfError::NotElf { .. }));
}

/// Every byte of the headers and tables changed, one at a time: an error or
/// a verified file, never a panic.
#[test]
fn corrupted_headers_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lib) = build(dir.path(), "libfuzz.so", &["-shared", "-fPIC", "-DFATBIN_LINKAGE="]) else {
        return;
    };
    mutate_headers(dir.path(), &lib);
}

/// Change every byte of the file header, the program header table and what
/// follows the section header table's start, one at a time (three values
/// each): kpack'ing each mutant is an error naming it or a verified file.
fn mutate_headers(dir: &Path, lib: &Path) {
    let good = std::fs::read(lib).unwrap();
    let phoff = u64::from_le_bytes(good[32..40].try_into().unwrap()) as usize;
    let phnum = u16::from_le_bytes([good[56], good[57]]) as usize;
    let shoff = u64::from_le_bytes(good[40..48].try_into().unwrap()) as usize;
    let interesting = (0..64).chain(phoff..phoff + phnum * 56).chain(shoff..good.len());
    let path = dir.join("mutant.so");
    for at in interesting {
        for value in [0xff, good[at] ^ 0x10, 0] {
            let mut bad = good.clone();
            bad[at] = value;
            std::fs::write(&path, &bad).unwrap();
            if let Err(e) = kpack_host(&path, &marker()) {
                assert!(e.to_string().contains("mutant.so"), "{e}");
            }
            let _ = read_fat_binary(&path);
        }
    }
}

/// Segments aligned to 2 MiB: the pages removed are not a multiple of that,
/// so the segments after them say 4 KiB (the loader checks the congruence).
#[test]
fn segments_aligned_to_2_mib_load() {
    check_library("static", &["-Wl,-z,max-page-size=0x200000"]);
    check_executable(&["-fPIE", "-pie", "-Wl,-z,max-page-size=0x200000"]);
}
