//! The fuzz properties on random and mutated input: the readers of what a
//! peer sends never panic.

use proptest::prelude::*;

const SEED: &str = "eyJhbGciOiJFUzI1NiIsInBwdCI6InNoYWtlbiIsInR5cCI6InBhc3Nwb3J0IiwieDV1IjoiaHR0cHM6Ly94L2MucGVtIn0.eyJhdHRlc3QiOiJBIiwiZGVzdCI6eyJ0biI6WyIxMjE1NTU1MTIxMyJdfSwiaWF0IjoxNzAwMDAwMDAwLCJvcmlnIjp7InRuIjoiMTIxNTU1NTEyMTIifSwib3JpZ2lkIjoieCJ9.AAAA;info=<https://x/c.pem>;alg=ES256;ppt=shaken";

proptest! {
    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        stir::fuzzing::identity(&data);
        stir::fuzzing::passport(&data);
    }

    #[test]
    fn mutated_headers_never_panic(at in 0usize..SEED.len(), byte in any::<u8>(), cut in 0usize..SEED.len()) {
        let mut v = SEED.as_bytes().to_vec();
        v[at] = byte;
        v.truncate(cut.max(at + 1));
        stir::fuzzing::identity(&v);
        let token = SEED.split(';').next().unwrap_or("").as_bytes();
        let mut t = token.to_vec();
        t[at % token.len()] = byte;
        stir::fuzzing::passport(&t);
    }
}
