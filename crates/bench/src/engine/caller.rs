//! Which user makes each call, and from which socket.

/// Who makes call `number` and from which of its thread's `flows`
/// sockets: (user index, flow index). A thread starts the numbers
/// `id, id + threads, …` and calls its own users (those `id` modulo
/// `threads`) in turn, dealing them over all its flows, so that each user
/// is always called from the same socket. A phone registers from one
/// address: a user whose calls came from every thread (10,001 users over
/// 8 threads did) would hold a binding per thread at the registrar, and a
/// thread whose users all landed on one of its flows (user mod flows with
/// 8 threads and 4 flows did) would leave the others idle. With fewer
/// users than threads they are shared by all threads.
pub(super) fn caller(number: u64, threads: usize, users: usize, flows: usize) -> (usize, usize) {
    let (threads, users, flows) = (
        threads.max(1) as u64,
        users.max(1) as u64,
        flows.max(1) as u64,
    );
    if users < threads {
        let user = number % users;
        return (user as usize, (user % flows) as usize);
    }
    let (id, turn) = (number % threads, number / threads);
    let mine = (users - id).div_ceil(threads);
    let k = turn % mine;
    ((id + threads * k) as usize, (k % flows) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    #[test]
    fn each_user_keeps_one_thread_and_every_flow_is_used() {
        for threads in 1..=8usize {
            for flows in 1..=5usize {
                for users in [threads, 10, 97, 10_001] {
                    if users < threads {
                        continue;
                    }
                    let mut place = HashMap::new();
                    let mut used = HashSet::new();
                    for number in 0..(3 * users as u64) {
                        let id = (number % threads as u64) as usize;
                        let (user, flow) = caller(number, threads, users, flows);
                        assert!(user < users && flow < flows);
                        let was = *place.entry(user).or_insert((id, flow));
                        assert_eq!(
                            was,
                            (id, flow),
                            "user {user}: {threads} threads, {flows} flows, {users} users"
                        );
                        used.insert((id, flow));
                    }
                    assert_eq!(place.len(), users, "every user calls");
                    let sockets: usize = (0..threads)
                        .map(|id| flows.min((users - id).div_ceil(threads)))
                        .sum();
                    assert_eq!(used.len(), sockets, "{threads} x {flows}, {users} users");
                }
            }
        }
        // Fewer users than threads: shared, each on one flow.
        assert_eq!(caller(5, 8, 3, 2), (2, 0));
    }
}
