#!/bin/bash
# A busy connection handed on only while its reactor is behind, and
# wake-ups only for a reactor that waits, on a 16-core machine (about 4
# minutes, from the repository's root; the prepared folder also holds
# the build before the change as `before` and the build after it as
# `after`): one connection loaded by every generator thread against 8
# reactors, each build with the connection on its reactor (flow) and
# spread over all, beside the null responder, then the build after with
# every message handed on (handoff), over TLS then TCP.
# WS, GEN change the defaults.
set -u
. "$(dirname "$0")/preamble.sh" wake
for t in tls tcp; do
  echo "== one $t connection, before and after"
  timeout 150 "$S" bench scale --transport "$t" --servers "sipsec@$D/before,sipsec@$D/after,null" \
    --balance flow,spread --workers "${WS:-8}" --flows 1 --pin --duration 1 --start 40000 \
    --factor 1.3 --json "$O/wake-$t.json" --markdown "$O/wake-$t.md"
  timeout 60 "$S" bench scale --transport "$t" --servers "sipsec@$D/after" --balance handoff \
    --workers "${WS:-8}" --flows 1 --pin --duration 1 --start 40000 --factor 1.3 \
    --json "$O/handoff-$t.json" --markdown "$O/handoff-$t.md"
done
echo "== done"; date -u
