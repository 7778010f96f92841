use super::*;
use crate::elf::verify;
use std::io::Read;
use std::process::Command;

/// Build `name` from C source with `cc` and `args`, or None (the test is
/// skipped) when there is no compiler; CI installs gcc, so there it fails.
fn cc(dir: &Path, name: &str, source: &str, args: &[&str]) -> Option<PathBuf> {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(name);
    let ok = Command::new("cc").args(args).arg(&src).arg("-o").arg(&out).status().is_ok_and(|s| s.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "CI is set but `cc` cannot build {name}");
        return None;
    }
    Some(out)
}

fn lib(dir: &Path, extra: &[&str]) -> Option<PathBuf> {
    let mut args = vec!["-shared", "-fPIC", "-Wl,-soname,libedit.so.1"];
    args.extend_from_slice(extra);
    cc(dir, "libedit.so.1", "int edit_answer(void) { return 42; }\n", &args)
}

fn bytes(s: &Splice) -> Vec<u8> {
    let mut out = Vec::new();
    s.reader().read_to_end(&mut out).unwrap();
    out
}

fn write(dir: &Path, name: &str, s: &Splice) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes(s)).unwrap();
    p
}

fn phnum(data: &[u8]) -> u16 {
    u16::from_le_bytes([data[0x38], data[0x39]])
}

fn rpath(r: &str) -> ElfEdits {
    ElfEdits { set_rpath: Some(r.into()), ..Default::default() }
}

#[test]
fn a_shorter_rpath_is_written_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lib) = lib(dir.path(), &["-Wl,--disable-new-dtags", "-Wl,-rpath,/a/rather/long/original/path"]) else {
        return;
    };
    let out = edit(&lib, &rpath("$ORIGIN")).unwrap();
    assert!(!out.grew);
    assert_eq!(out.splice.len(), std::fs::metadata(&lib).unwrap().len());
    let info = verify(&write(dir.path(), "out.so", &out.splice)).unwrap();
    assert_eq!(info.rpath.as_deref(), Some("$ORIGIN"));
    assert_eq!(info.runpath, None);
    assert_eq!(info.soname.as_deref(), Some("libedit.so.1"));
}

#[test]
fn a_runpath_is_retagged_and_a_longer_one_grows_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lib) = lib(dir.path(), &["-Wl,--enable-new-dtags", "-Wl,-rpath,/x"]) else {
        return;
    };
    let long = "$ORIGIN/../../_rocm_sdk_core/lib:$ORIGIN/../../_rocm_sdk_core/lib/llvm/lib";
    let out = edit(&lib, &rpath(long)).unwrap();
    assert!(out.grew);
    let data = bytes(&out.splice);
    assert_eq!(phnum(&data), phnum(&std::fs::read(&lib).unwrap()) + 1);
    let info = verify(&write(dir.path(), "out.so", &out.splice)).unwrap();
    assert_eq!((info.rpath.as_deref(), info.runpath.as_deref()), (Some(long), None));
    // The facts read back from the splice are those of the written file.
    assert_eq!(format!("{:?}", out.info), format!("{info:?}"));
    // The same edit again gives the same bytes.
    assert_eq!(bytes(&edit(&lib, &rpath(long)).unwrap().splice), data);
}

/// Remove the dynamic entry with `tag` from an ELF64 little-endian image,
/// moving the later entries up: the table ends with one more DT_NULL.
fn drop_dynamic_entry(data: &mut [u8], tag: u64) {
    let u64_at = |d: &[u8], o: usize| u64::from_le_bytes(d[o..o + 8].try_into().unwrap());
    let phoff = u64_at(data, 0x20) as usize;
    let dynamic = (0..phnum(data) as usize)
        .map(|i| phoff + i * 56)
        .find(|&o| u32::from_le_bytes(data[o..o + 4].try_into().unwrap()) == 2)
        .unwrap();
    let (start, len) = (u64_at(data, dynamic + 8) as usize, u64_at(data, dynamic + 32) as usize);
    let at = (start..start + len).step_by(16).find(|&o| u64_at(data, o) == tag).unwrap();
    data.copy_within(at + 16..start + len, at);
    data[start + len - 16..start + len].fill(0);
}

