//! 802.3x PAUSE / 802.1Qbb PFC parser (`MacControl::parse`) on arbitrary
//! frames: no panics, and a frame that parses is rebuilt with
//! `MacControl::emit` and parses back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_stack::wire::classify;
use roce_stack::wire::pfc::MacControl;

fuzz_target!(|data: &[u8]| {
    let _ = classify(data);
    let Ok(mc) = MacControl::parse(data) else {
        return;
    };
    let mut src = [0u8; 6];
    if let Some(s) = data.get(6..12) {
        src.copy_from_slice(s);
    }
    let mut buf = [0u8; 64];
    let n = mc
        .emit(src, &mut buf)
        .expect("emit of a parsed MAC control frame");
    assert_eq!(MacControl::parse(&buf[..n]), Ok(mc));
});
