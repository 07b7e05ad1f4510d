//! The pcap/pcapng reader and per-frame decoder behind `roce decode`
//! (`roce::decode::decode_bytes`) on arbitrary files, with text, JSON Lines
//! and `--stats --json` output into a sink: errors are fine, panics are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce::decode::{decode_bytes, DecodeOptions};

fuzz_target!(|data: &[u8]| {
    for (stats, json) in [(false, false), (false, true), (true, true)] {
        let opts = DecodeOptions { stats, json };
        let _ = decode_bytes(data, &opts, &mut std::io::sink());
    }
});