#[test]
fn a_new_entry_takes_a_spare_dt_null_slot() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lib) = lib(dir.path(), &["-Wl,--disable-new-dtags", "-Wl,-rpath,/x"]) else {
        return;
    };
    if !cfg!(all(target_arch = "x86_64", target_endian = "little")) {
        return;
    }
    // GNU ld leaves no spare slot: make one by dropping DT_RPATH by hand.
    let mut data = std::fs::read(&lib).unwrap();
    drop_dynamic_entry(&mut data, 15);
    let spare = dir.path().join("spare.so");
    std::fs::write(&spare, &data).unwrap();
    assert_eq!(verify(&spare).unwrap().rpath, None);
    let out = edit(&spare, &rpath("/x")).unwrap();
    assert!(!out.grew, "`/x` is still in the string table");
    let info = verify(&write(dir.path(), "out.so", &out.splice)).unwrap();
    assert_eq!(info.rpath.as_deref(), Some("/x"));
    assert_eq!(out.splice.len(), data.len() as u64);

    // A new SONAME goes into a spare slot, its string into a grown table.
    let Some(plain) = cc(dir.path(), "plain.so", "int plain(void) { return 1; }\n", &["-shared", "-fPIC"]) else {
        return;
    };
    let soname = ElfEdits { set_soname: Some("libplain.so.1".into()), ..Default::default() };
    let out = edit(&plain, &soname).unwrap();
    assert!(out.grew);
    let info = verify(&write(dir.path(), "plain-out.so", &out.splice)).unwrap();
    assert_eq!(info.soname.as_deref(), Some("libplain.so.1"));

    // PT_DYNAMIC trimmed to end at its first DT_NULL: no spare slot, so
    // `.dynamic` moves into the tail with the new entry.
    let mut data = std::fs::read(&plain).unwrap();
    let u64_at = |d: &[u8], o: usize| u64::from_le_bytes(d[o..o + 8].try_into().unwrap());
    let phoff = u64_at(&data, 0x20) as usize;
    let ph = (0..phnum(&data) as usize)
        .map(|i| phoff + i * 56)
        .find(|&o| u32::from_le_bytes(data[o..o + 4].try_into().unwrap()) == 2)
        .unwrap();
    let start = u64_at(&data, ph + 8) as usize;
    let first_null = (0..).map(|i| start + i * 16).find(|&o| u64_at(&data, o) == 0).unwrap();
    let trimmed = (first_null + 16 - start) as u64;
    data[ph + 32..ph + 40].copy_from_slice(&trimmed.to_le_bytes());
    data[ph + 40..ph + 48].copy_from_slice(&trimmed.to_le_bytes());
    let full = dir.path().join("full.so");
    std::fs::write(&full, &data).unwrap();
    let out = edit(&full, &soname).unwrap();
    let written = write(dir.path(), "full-out.so", &out.splice);
    let info = verify(&written).unwrap();
    assert_eq!(info.soname.as_deref(), Some("libplain.so.1"));
    let moved = std::fs::read(&written).unwrap();
    let new_phoff = u64_at(&moved, 0x20) as usize;
    let new_ph = (0..phnum(&moved) as usize)
        .map(|i| new_phoff + i * 56)
        .find(|&o| u32::from_le_bytes(moved[o..o + 4].try_into().unwrap()) == 2)
        .unwrap();
    let new_start = u64_at(&moved, new_ph + 8);
    assert!(new_start >= data.len() as u64, "PT_DYNAMIC points into the tail ({new_start:#x})");
    assert_eq!(u64_at(&moved, new_ph + 32), trimmed + 16, "one more entry");
    assert_eq!(loads(&written, "plain"), "1");
}

/// Load `lib` with dlopen (RTLD_NOW, through Python's ctypes) and call
/// `func`; its answer, or a skip ("") when Python is missing outside CI.
fn loads(lib: &Path, func: &str) -> String {
    let code = format!("import ctypes, os; print(ctypes.CDLL({:?}, os.RTLD_NOW).{func}())", lib.display().to_string());
    match Command::new("python3").arg("-c").arg(code).output() {
        Ok(out) => {
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        }
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "CI is set but python3 cannot run: {e}");
            String::new()
        }
    }
}

#[test]
fn a_library_linked_with_no_spare_dynamic_tags_gets_its_rpath() {
    // `--spare-dynamic-tags=0`: ld leaves no DT_NULL beyond the last one, so
    // the new DT_RPATH moves `.dynamic` (patchelf 0.19.3 fails on this file).
    let dir = tempfile::tempdir().unwrap();
    let Some(lib) = lib(dir.path(), &["-Wl,--spare-dynamic-tags=0"]) else {
        return;
    };
    let long = "$ORIGIN:$ORIGIN/../../_rocm_sdk_core/lib";
    let out = edit(&lib, &rpath(long)).unwrap();
    assert!(out.grew);
    let path = write(dir.path(), "out.so", &out.splice);
    let info = verify(&path).unwrap();
    assert_eq!((info.rpath.as_deref(), info.runpath.as_deref()), (Some(long), None));
    assert_eq!(info.soname.as_deref(), Some("libedit.so.1"));
    let answer = loads(&path, "edit_answer");
    assert!(answer == "42" || answer.is_empty(), "{answer}");
    // Edited again (another RPATH): the moved `.dynamic` now has its slot.
    let again = edit(&path, &rpath("$ORIGIN/x")).unwrap();
    let path2 = write(dir.path(), "out2.so", &again.splice);
    assert_eq!(verify(&path2).unwrap().rpath.as_deref(), Some("$ORIGIN/x"));
    let answer = loads(&path2, "edit_answer");
    assert!(answer == "42" || answer.is_empty(), "{answer}");
}

