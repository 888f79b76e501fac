#!/usr/bin/env bash
# A test of tools/check-layout.sh on small trees made here: a clean one passes; planted violations
# (an upward include, another folder's internal header, a .c include, a second part's internals in
# one test) each fail the check, which names the file, the line and the include.
set -u
check="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tools/check-layout.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# A tree that keeps every rule; grpc/ and agg/ are absent, as in a tree where nobody wrote them yet.
clean_tree() {
  local t=$1
  mkdir -p "$t"/{base,index,ranking,gpu,scheduler,conf,daemon,tools,bench,tests/unit}
  printf '#include <stdint.h>\n' >"$t/base/base.h"
  printf '#include "base/base.h"\n#include "index/format.h"\n' >"$t/index/index.h"
  printf '#include <stdint.h>\n' >"$t/index/format.h"
  printf '#include "index/index.h"\n#include "format.h"\n#include <string.h>\n' >"$t/index/reader.c"
  printf '#include "index/index.h"\n' >"$t/ranking/ranking.h"
  printf '#include "ranking/ranking.h"\n#include "base/base.h"\n' >"$t/gpu/gpu.h"
  printf '#include "gpu/gpu.h"\n' >"$t/scheduler/scheduler.h"
  printf '#include "scheduler/scheduler.h"\n' >"$t/scheduler/scheduler_internal.h"
  printf '#include "scheduler/scheduler_internal.h"\n#include "proto/isn.pb-c.h"\n' >"$t/scheduler/deque.c"
  printf '#include "ranking/ranking.h"\n' >"$t/conf/conf.h"
  printf '#include "conf/conf.h"\n#include "daemon/server.h"\n#include <nghttp2/nghttp2.h>\n' >"$t/daemon/isnd.c"
  printf '#include "scheduler/scheduler.h"\n' >"$t/daemon/server.h"
  printf '#include "index/index.h"\n#include "tools/common.h"\n' >"$t/tools/isn-index.c"
  printf '\n' >"$t/tools/common.h"
  printf '#include "gpu/gpu.h"\n#include "conf/conf.h"\n' >"$t/bench/bench_query.c"
  # A white-box test: the scheduler's internals plus public headers of other parts.
  printf '#include "scheduler/scheduler_internal.h"\n#include "index/index.h"\n#include "tests/support.h"\n' \
    >"$t/tests/unit/test_deque.c"
  printf '\n' >"$t/tests/support.h"
}

# Runs the check on tree $1; expects exit status $2 and every further argument in its output.
expect() {
  local tree=$1 want=$2 out rc
  shift 2
  out=$("$check" "$tree" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ]; then fail "$(basename "$tree"): exit $rc, expected $want; output:"$'\n'"$out"; return; fi
  for needle in "$@"; do
    grep -qF -- "$needle" <<<"$out" || fail "$(basename "$tree"): output lacks \"$needle\":"$'\n'"$out"
  done
}

clean_tree "$work/clean"
expect "$work/clean" 0

# Upward: index/ comes before scheduler/.
clean_tree "$work/upward"
printf '#include "index/index.h"\n\n#include "scheduler/scheduler.h"\n' >"$work/upward/index/cursor.c"
expect "$work/upward" 1 'index/cursor.c:3: #include "scheduler/scheduler.h"' "upward include"

# A folder that does not exist yet is still placed in the order: ranking/ may not include agg/.
clean_tree "$work/future"
printf '#include "agg/agg.h"\n' >"$work/future/ranking/bm25.c"
expect "$work/future" 1 'ranking/bm25.c:1: #include "agg/agg.h"' "upward include"

# Downward but past the public header.
clean_tree "$work/internal"
printf '#include "index/format.h"\n' >"$work/internal/ranking/search.c"
expect "$work/internal" 1 'ranking/search.c:1: #include "index/format.h"' "index/index.h"

# A .c include, from a test and from a library folder (also spelled with spaces after the #).
clean_tree "$work/source"
printf '#include <cmocka.h>\n#include "tools/agg_config.c"\n' >"$work/source/tests/unit/test_agg.c"
printf '#  include "reader.c"\n' >"$work/source/index/all.c"
expect "$work/source" 1 'tests/unit/test_agg.c:2: #include "tools/agg_config.c"' \
  'index/all.c:1: #include "reader.c"' "includes a source file" "2 includes break"

# A test reaching into two parts' internals; a program reaching into one.
clean_tree "$work/twoparts"
printf '#include "scheduler/scheduler_internal.h"\n#include "index/format.h"\n' >"$work/twoparts/tests/unit/test_mix.c"
printf '#include "scheduler/scheduler_internal.h"\n' >"$work/twoparts/tools/isn-deque.c"
expect "$work/twoparts" 1 'tests/unit/test_mix.c:2: #include "index/format.h"' \
  'tools/isn-deque.c:1: #include "scheduler/scheduler_internal.h"'

# grpc/'s named public headers may be included from above it; its internal header may not, and the
# message names the public set.
clean_tree "$work/grpcset"
mkdir -p "$work/grpcset/grpc" "$work/grpcset/agg"
for h in framing server client stats_endpoint tls; do printf '#include "base/base.h"\n' >"$work/grpcset/grpc/$h.h"; done
printf '#include "grpc/server.h"\n' >"$work/grpcset/grpc/server_internal.h"
printf '#include "grpc/server.h"\n#include "grpc/client.h"\n#include "grpc/tls.h"\n#include "grpc/stats_endpoint.h"\n' \
  >"$work/grpcset/agg/agg.h"
expect "$work/grpcset" 0
printf '#include "grpc/client.h"\n#include "grpc/server_internal.h"\n' >"$work/grpcset/agg/fanout.c"
expect "$work/grpcset" 1 'agg/fanout.c:2: #include "grpc/server_internal.h"' "grpc/server.h" "grpc/client.h"

# A folder outside the layering.
clean_tree "$work/unknown"
mkdir -p "$work/unknown/misc"
printf '#include "base/base.h"\n' >"$work/unknown/misc/x.c"
expect "$work/unknown" 1 'misc/x.c:1: #include "base/base.h"' "not in the layering"

if [ $failures -gt 0 ]; then echo "check_layout_test: $failures failed"; exit 1; fi
echo "check_layout_test: all cases passed"
