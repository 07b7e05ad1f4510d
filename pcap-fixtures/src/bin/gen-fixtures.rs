//! `gen-fixtures`: write the fixture pcaps (`pcap-fixtures/pcaps/*.pcap`).
//!
//! Usage: `cargo run -p pcap-fixtures --bin gen-fixtures [-- --check] [DIR]`.
//! With `--check`, nothing is written: the command fails if a file in `DIR`
//! (default: the crate's `pcaps/`) differs from what the generator produces.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut check = false;
    let mut dir = pcap_fixtures::dir();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--check" => check = true,
            "-h" | "--help" => {
                println!("usage: gen-fixtures [--check] [DIR]");
                return ExitCode::SUCCESS;
            }
            d => dir = PathBuf::from(d),
        }
    }
    if check {
        let mut stale = 0;
        for f in pcap_fixtures::generate() {
            let p = dir.join(f.file_name());
            if std::fs::read(&p).ok().as_deref() != Some(&f.pcap[..]) {
                eprintln!("stale: {}", p.display());
                stale += 1;
            }
        }
        if stale > 0 {
            eprintln!("{stale} fixture(s) out of date: run `cargo run -p pcap-fixtures --bin gen-fixtures`");
            return ExitCode::FAILURE;
        }
        println!("all fixtures up to date in {}", dir.display());
        return ExitCode::SUCCESS;
    }
    match pcap_fixtures::write_all(&dir) {
        Ok(_) => {
            println!("wrote {}:", dir.display());
            for f in pcap_fixtures::generate() {
                println!(
                    "  {:<16} {:>3} frames  {}",
                    f.file_name(),
                    f.frames().len(),
                    f.description
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gen-fixtures: writing {}: {e}", dir.display());
            ExitCode::FAILURE
        }
    }
}