#[test]
fn an_executable_tail_keeps_the_first_loads_address_offset_delta_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cc(
        dir.path(),
        "prog",
        "#include <stdio.h>\nint main(void) { puts(\"edited ok\"); return 0; }\n",
        &["-Wl,--disable-new-dtags", "-Wl,-rpath,/x"],
    ) else {
        return;
    };
    let out = edit(&exe, &rpath("$ORIGIN/a/much/longer/search/path/than/before")).unwrap();
    assert!(out.grew);
    let path = write(dir.path(), "prog-edited", &out.splice);
    verify(&path).unwrap();
    let data = std::fs::read(&path).unwrap();
    let loads: Vec<(u64, u64)> = (0..phnum(&data) as usize)
        .map(|i| u64::from_le_bytes(data[0x20..0x28].try_into().unwrap()) as usize + i * 56)
        .filter(|&o| u32::from_le_bytes(data[o..o + 4].try_into().unwrap()) == 1)
        .map(|o| {
            let at = |k: usize| u64::from_le_bytes(data[o + k..o + k + 8].try_into().unwrap());
            (at(8), at(16))
        })
        .collect();
    let delta = |(off, vaddr): (u64, u64)| vaddr.wrapping_sub(off);
    assert_eq!(delta(loads[0]), delta(*loads.last().unwrap()), "{loads:x?}");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let run = Command::new(&path).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "edited ok");
}

#[test]
fn pn_xnum_and_32_bit_files_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lib) = lib(dir.path(), &[]) else {
        return;
    };
    let mut data = std::fs::read(&lib).unwrap();
    data[0x38..0x3a].copy_from_slice(&0xffffu16.to_le_bytes());
    let xnum = dir.path().join("xnum.so");
    std::fs::write(&xnum, &data).unwrap();
    let err = edit(&xnum, &rpath("$ORIGIN")).unwrap_err();
    assert!(matches!(&err, EditError::Unsupported { reason, .. } if reason.contains("PN_XNUM")), "{err}");
    assert!(err.to_string().contains("xnum.so"), "{err}");
    let text = dir.path().join("text.so");
    std::fs::write(&text, "no ELF here").unwrap();
    assert!(matches!(edit(&text, &rpath("x")), Err(EditError::Elf(ElfError::NotElf { .. }))));
}

#[test]
fn removals_compact_the_dynamic_entries() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lib) = lib(dir.path(), &["-Wl,--disable-new-dtags", "-Wl,-rpath,/x", "-Wl,--no-as-needed", "-lm"]) else {
        return;
    };
    let before = verify(&lib).unwrap();
    assert!(before.needed.contains(&"libm.so.6".to_string()), "{:?}", before.needed);
    let edits = ElfEdits { remove_rpath: true, remove_needed: vec!["libm.so.6".into()], ..Default::default() };
    let out = edit(&lib, &edits).unwrap();
    assert!(!out.grew);
    assert_eq!(out.splice.len(), std::fs::metadata(&lib).unwrap().len());
    let info = verify(&write(dir.path(), "out.so", &out.splice)).unwrap();
    assert_eq!((info.rpath, info.runpath), (None, None));
    let mut expected = before.needed.clone();
    expected.retain(|n| n != "libm.so.6");
    assert_eq!(info.needed, expected);
    assert_eq!(info.soname, before.soname);
    let both = ElfEdits { remove_rpath: true, ..rpath("/y") };
    assert!(matches!(edit(&lib, &both), Err(EditError::Unsupported { .. })));
}

#[test]
fn several_needed_entries_are_renamed_into_a_grown_table() {
    let dir = tempfile::tempdir().unwrap();
    for n in ["one", "two"] {
        let args = ["-shared", "-fPIC", &format!("-Wl,-soname,lib{n}.so.1")];
        if cc(dir.path(), &format!("lib{n}.so"), &format!("int {n}(void) {{ return 1; }}\n"), &args).is_none() {
            return;
        }
    }
    let l = format!("-L{}", dir.path().display());
    let Some(lib) = lib(dir.path(), &["-Wl,--no-as-needed", &l, "-lone", "-ltwo"]) else {
        return;
    };
    let before = verify(&lib).unwrap();
    let renames: Vec<(String, String)> = ["libone.so.1", "libtwo.so.1"]
        .iter()
        .map(|n| (n.to_string(), format!("{n}.renamed-to-a-longer-name")))
        .collect();
    assert!(before.needed.starts_with(&["libone.so.1".into(), "libtwo.so.1".into()]), "{:?}", before.needed);
    // The RPATH first: its new entry and string come before the renames.
    let edits = ElfEdits { replace_needed: renames.clone(), ..rpath("$ORIGIN/../some.libs") };
    let out = edit(&lib, &edits).unwrap();
    assert!(out.grew);
    let info = verify(&write(dir.path(), "out.so", &out.splice)).unwrap();
    for (old, new) in &renames {
        assert!(!info.needed.contains(old) && info.needed.contains(new), "{:?}", info.needed);
    }
    assert_eq!(info.needed.len(), before.needed.len());
    assert_eq!(info.rpath.as_deref(), Some("$ORIGIN/../some.libs"));
}

