#!/bin/bash
# Reactors that look for hand-offs every millisecond instead of being
# woken, on a 16-core machine (about 5 minutes, from the repository's
# root; the prepared folder also holds the build before the change as
# `before` and the build after it as `after`): one connection loaded by
# every generator thread against 8 reactors, each build with the
# connection on its reactor (flow), spread while its reactor is behind
# (spread, the default) and every message handed on (handoff), over TLS
# then TCP. Whether a hand-off that costs the reading reactor less than
# a decision carries one connection past one reactor. Then eight TCP
# connections on 1 and 8 reactors, each on its own: the reactors shared
# one journal, held for each whole decision, before e8e1bbe (make
# `before` older than it to see what a journal each is worth).
# WS, START change the defaults.
set -u
. "$(dirname "$0")/preamble.sh" watch
for t in tls tcp; do
  echo "== one $t connection, before and after"
  timeout 240 "$S" bench scale --transport "$t" --servers "sipsec@$D/before,sipsec@$D/after" \
    --balance flow,spread,handoff --workers "${WS:-8}" --flows 1 --pin --duration 1 \
    --start "${START:-40000}" --factor 1.3 --json "$O/watch-$t.json" --markdown "$O/watch-$t.md"
done
echo "== eight tcp connections on 1 and ${WS:-8} reactors, before and after"
timeout 150 "$S" bench scale --transport tcp --servers "sipsec@$D/before,sipsec@$D/after" \
  --balance flow --workers "1,${WS:-8}" --flows 8 --pin --duration 1 \
  --start "${START:-40000}" --factor 1.3 --json "$O/watch-flows.json" --markdown "$O/watch-flows.md"
echo "== done"; date -u
