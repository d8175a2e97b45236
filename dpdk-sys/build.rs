//! Finds the system DPDK with pkg-config, generates bindings with bindgen
//! and compiles the wrappers for DPDK's `static inline` functions.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=shim.c");

    let dpdk = match pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
    {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!("error: DPDK 22.11 (libdpdk-dev) not found by pkg-config ({e}); run scripts/setup.sh");
            panic!("DPDK 22.11 (libdpdk-dev) not found: run scripts/setup.sh");
        }
    };
    println!("cargo:rustc-env=SLUICE_DPDK_VERSION={}", dpdk.version);

    // pkg-config's --cflags carry `-include rte_config.h` and `-march=…`,
    // which pkg_config::Library does not expose: ask for them directly.
    let cflags = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default();
    let cflags: Vec<String> = split_flags(&cflags);

    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let wrappers_c = out.join("static_fns.c");

    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_args(cflags.iter().filter(|f| !f.starts_with("-march")))
        .allowlist_function("rte_.*")
        .allowlist_function("sluice_.*")
        .allowlist_type("rte_.*")
        .allowlist_var("RTE_.*")
        .allowlist_var("rte_.*")
        .allowlist_var("E.*")
        .blocklist_function("rte_.*_v[0-9]+")
        // Packed-and-aligned protocol headers that Rust cannot express; we parse
        // headers ourselves (dataplane::wire), so opaque is fine.
        .opaque_type("rte_l2tpv2_.*")
        .opaque_type("rte_gtp_.*")
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(false)
        .generate_comments(false)
        .prepend_enum_name(false)
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers_c)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for p in &dpdk.include_paths {
        builder = builder.clang_arg(format!("-I{}", p.display()));
    }
    let bindings = builder.generate().expect(
        "bindgen failed on the DPDK headers (is libclang-dev installed? run scripts/setup.sh)",
    );
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");

    let mut build = cc::Build::new();
    build
        .file(wrappers_c.with_extension("c"))
        .file("shim.c")
        // fopencookie (shim.c): defined here, ahead of the `-include
        // rte_config.h` in the flags, which pulls in libc headers first.
        .define("_GNU_SOURCE", None)
        .include(env::current_dir().expect("cwd"))
        .opt_level(3)
        .warnings(false);
    for f in &cflags {
        build.flag(f);
    }
    for p in &dpdk.include_paths {
        build.include(p);
    }
    // The generated wrapper file only includes the header by name.
    build.flag("-include").flag("wrapper.h");
    build.compile("dpdk_wrappers");
}

/// Splits a pkg-config flag string, keeping `-include X` together.
fn split_flags(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = s.split_whitespace();
    while let Some(tok) = it.next() {
        if tok == "-include" {
            if let Some(file) = it.next() {
                out.push(format!("-include{file}"));
            }
        } else {
            out.push(tok.to_string());
        }
    }
    out
}
