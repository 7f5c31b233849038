//! The plain counters of [`Metrics`]: name, help and value of each, as
//! the Prometheus page lists them.

use std::sync::atomic::AtomicU64;

use crate::proto::metrics::Metrics;

impl Metrics {
    /// Every plain counter: name, help and value.
    pub(super) fn counters(
        &self,
    ) -> impl Iterator<Item = (&'static str, &'static str, &AtomicU64)> {
        self.request_counters()
            .into_iter()
            .chain(self.routing_counters())
    }

    /// The counters of what requests and responses met.
    fn request_counters(&self) -> [(&'static str, &'static str, &AtomicU64); 25] {
        [
            (
                "sipsec_bans_total",
                "Sources banned after repeated authentication failures.",
                &self.bans,
            ),
            (
                "sipsec_unbans_total",
                "Bans that ran out.",
                &self.unbans,
            ),
            (
                "sipsec_responses_received_total",
                "Responses received for forwarding.",
                &self.responses_received,
            ),
            (
                "sipsec_registrar_contacts_refused_total",
                "REGISTERs refused for a contact, To, Call-ID or Path longer than a binding stores.",
                &self.contacts_refused,
            ),
            (
                "sipsec_registrar_full_total",
                "REGISTERs refused because the registrar held its most bindings.",
                &self.registrar_full,
            ),
            (
                "sipsec_journal_throttled_total",
                "Location changes refused because the journal's byte rate was spent.",
                &self.journal_throttled,
            ),
            (
                "sipsec_udp_listings_cut_total",
                "UDP answers to unverified sources whose contact listing was cut to bound amplification.",
                &self.listings_cut,
            ),
            (
                "sipsec_udp_challenges_cut_total",
                "UDP challenges to unverified sources that left out algorithms to bound amplification.",
                &self.challenges_cut,
            ),
            (
                "sipsec_preloaded_routes_refused_total",
                "Initial requests refused for a Route naming another element.",
                &self.preloaded_routes,
            ),
            (
                "sipsec_in_dialog_routes_unproven_total",
                "In-dialog requests refused for a next hop this proxy's Record-Route does not prove.",
                &self.unproven_routes,
            ),
            (
                "sipsec_responses_unproven_total",
                "Responses dropped because they answer no request this server forwarded (forged, or from before a restart).",
                &self.responses_unproven,
            ),
            (
                "sipsec_malformed_total",
                "Malformed messages.",
                &self.malformed,
            ),
            (
                "sipsec_stun_bindings_total",
                "STUN Binding requests answered on the SIP UDP port (RFC 5626 keep-alives).",
                &self.stun_bindings,
            ),
            (
                "sipsec_udp_keepalives_total",
                "CRLF keep-alives received over UDP.",
                &self.keepalives,
            ),
            (
                "sipsec_dropped_total",
                "Messages dropped without an answer.",
                &self.dropped,
            ),
            (
                "sipsec_forwarded_total",
                "Requests forwarded.",
                &self.forwarded,
            ),
            (
                "sipsec_registrations_total",
                "Successful registrations.",
                &self.registered,
            ),
            (
                "sipsec_auth_failures_total",
                "Failed authentications.",
                &self.auth_failures,
            ),
            (
                "sipsec_journal_errors_total",
                "Location journal write failures.",
                &self.journal_errors,
            ),
            (
                "sipsec_rate_limited_total",
                "Requests dropped by the per-source rate limit.",
                &self.rate_limited,
            ),
            (
                "sipsec_transactions_over_share_total",
                "Requests refused (503): their source's transactions held its share of the table's memory.",
                &self.transactions_over_share,
            ),
            (
                "sipsec_requests_banned_total",
                "Requests dropped because their source is banned.",
                &self.banned,
            ),
            (
                "sipsec_auth_replays_total",
                "Nonce counts reused by another request (challenged again).",
                &self.auth_replays,
            ),
            (
                "sipsec_oversize_total",
                "Messages too large for a UDP datagram (short error sent, or dropped).",
                &self.oversize,
            ),
            (
                "sipsec_flows_failed_total",
                "Requests for an outbound (RFC 5626) registration whose connection was gone: 430 Flow Failed.",
                &self.flows_failed,
            ),
        ]
    }

