// SPDX-License-Identifier: GPL-2.0

//! The one errno type of peermem-rs's logic.
//!
//! The kernel's functions hand errors back negated (`-EINVAL`), the logic names them positive, as
//! `include/uapi/asm-generic/errno*.h` numbers them. Before this type the logic passed bare `i32`s
//! and the glue negated them at each call, two sign conventions in one crate. Now the logic holds
//! an [`Errno`], and the glue converts at one place each way (`kapi::errno`, `kapi::error`).

/// A Linux errno value.
///
/// # Invariants
///
/// The value is in `1..=MAX`, the range the kernel's `Error` holds (negated).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Errno(u16);

impl Errno {
    /// The largest errno the kernel hands out (`MAX_ERRNO`).
    pub const MAX: i32 = 4095;

    pub const EIO: Errno = Errno(5);
    pub const ENOMEM: Errno = Errno(12);
    pub const EFAULT: Errno = Errno(14);
    pub const EINVAL: Errno = Errno(22);
    pub const EOPNOTSUPP: Errno = Errno(95);
    /// The kernel-internal "operation not supported" the NVIDIA driver returns (not in uapi).
    pub const ENOTSUPP: Errno = Errno(524);

    /// The errno of a kernel return code (`-errno`), as `Error::to_errno` gives it. A value out of
    /// the kernel's range (not an error code) is `EINVAL`: the logic never gets an errno of 0.
    pub fn from_negative(rc: i32) -> Errno {
        match rc.checked_neg() {
            // INVARIANT: the guard keeps the value in 1..=MAX.
            Some(e) if (1..=Self::MAX).contains(&e) => Errno(e as u16),
            _ => Self::EINVAL,
        }
    }

    /// The value, positive (22 for EINVAL).
    pub fn get(self) -> i32 {
        i32::from(self.0)
    }

    /// The value the kernel's functions return for it (-22 for EINVAL).
    pub fn negative(self) -> i32 {
        -self.get()
    }
}

impl core::fmt::Display for Errno {
    /// `-22`, as the kernel log and the host's return codes show an errno.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.negative())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn kernel_codes_round_trip() {
        for e in [Errno::EIO, Errno::EINVAL, Errno::ENOTSUPP] {
            assert_eq!(Errno::from_negative(e.negative()), e);
        }
        assert_eq!(Errno::from_negative(-4095).get(), 4095);
        assert_eq!(Errno::EINVAL.to_string(), "-22");
    }

    #[test]
    fn what_is_not_an_error_code_is_einval() {
        for rc in [0, 1, 22, -4096, i32::MIN] {
            assert_eq!(Errno::from_negative(rc), Errno::EINVAL);
        }
    }
}