/// Found by fuzzing (`fuzz/fuzz_targets/elf_edit.rs`): a `.dynamic` without
/// its DT_NULL terminator, grown by a new RPATH, then walked for NEEDED
/// entries past the input's end, panicked. It is an answer now, not a panic.
#[test]
fn a_dynamic_table_without_its_terminator_is_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lib) = lib(dir.path(), &[]) else { return };
    let mut data = std::fs::read(&lib).unwrap();
    let u64_at = |d: &[u8], o: usize| u64::from_le_bytes(d[o..o + 8].try_into().unwrap());
    let phoff = u64_at(&data, 0x20) as usize;
    let dynamic = (0..phnum(&data) as usize)
        .map(|i| phoff + i * 56)
        .find(|&o| u32::from_le_bytes(data[o..o + 4].try_into().unwrap()) == 2)
        .unwrap();
    let (start, len) = (u64_at(&data, dynamic + 8) as usize, u64_at(&data, dynamic + 32) as usize);
    for o in (start..start + len).step_by(16) {
        if u64_at(&data, o) == 0 {
            data[o..o + 8].copy_from_slice(&21u64.to_le_bytes()); // DT_DEBUG: no DT_NULL is left
        }
    }
    let broken = dir.path().join("noterm.so");
    std::fs::write(&broken, &data).unwrap();
    let edits = ElfEdits {
        set_rpath: Some("$ORIGIN/../lib".into()),
        replace_needed: vec![("libc.so.6".into(), "libc-x.so.6".into())],
        ..Default::default()
    };
    let _ = edit(&broken, &edits);
}

/// Set the value of the dynamic entry `tag` of an ELF64 little-endian image.
fn set_dynamic_value(data: &mut [u8], tag: u64, value: u64) {
    let u64_at = |d: &[u8], o: usize| u64::from_le_bytes(d[o..o + 8].try_into().unwrap());
    let phoff = u64_at(data, 0x20) as usize;
    let dynamic = (0..phnum(data) as usize)
        .map(|i| phoff + i * 56)
        .find(|&o| u32::from_le_bytes(data[o..o + 4].try_into().unwrap()) == 2)
        .unwrap();
    let (start, len) = (u64_at(data, dynamic + 8) as usize, u64_at(data, dynamic + 32) as usize);
    let at = (start..start + len).step_by(16).find(|&o| u64_at(data, o) == tag).unwrap();
    data[at + 8..at + 16].copy_from_slice(&value.to_le_bytes());
}

/// Found by fuzzing: a DT_VERNEEDNUM of 2^32 over one version entry (whose
/// `vn_next` is 0) read that entry again and again until memory ran out.
/// A count the file cannot hold is refused; a count past the chain's end
/// stops at its end.
#[test]
fn a_version_count_past_its_chain_is_no_endless_walk() {
    let dir = tempfile::tempdir().unwrap();
    // A call into glibc: a version need (GLIBC_2.2.5) in .gnu.version_r.
    let source = "#include <stdio.h>\nint hello(void) { return puts(\"hi\"); }\n";
    let Some(lib) = cc(dir.path(), "libver.so", source, &["-shared", "-fPIC"]) else { return };
    let data = std::fs::read(&lib).unwrap();
    const DT_VERNEEDNUM: u64 = 0x6fff_ffff;
    let mut huge = data.clone();
    set_dynamic_value(&mut huge, DT_VERNEEDNUM, u32::MAX as u64);
    let p = dir.path().join("huge.so");
    std::fs::write(&p, &huge).unwrap();
    let e = edit(&p, &rpath("$ORIGIN")).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("DT_VERNEEDNUM"), "{e}");
    let mut more = data;
    set_dynamic_value(&mut more, DT_VERNEEDNUM, 3);
    let p = dir.path().join("more.so");
    std::fs::write(&p, &more).unwrap();
    assert!(edit(&p, &rpath("$ORIGIN")).is_ok(), "the chain ends at its last entry");
}
