//! Checks the generated C header `include/rdma/rdma_verbs.h`:
//! * it is up to date: `scripts/gen-header` (the pinned cbindgen on `src/abi/rdma_verbs.rs`)
//!   regenerates it byte for byte;
//! * it compiles, in C and in C++, alone and together with the system `<rdma/rdma_cma.h>`
//!   (before or after it), with `include/` first on the include path as users build.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Must match `CBINDGEN_VERSION` in `scripts/gen-header`.
const CBINDGEN_VERSION: &str = "0.29.4";
const INSTALL_CMD: &str = "cargo install cbindgen --version 0.29.4 --locked";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn header() -> PathBuf {
    root().join("include/rdma/rdma_verbs.h")
}

/// The cbindgen the generator would use, found the same way as `scripts/gen-header` does.
fn cbindgen() -> PathBuf {
    if let Some(p) = std::env::var_os("CBINDGEN") {
        return PathBuf::from(p);
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).map(|d| d.join("cbindgen")).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.is_file());
    on_path.unwrap_or_else(|| {
        let cargo_home = std::env::var_os("CARGO_HOME").map(PathBuf::from).unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo")
        });
        cargo_home.join("bin/cbindgen")
    })
}

fn require_pinned_cbindgen() {
    let bin = cbindgen();
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match version {
        Some(v) if v == format!("cbindgen {CBINDGEN_VERSION}") => {}
        Some(v) => panic!(
            "{} is {v}, but the header is generated with cbindgen {CBINDGEN_VERSION}; \
             install it with: {INSTALL_CMD}",
            bin.display()
        ),
        None => panic!(
            "cbindgen {CBINDGEN_VERSION} is not installed (looked for {}); \
             install it with: {INSTALL_CMD}",
            bin.display()
        ),
    }
}

#[test]
fn header_is_up_to_date() {
    require_pinned_cbindgen();
    let out =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rdma_verbs.{}.h", std::process::id()));
    let status = Command::new(root().join("scripts/gen-header"))
        .arg("--no-install")
        .arg(&out)
        .status()
        .expect("cannot run scripts/gen-header");
    assert!(status.success(), "scripts/gen-header failed: {status}");

    let generated = std::fs::read_to_string(&out).expect("generated header missing");
    let _ = std::fs::remove_file(&out);
    let checked_in = std::fs::read_to_string(header()).unwrap_or_default();
    if generated != checked_in {
        let first_diff = generated
            .lines()
            .zip(checked_in.lines().chain(std::iter::repeat("<end of file>")))
            .enumerate()
            .find(|(_, (g, c))| g != c)
            .map(|(i, (g, c))| format!("at line {}: generated {g:?}, checked in {c:?}", i + 1))
            .unwrap_or_else(|| "at the end: the checked-in header has extra lines".to_string());
        panic!("header out of date: run scripts/gen-header\n(first difference {first_diff})");
    }
}

/// Compiles a snippet with `include/` first on the include path, as C or C++.
fn compile(lang: &str, compiler: &str, source: &str) {
    let out = Command::new(compiler)
        .args(["-x", lang, "-fsyntax-only", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(root().join("include"))
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().expect("stdin").write_all(source.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        out.status.success(),
        "include/rdma/rdma_verbs.h does not compile as {lang}:\n--- source ---\n{source}\n\
         --- {compiler} ---\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const SOURCES: [&str; 3] = [
    "#include <rdma/rdma_verbs.h>\n",
    "#include <rdma/rdma_verbs.h>\n#include <rdma/rdma_cma.h>\n",
    "#include <rdma/rdma_cma.h>\n#include <rdma/rdma_verbs.h>\n",
];

/// Uses every declaration, so that a missing or mistyped one is an error, not just unused.
const USES: &str = r#"
int use_all(struct rdma_cm_id *id, struct ibv_mr *mr, struct ibv_sge *sge, struct ibv_ah *ah,
            struct ibv_wc *wc, void *buf)
{
    struct ibv_mr *(*reg[3])(struct rdma_cm_id *, void *, size_t) = {
        rdma_reg_msgs, rdma_reg_read, rdma_reg_write,
    };
    int r = 0;
    r |= reg[0](id, buf, 16) == NULL;
    r |= rdma_dereg_mr(mr);
    r |= rdma_post_recvv(id, buf, sge, 1);
    r |= rdma_post_sendv(id, buf, sge, 1, 0);
    r |= rdma_post_readv(id, buf, sge, 1, 0, (uint64_t)1, (uint32_t)2);
    r |= rdma_post_writev(id, buf, sge, 1, 0, (uint64_t)1, (uint32_t)2);
    r |= rdma_post_recv(id, buf, buf, 16, mr);
    r |= rdma_post_send(id, buf, buf, 16, NULL, IBV_SEND_INLINE);
    r |= rdma_post_read(id, buf, buf, 16, mr, 0, (uint64_t)1, (uint32_t)2);
    r |= rdma_post_write(id, buf, buf, 16, NULL, 0, (uint64_t)1, (uint32_t)2);
    r |= rdma_post_ud_send(id, buf, buf, 16, mr, 0, ah, (uint32_t)RDMA_UDP_QKEY);
    r |= rdma_get_send_comp(id, wc);
    r |= rdma_get_recv_comp(id, wc);
    r |= rdma_seterrno(EINVAL);
    return r + (errno == EINVAL);
}
"#;

#[test]
fn header_compiles_as_c() {
    for src in SOURCES {
        compile("c", "cc", src);
    }
    compile("c", "cc", &format!("{}{USES}", SOURCES[0]));
}

#[test]
fn header_compiles_as_cxx() {
    for src in SOURCES {
        compile("c++", "c++", src);
    }
    compile("c++", "c++", &format!("{}{USES}", SOURCES[0]));
}
