//! Release links of `tenant-gateway` keep the pages a running `serve` maps of its own binary
//! few (SPEC §8: RSS ≤ 40 MiB; bench/README.md, "Code layout"):
//!
//! - The functions a running `serve` executes come first in `.text` (lld's
//!   `--symbol-ordering-file`, list in `link/serve-functions.txt`). The kernel maps a binary's
//!   code 64 KiB at a time around each page that runs (fault-around); in the linker's default
//!   order the ~6 MiB of code `serve` runs is spread over all ~16 MiB of `.text`, so nearly all
//!   of it counted in the RSS. The same functions, compiled the same way, at other addresses.
//!   A name the list has and the binary does not (code changed since the list was made) is
//!   skipped; `bench/textorder/generate` remakes the list.
//! - Relative relocations packed (DT_RELR): the loader reads them once at startup and their
//!   pages stay mapped; packed they take a few KiB instead of ~530. Needs glibc ≥ 2.36 where the
//!   binary runs (Debian 12, the image's base).
//!
//! Only where the linker is known to be lld, Rust's default for x86_64-unknown-linux-gnu since
//! 1.90 (GNU ld would refuse the options), and the list only with the toolchain it was made
//! with (its `# rustc` line: symbol names carry a hash of the toolchain's version, so another
//! toolchain's names would all miss). `TENANT_GATEWAY_RELEASE_LAYOUT=0` turns both off.

use std::env;
use std::path::Path;
use std::process::Command;

const LIST: &str = "link/serve-functions.txt";
const OFF: &str = "TENANT_GATEWAY_RELEASE_LAYOUT";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={LIST}");
    println!("cargo:rerun-if-env-changed={OFF}");
    if !lld_release_link() {
        return;
    }
    println!("cargo:rustc-link-arg-bin=tenant-gateway=-Wl,-z,pack-relative-relocs");
    if let Some(list) = ordering_list() {
        println!("cargo:rustc-link-arg-bin=tenant-gateway=-Wl,--symbol-ordering-file={list}");
        println!("cargo:rustc-link-arg-bin=tenant-gateway=-Wl,--no-warn-symbol-ordering");
    }
}

/// A release build for the target whose default linker is lld, linker not chosen by hand.
fn lld_release_link() -> bool {
    let is = |var: &str, value: &str| env::var(var).is_ok_and(|v| v == value);
    is("PROFILE", "release")
        && is("TARGET", "x86_64-unknown-linux-gnu")
        && !is(OFF, "0")
        // `-C linker=…`, `-C linker-features=…`: maybe not lld.
        && !env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|f| f.contains("linker"))
}

/// The list's absolute path, when it was made with this toolchain.
fn ordering_list() -> Option<String> {
    let path = Path::new(&env::var("CARGO_MANIFEST_DIR").ok()?).join(LIST);
    let list = std::fs::read_to_string(&path).ok()?;
    let made_with = list
        .lines()
        .find_map(|l| l.strip_prefix("# rustc "))?
        .trim();
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let out = Command::new(rustc).arg("-V").output().ok()?;
    let running = String::from_utf8_lossy(&out.stdout);
    if running.trim().strip_prefix("rustc ")? != made_with {
        println!(
            "cargo:warning={LIST} was made with rustc {made_with}, this is {}: linking in the \
             default order (remake it with bench/textorder/generate)",
            running.trim()
        );
        return None;
    }
    Some(path.to_str()?.to_owned())
}
