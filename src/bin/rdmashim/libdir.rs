//! Where the libraries are: the directory holding `librdmashim.so` and `dropin/`.

use std::path::PathBuf;

/// The first of: this command's directory (a meson build tree puts both there), `../lib` and
/// `../lib/<multiarch>` beside it (an install prefix), and the library directory the build
/// was configured with (`RDMASHIM_LIBDIR` at build time, which meson sets).
pub fn find() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this command: {e}"))?;
    let here = exe.parent().map(PathBuf::from).unwrap_or_default();
    let mut tried = vec![here.clone()];
    if let Some(prefix) = here.parent() {
        tried.push(prefix.join("lib"));
        tried.push(prefix.join("lib").join(format!("{}-linux-gnu", std::env::consts::ARCH)));
    }
    if let Some(d) = option_env!("RDMASHIM_LIBDIR") {
        tried.push(PathBuf::from(d));
    }
    tried.iter().find(|d| d.join("librdmashim.so").is_file()).cloned().ok_or_else(|| {
        let list: Vec<String> = tried.iter().map(|d| d.display().to_string()).collect();
        format!("librdmashim.so is in none of {} (use --lib-dir)", list.join(", "))
    })
}
