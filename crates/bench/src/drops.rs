//! Datagrams a UDP socket's receive queue dropped, as the kernel counts
//! them per socket (the `drops` column of `/proc/net/udp` and
//! `/proc/net/udp6`): the server's, when its queue overflows because it
//! falls behind — the first sign of saturation on a loopback run.

/// The drops of every socket (IPv4 and IPv6) bound to `port` on this
/// host, summed; `None` where the kernel's tables cannot be read.
pub fn udp_drops(port: u16) -> Option<u64> {
    let tables: Vec<String> = ["/proc/net/udp", "/proc/net/udp6"]
        .iter()
        .filter_map(|t| std::fs::read_to_string(t).ok())
        .collect();
    (!tables.is_empty()).then(|| tables.iter().map(|t| drops_at(t, port)).sum())
}

/// The summed `drops` of the sockets in `table` (the text of
/// `/proc/net/udp` or `udp6`) whose local port is `port`.
fn drops_at(table: &str, port: u16) -> u64 {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local = fields.get(1)?;
            let p = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            (p == port).then(|| fields.last()?.parse::<u64>().ok())?
        })
        .sum()
}

/// Drops at the ports of `targets` before a run, to subtract after it.
#[derive(Debug, Clone)]
pub struct DropCount {
    ports: Vec<u16>,
    before: Option<u64>,
}

impl DropCount {
    /// Counts now at each distinct port of `targets`.
    pub fn start(targets: impl IntoIterator<Item = std::net::SocketAddr>) -> Self {
        let mut ports: Vec<u16> = targets.into_iter().map(|t| t.port()).collect();
        ports.sort_unstable();
        ports.dedup();
        let before = Self::total(&ports);
        Self { ports, before }
    }

    fn total(ports: &[u16]) -> Option<u64> {
        ports.iter().map(|&p| udp_drops(p)).sum()
    }

    /// Drops since [`start`](Self::start); `None` when unknown (no
    /// tables, or a socket closed meanwhile took its count with it).
    pub fn since(&self) -> Option<u64> {
        Self::total(&self.ports)?.checked_sub(self.before?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    const TABLE: &str = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
10865: 0100007F:13C4 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4281678 2 00000000c50a2ac6 7
10866: 0100007F:13C5 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4281679 2 00000000c50a2ac7 100
10867: 0101007F:13C4 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4281680 2 00000000c50a2ac8 5
";

    #[test]
    fn the_drops_of_every_socket_on_the_port_are_summed() {
        assert_eq!(drops_at(TABLE, 5060), 12);
        assert_eq!(drops_at(TABLE, 5061), 100);
        assert_eq!(drops_at(TABLE, 5062), 0);
        assert_eq!(drops_at("", 5060), 0);
        assert_eq!(drops_at("header\ngarbage line\n", 5060), 0);
    }

    #[test]
    fn a_full_receive_queue_is_counted() {
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        socket2::SockRef::from(&rx)
            .set_recv_buffer_size(1)
            .expect("smallest buffer");
        let to = rx.local_addr().expect("addr");
        let count = DropCount::start([to]);
        assert_eq!(count.since(), Some(0));
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        // The smallest queue holds a few of these; the rest are dropped.
        for _ in 0..64 {
            tx.send_to(&[0; 1200], to).expect("send");
        }
        assert!(count.since() > Some(32), "{:?}", count.since());
    }
}
