//! What every header view is made of: byte ranges of big-endian fields, and
//! the checked-view boilerplate (smoltcp `wire` style: `new_unchecked` only
//! wraps, `check_len` is the one gate, `new_checked` does both).
//!
//! The readers and writers index with constant ranges; a view whose buffer
//! passed `check_len` (or a fixed-size array the caller sized) never panics,
//! and over a fixed-size array the bounds checks fold away.

/// Byte range of a field within its header.
pub(crate) type Field = core::ops::Range<usize>;

/// The bytes of `f`, as an array (`N` must be `f.len()`).
#[inline(always)]
pub(crate) fn get<const N: usize>(data: &[u8], f: Field) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&data[f]);
    a
}

/// Big-endian `u16` at `f` (two bytes).
#[inline(always)]
pub(crate) fn get_u16(data: &[u8], f: Field) -> u16 {
    u16::from_be_bytes(get(data, f))
}

/// Big-endian 24-bit value at `f` (three bytes).
#[inline(always)]
pub(crate) fn get_u24(data: &[u8], f: Field) -> u32 {
    let [a, b, c] = get(data, f);
    u32::from_be_bytes([0, a, b, c])
}

/// Big-endian `u32` at `f` (four bytes).
#[inline(always)]
pub(crate) fn get_u32(data: &[u8], f: Field) -> u32 {
    u32::from_be_bytes(get(data, f))
}

/// Big-endian `u64` at `f` (eight bytes).
#[inline(always)]
pub(crate) fn get_u64(data: &[u8], f: Field) -> u64 {
    u64::from_be_bytes(get(data, f))
}

/// Write `v` big-endian at `f` (two bytes).
#[inline(always)]
pub(crate) fn set_u16(data: &mut [u8], f: Field, v: u16) {
    data[f].copy_from_slice(&v.to_be_bytes());
}

/// Write the low 24 bits of `v` big-endian at `f` (three bytes).
#[inline(always)]
pub(crate) fn set_u24(data: &mut [u8], f: Field, v: u32) {
    let [_, a, b, c] = v.to_be_bytes();
    data[f].copy_from_slice(&[a, b, c]);
}

/// Write `v` big-endian at `f` (four bytes).
#[inline(always)]
pub(crate) fn set_u32(data: &mut [u8], f: Field, v: u32) {
    data[f].copy_from_slice(&v.to_be_bytes());
}

/// Write `v` big-endian at `f` (eight bytes).
#[inline(always)]
pub(crate) fn set_u64(data: &mut [u8], f: Field, v: u64) {
    data[f].copy_from_slice(&v.to_be_bytes());
}

/// The checked view of a fixed-length header: `pub struct Packet<T>` with
/// `new_unchecked`, `new_checked`, `check_len` (shorter than `HEADER_LEN`
/// is `$short`), `into_inner` and `as_bytes`. Getters and setters are
/// written beside each header's field table.
macro_rules! header_view {
    ($(#[$m:meta])* $name:literal, $short:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            #[doc = concat!("Wrap `buffer` as ", $name, " without checking its length: the")]
            /// accessors panic if it is shorter than [`HEADER_LEN`]. For
            /// writing into a buffer the caller sized; on input use
            /// [`Packet::new_checked`].
            #[inline(always)]
            pub const fn new_unchecked(buffer: T) -> Packet<T> {
                Packet { buffer }
            }

            /// Wrap `buffer` after [`Packet::check_len`].
            ///
            /// Errors: as [`Packet::check_len`].
            #[inline]
            pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
                let p = Packet::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }

            #[doc = concat!("Whether the buffer holds ", $name, ": after this passes no accessor")]
            /// panics.
            ///
            /// Errors: the header's truncation [`Error`] if the buffer is
            /// shorter than [`HEADER_LEN`].
            #[inline]
            pub fn check_len(&self) -> Result<(), Error> {
                if self.buffer.as_ref().len() < HEADER_LEN {
                    Err($short)
                } else {
                    Ok(())
                }
            }

            /// The buffer.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The header's bytes (the first [`HEADER_LEN`] of the buffer).
            #[inline]
            pub fn as_bytes(&self) -> &[u8] {
                &self.buffer.as_ref()[..HEADER_LEN]
            }
        }
    };
}

pub(crate) use header_view;
