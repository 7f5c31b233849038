//! The two OpenSSL 3 functions the `openssl` crate does not wrap. This is
//! the crate's only unsafe code.
#![allow(unsafe_code)]

use foreign_types_shared::ForeignTypeRef;
use openssl::error::ErrorStack;
use openssl::pkey_ctx::PkeyCtxRef;
use openssl::rsa::RsaRef;
use std::os::raw::c_int;

extern "C" {
    fn EVP_PKEY_CTX_set_rsa_keygen_primes(
        ctx: *mut openssl_sys::EVP_PKEY_CTX,
        primes: c_int,
    ) -> c_int;
    fn RSA_get_multi_prime_extra_count(r: *const openssl_sys::RSA) -> c_int;
}

/// Asks a key-generation context for `primes` prime factors (2…5; OpenSSL
/// caps the count by the modulus size when it generates).
pub(crate) fn set_keygen_primes<T>(ctx: &mut PkeyCtxRef<T>, primes: u32) -> Result<(), ErrorStack> {
    let primes = c_int::try_from(primes).unwrap_or(c_int::MAX);
    // SAFETY: `ctx` is a live EVP_PKEY_CTX owned by the caller's PkeyCtx
    // and initialised for key generation; the call only stores the count.
    let r = unsafe { EVP_PKEY_CTX_set_rsa_keygen_primes(ctx.as_ptr(), primes) };
    if r > 0 {
        Ok(())
    } else {
        Err(ErrorStack::get())
    }
}

/// Prime factors beyond p and q (0 for a two-prime key).
pub(crate) fn extra_primes<T>(rsa: &RsaRef<T>) -> usize {
    // SAFETY: `rsa` is a live RSA object; the call reads a count.
    let n = unsafe { RSA_get_multi_prime_extra_count(rsa.as_ptr()) };
    usize::try_from(n).unwrap_or(0)
}
