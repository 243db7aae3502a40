//! Build script: binds the system libfabric (bindgen, with C wrappers for its
//! `static inline` calls), generates the C header of the Rust exports
//! (cbindgen) and compiles the Open MPI shim (cc) when Open MPI's headers are
//! present.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The C shim's files (`shim/rustofi_shim.h` lists what each holds); the
/// in-tree build (`ompi-patch/rustofi/Makefile.am`) names the same ones.
const SHIM_SOURCES: [&str; 4] = [
    "shim/rustofi_shim.c",
    "shim/rustofi_p2p.c",
    "shim/rustofi_excid.c",
    "shim/rustofi_site.c",
];

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.parent().unwrap().to_path_buf();
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());

    let wrapper = root.join("config/fabric_wrapper.h");
    println!("cargo:rerun-if-changed={}", wrapper.display());
    for f in SHIM_SOURCES
        .iter()
        .chain(["shim/rustofi_shim.h", "shim/rustofi_site.h"].iter())
    {
        println!("cargo:rerun-if-changed={f}");
    }
    println!("cargo:rerun-if-changed=src/ffi");
    println!("cargo:rerun-if-env-changed=RUSTOFI_OMPI_INCLUDE");

    // libfabric bindings; `static inline` functions get C wrappers.
    let wrap_c = out.join("fabric_static_wrappers.c");
    let bindings = bindgen::Builder::default()
        .header(wrapper.to_str().unwrap())
        .allowlist_function("fi_.*")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*")
        .wrap_static_fns(true)
        .wrap_static_fns_path(out.join("fabric_static_wrappers"))
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .expect("bindgen could not parse libfabric's headers (is libfabric-dev installed?)");
    bindings
        .write_to_file(out.join("fabric_sys.rs"))
        .expect("write fabric bindings");
    cc::Build::new()
        .file(&wrap_c)
        .include(root.join("config"))
        .flag("-include")
        .flag(wrapper.to_str().unwrap())
        .opt_level(2)
        .warnings(false)
        .compile("rustofi_fabric_wrap");
    println!("cargo:rustc-link-lib=fabric");

    // C header of the Rust exports, used by the shim.
    let header = out.join("rustofi.h");
    cbindgen::Builder::new()
        .with_crate(&manifest)
        .with_config(cbindgen::Config::from_file(manifest.join("cbindgen.toml")).unwrap())
        .generate()
        .expect("cbindgen")
        .write_to_file(&header);
    let _ = std::fs::create_dir_all(root.join("target/include"));
    let _ = std::fs::copy(&header, root.join("target/include/rustofi.h"));

    // The Open MPI shim is compiled only where Open MPI's devel headers are
    // present; the pure-Rust layers build and test without them. Inside an
    // Open MPI source tree (ompi-patch/) the tree's own build compiles the
    // shim: RUSTOFI_SHIM=0.
    println!("cargo:rerun-if-env-changed=RUSTOFI_SHIM");
    if env::var("RUSTOFI_SHIM").is_ok_and(|v| v == "0") {
        return;
    }
    if let Some(inc) = ompi_include() {
        cc::Build::new()
            .files(SHIM_SOURCES.iter().map(|f| manifest.join(f)))
            .include(&out)
            .include(manifest.join("shim"))
            .include(&inc)
            .include(inc.parent().unwrap())
            .opt_level(2)
            .flag("-fPIC")
            .flag("-mcx16")
            // Open MPI's inline helpers compute a buffer as its base plus
            // an offset, and the base of MPI_BOTTOM is NULL: the compiler
            // must not take such a pointer for NULL or its arithmetic for
            // undefined (clang, above all in the cross-language LTO of
            // scripts/build, folded a test `base + offset == NULL` to
            // `base == NULL`, and the Rust code inlined into the shim
            // receives such pointers).
            .flag("-fno-delete-null-pointer-checks")
            .flag("-Wall")
            .flag("-Wno-unused-parameter")
            .compile("rustofi_shim");
    } else {
        println!("cargo:warning=Open MPI devel headers not found: shim not built");
    }
}

fn ompi_include() -> Option<PathBuf> {
    if let Ok(p) = env::var("RUSTOFI_OMPI_INCLUDE") {
        return Some(PathBuf::from(p));
    }
    let out = Command::new("mpicc")
        .arg("--showme:incdirs")
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    // Debian's 4.1 lists .../include/openmpi itself; an Open MPI 5 installed
    // --with-devel-headers lists PREFIX/include, with the internal headers
    // (and PMIx's) below it in PREFIX/include/openmpi.
    text.split_whitespace()
        .map(PathBuf::from)
        .flat_map(|p| [p.clone(), p.join("openmpi")])
        .find(|p| p.ends_with("openmpi") && Path::new(p).join("ompi/mca/mtl/mtl.h").exists())
}
