//! Properties the fuzz targets in `fuzz/` check; the tests run them too.

use crate::xdp::frame::{self, fill_udp_checksum, write_headers, HEADERS};

/// Reading an arbitrary frame as the AF_XDP path does never panics, and
/// what it takes is a datagram the kernel's stack would have taken: its
/// payload lies inside the frame after the headers, its IP header sums
/// right, its source can send, and headers written back for the same
/// endpoints (with a UDP checksum) read back to the same endpoints and
/// payload.
pub fn xdp_frame(data: &[u8]) {
    let Some((ends, payload)) = frame::parse(data) else {
        return;
    };
    let start = payload.as_ptr() as usize - data.as_ptr() as usize;
    assert!(start == HEADERS && start + payload.len() <= data.len());
    assert!(frame::may_send(ends.src, ends.dst));
    let mut again = vec![0; HEADERS + payload.len()];
    assert!(write_headers(&mut again, &ends, payload.len(), 1));
    again[HEADERS..].copy_from_slice(payload);
    assert!(fill_udp_checksum(&mut again));
    assert_eq!(frame::parse(&again), Some((ends, payload)));
}