    /// The counters of routing, transactions and transports.
    fn routing_counters(&self) -> [(&'static str, &'static str, &AtomicU64); 28] {
        [
            (
                "sipsec_dns_queries_total",
                "DNS queries sent for next hops named by domain names (SRV, A, AAAA; RFC 3263).",
                &self.dns_queries,
            ),
            (
                "sipsec_dns_unvalidated_total",
                "DNS answers refused because the name server did not mark them validated by DNSSEC (AD bit; [dns] require_dnssec).",
                &self.dns_unvalidated,
            ),
            (
                "sipsec_next_hop_waits_total",
                "Requests whose next hop's name was not known yet and had to be resolved.",
                &self.hop_waits,
            ),
            (
                "sipsec_register_busy_waits_total",
                "REGISTERs that met another worker's change in flight on their address-of-record and waited, parked, for its commit.",
                &self.busy_waits,
            ),
            (
                "sipsec_batch_waits_total",
                "Waits a UDP worker took after a read so that its next read takes several datagrams (batch_wait_us); beside sipsec_udp_worker_datagrams_total, how often the workers waited.",
                &self.paced_waits,
            ),
            (
                "sipsec_udp_xdp_received_total",
                "Datagrams the UDP workers received past the kernel's stack, on AF_XDP sockets (udp_xdp).",
                &self.xdp_received,
            ),
            (
                "sipsec_udp_xdp_sent_total",
                "Datagrams the UDP workers sent on AF_XDP sockets (answers to the senders of datagrams received that way).",
                &self.xdp_sent,
            ),
            (
                "sipsec_udp_xdp_discarded_total",
                "Frames taken on AF_XDP sockets and discarded, as the kernel's stack discards them (RFC 1122): an IP or UDP checksum that fails, or a source that cannot have sent them (this network, loopback, multicast, broadcast or reserved, the server's own address, port 0).",
                &self.xdp_discarded,
            ),
            (
                "sipsec_udp_xdp_dropped_total",
                "Frames the kernel dropped before an AF_XDP socket took them (its receive ring full, or no buffer lent to fill): the worker fell behind for longer than the ring holds; read from the sockets at most once a second.",
                &self.xdp_dropped,
            ),
            (
                "sipsec_next_hop_unresolved_total",
                "Requests answered 503 because their next hop's name did not resolve.",
                &self.hop_unresolved,
            ),
            (
                "sipsec_next_hop_resolver_full_total",
                "Requests answered 503 with Retry-After: the resolver had no room to wait for their next hop's name.",
                &self.hop_resolver_full,
            ),
            (
                "sipsec_location_stale_refusals_total",
                "Requests answered 503 with Retry-After: the shared location had been unreachable for longer than location.max_stale, so this node's copy was not trusted to route them.",
                &self.location_stale,
            ),
            (
                "sipsec_next_hop_failovers_total",
                "Requests sent to another address of their next hop's name after the one tried failed: no answer, refused or 503 (RFC 3263 section 4.3).",
                &self.hop_failovers,
            ),
            (
                "sipsec_flow_bindings_dropped_total",
                "Bindings dropped at once because the WebSocket connection they were registered over closed (a browser is reached on its connection or not at all).",
                &self.flow_bindings_dropped,
            ),
            (
                "sipsec_forked_requests_total",
                "Requests the stateful proxy forked to several contacts of one user (RFC 3261 section 16.6).",
                &self.forked,
            ),
            (
                "sipsec_fork_branches_total",
                "Branches of forked requests, the first included: with sipsec_forked_requests_total, the mean fan-out.",
                &self.fork_branches,
            ),
            (
                "sipsec_udp_unreachable_total",
                "ICMP port, host or network unreachable errors for UDP datagrams this server sent; a request the stateful proxy forwarded fails at once.",
                &self.udp_unreachable,
            ),
            (
                "sipsec_journal_compactions_total",
                "Online compactions of the location journal.",
                &self.compactions,
            ),
            (
                "sipsec_retransmissions_absorbed_total",
                "Request retransmissions answered from a transaction.",
                &self.retransmissions_absorbed,
            ),
            (
                "sipsec_transaction_timeouts_total",
                "Forwarded requests never answered (408 sent upstream).",
                &self.transaction_timeouts,
            ),
            (
                "sipsec_cancels_total",
                "CANCELs matched to a pending INVITE.",
                &self.cancels,
            ),
            (
                "sipsec_tls_pq_refused_total",
                "TLS handshakes refused: the client offered no post-quantum key exchange (require_pq).",
                &self.tls_pq_refused,
            ),
            (
                "sipsec_tls_handshake_failures_total",
                "TLS handshakes failed or timed out.",
                &self.tls_handshake_failures,
            ),
            (
                "sipsec_websocket_upgrades_total",
                "WebSocket upgrades accepted (SIP over WebSocket, RFC 7118).",
                &self.ws_upgrades,
            ),
            (
                "sipsec_http_refused_total",
                "Operator-endpoint requests refused: a page of another origin (Origin), or a name that is not this host's without http_token (DNS rebinding).",
                &self.http_refused,
            ),
            (
                "sipsec_websocket_upgrades_refused_total",
                "WebSocket upgrades refused: bad request, Origin not allowed, no sip subprotocol.",
                &self.ws_upgrades_refused,
            ),
            (
                "sipsec_tls_reloads_total",
                "Certificate and key reloads that took effect.",
                &self.tls_reloads,
            ),
            (
                "sipsec_tls_reload_failures_total",
                "Certificate and key reloads refused (old pair kept).",
                &self.tls_reload_failures,
            ),
        ]
    }
}
