//! What `rrc exec --record` can tell from a binary before it runs (issue 13
//! §6): the sources of nondeterminism the recorder cannot see, named.
//!
//! From the ELF file of the program and of the shared libraries it needs
//! (found where the dynamic linker looks first): no interpreter (a static
//! binary, the preload never loads), a Go binary (its runtime makes its
//! syscalls with raw `syscall` instructions), imports that mean raw
//! syscalls (`syscall`), io_uring, asynchronous signals (`sigaction`,
//! `signal`...), and in the program's own code the instruction sequences
//! compilers emit for `rdtsc`/`rdtscp` and for a raw `syscall` (see
//! code_patterns). x86 code is not decoded: a count is of likely sites,
//! and a site written otherwise is not seen. Libraries that libc itself is made of are not judged
//! (libc makes its own raw syscalls; the wrappers sit in front of it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use object::{Object, ObjectSection, ObjectSymbol};

/// Where the dynamic linker looks for a DT_NEEDED name on this Debian.
const LIB_DIRS: &[&str] = &["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib", "/lib"];
/// glibc's own libraries: their raw syscalls are libc's, behind the wrappers.
const LIBC_PARTS: &[&str] = &["libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so", "ld-linux"];
const SIGNAL_IMPORTS: &[&str] = &["sigaction", "signal", "sigset", "bsd_signal", "sysv_signal", "__sysv_signal"];

/// The warnings for the program at `exe` (resolved through PATH if it has
/// no slash), one sentence each.
pub fn warnings(exe: &Path) -> Result<Vec<String>> {
    let path = resolve(exe).with_context(|| format!("finding {} to look at it", exe.display()))?;
    let data = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let file = object::File::parse(&*data).with_context(|| format!("{}: not an ELF file rrc can read", path.display()))?;
    let mut out = Vec::new();
    let name = path.display();
    let interp = file.sections().any(|s| s.name() == Ok(".interp"));
    if !interp {
        out.push(format!("{name} is statically linked: the preload never loads into it, nothing of it would be recorded"));
    }
    if file.sections().any(|s| matches!(s.name(), Ok(".go.buildinfo") | Ok(".note.go.buildid"))) {
        out.push(format!("{name} is a Go binary: its runtime makes its syscalls with raw `syscall` instructions, none of which is recorded"));
    }
    let mut needed = needed_libs(&file);
    let mut seen = BTreeSet::new();
    let mut imports = imports_of(&file);
    let mut libs = Vec::new();
    while let Some(lib) = needed.pop() {
        if !seen.insert(lib.clone()) || LIBC_PARTS.iter().any(|p| lib.starts_with(p)) {
            continue;
        }
        if lib.starts_with("liburing") {
            out.push(format!("{name} links {lib}: io_uring's operations are not recorded (and a dump refuses an io_uring)"));
        }
        if let Some(p) = LIB_DIRS.iter().map(|d| Path::new(d).join(&lib)).find(|p| p.exists()) {
            if let Ok(d) = std::fs::read(&p) {
                if let Ok(f) = object::File::parse(&*d) {
                    needed.extend(needed_libs(&f));
                    imports.extend(imports_of(&f));
                    libs.push(lib);
                }
            }
        }
    }
    if imports.contains("syscall") {
        out.push("the program or a library it loads calls syscall(): those syscalls are not recorded".into());
    }
    if imports.iter().any(|s| s.starts_with("io_uring_")) {
        out.push("the program or a library it loads uses io_uring: not recorded (and a dump refuses an io_uring)".into());
    }
    let signals: Vec<&str> = SIGNAL_IMPORTS.iter().copied().filter(|s| imports.contains(*s)).collect();
    if !signals.is_empty() {
        out.push(format!(
            "the program or a library it loads installs signal handlers ({}): asynchronous signals are not recorded, and a handler that makes a recorded call while its thread appends an event stops recording",
            signals.join(", ")
        ));
    }
    let (tsc, sys) = code_patterns(&file);
    if tsc > 0 {
        out.push(format!("{name}: {tsc} likely rdtsc/rdtscp instruction(s) in its code: a time stamp read without libc is not recorded"));
    }
    if sys > 0 && interp {
        out.push(format!("{name}: {sys} likely raw `syscall` instruction(s) in its own code: those syscalls are not recorded"));
    }
    Ok(out)
}

fn resolve(exe: &Path) -> Option<PathBuf> {
    if exe.components().count() > 1 {
        return Some(exe.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join(exe)).find(|p| p.is_file())
}

fn needed_libs(f: &object::File) -> Vec<String> {
    // DT_NEEDED through the dynamic section's strings
    let mut v = Vec::new();
    if let object::File::Elf64(elf) = f {
        let endian = elf.endian();
        if let Ok(Some((dyns, strings_idx))) = elf.elf_section_table().dynamic(endian, elf.data()) {
            if let Ok(strings) = elf.elf_section_table().strings(endian, elf.data(), strings_idx) {
                for d in dyns {
                    use object::read::elf::Dyn;
                    if d.tag32(endian) == Some(object::elf::DT_NEEDED) {
                        if let Ok(s) = d.string(endian, strings) {
                            v.push(String::from_utf8_lossy(s).into_owned());
                        }
                    }
                }
            }
        }
    }
    v
}

fn imports_of(f: &object::File) -> BTreeSet<String> {
    f.dynamic_symbols()
        .filter(|s| s.is_undefined())
        .filter_map(|s| s.name().ok().map(|n| n.split('@').next().unwrap_or(n).to_string()))
        .collect()
}

/// Counts, in the executable sections, the byte sequences compilers emit
/// for a time stamp read and for a raw syscall: `rdtsc` followed by the
/// shift that joins its halves (0f 31 48 c1 e2 20), `rdtscp` (0f 01 f9),
/// and `syscall` (0f 05) right after loading a small number into eax/rax
/// (b8 nn nn 00 00, 48 c7 c0 nn nn 00 00) or, as Go does, from the stack
/// (48 8b 44 24 nn). A lone 0f 31 or 0f 05 is too common by chance inside
/// other instructions to be counted.
fn code_patterns(f: &object::File) -> (usize, usize) {
    let (mut tsc, mut sys) = (0, 0);
    for s in f.sections().filter(|s| s.kind() == object::SectionKind::Text) {
        let Ok(d) = s.data() else { continue };
        for i in 0..d.len().saturating_sub(2) {
            let w = &d[i..];
            let shl_rdx_32 = |w: &[u8]| w.windows(4).take(8).any(|x| x == [0x48, 0xc1, 0xe2, 0x20]);
            if (w.starts_with(&[0x0f, 0x31]) && shl_rdx_32(&w[2..])) || w.starts_with(&[0x0f, 0x01, 0xf9]) {
                tsc += 1;
            }
            if w.starts_with(&[0x0f, 0x05]) {
                let before = |n: usize| if i >= n { Some(&d[i - n..i]) } else { None };
                let mov_eax = before(5).is_some_and(|b| b[0] == 0xb8 && b[3] == 0 && b[4] == 0);
                let mov_rax = before(7).is_some_and(|b| b[..3] == [0x48, 0xc7, 0xc0] && b[5] == 0 && b[6] == 0);
                let go_load = before(5).is_some_and(|b| b[..4] == [0x48, 0x8b, 0x44, 0x24]);
                if mov_eax || mov_rax || go_load {
                    sys += 1;
                }
            }
        }
    }
    (tsc, sys)
}
