//! The fuzz properties on random and mutated input: PrivaSIP-3's readers
//! never panic, and a changed ticket never opens.

use proptest::prelude::*;

proptest! {
    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        privacy::fuzzing::tickets(&data);
    }

    #[test]
    fn a_changed_ticket_never_opens(at in 0usize..256, byte in any::<u8>(), cut in 0usize..256) {
        prop_assert!(privacy::fuzzing::mutated_ticket(at, byte, cut));
    }

    #[test]
    fn a_changed_callee_pseudonym_never_opens(at in 0usize..256, byte in any::<u8>(), cut in 0usize..256) {
        prop_assert!(privacy::fuzzing::mutated_callee(at, byte, cut));
    }
}
