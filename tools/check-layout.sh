#!/usr/bin/env bash
# The include rules of DESIGN.md section 3, checked over every C, CUDA and header file of a tree:
#   - the library folders are layered base < proto < index < ranking < gpu < scheduler < conf < grpc
#     < agg < daemon; a file includes its own folder's headers and the public header of a folder
#     before its own, never one after it, never another folder's internal header;
#   - a folder has one public header, except grpc/: its users are servers, clients and the stats
#     endpoint, which need different parts of it, so it has a short named set (below), each a
#     coherent interface; a new public header is added here by name, never by pattern;
#   - tools/ and bench/ (programs) may include any public header, tests/ too, and a test may also
#     include the internal headers of the one part it tests (white-box unit tests);
#   - no file includes a .c (or .cu) file.
# Folders that do not exist yet are fine: the rules name folders, not files.
#   tools/check-layout.sh [ROOT]    ROOT defaults to the tree this script lives in.
# Prints one line per violation, "FILE:LINE: #include "X": why", and exits 1 when there is any.
set -euo pipefail

root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}
cd "$root"

# The project's own sources: in a git checkout the files git tracks or would track, elsewhere every
# file; either way not build outputs (build*/, and any folder the Makefile marked as a build with its
# .deps-ok stamp, whatever BUILD= named it), which hold generated code.
sources='\.(c|h|cu|cuh|cc|cpp)$'
builds='^(\./)?(build[^/]*'
while IFS= read -r stamp; do builds+="|$(basename "$(dirname "$stamp")")"; done < <(find . -mindepth 2 -maxdepth 2 -name .deps-ok)
builds+=')/'
if git -C . rev-parse --show-toplevel >/dev/null 2>&1 && [ "$(git rev-parse --show-toplevel)" = "$(pwd -P)" ]; then
  mapfile -d '' files < <(git ls-files -z --cached --others --exclude-standard | grep -zE "$sources" |
    grep -zvE "$builds" | sort -z)
else
  mapfile -d '' files < <(find . -path ./.git -prune -o -type f -print0 | grep -zE "$sources" |
    grep -zvE "$builds" | sort -z)
fi
[ ${#files[@]} -eq 0 ] && { echo "check-layout: no source files under $root" >&2; exit 1; }

# -H names the file even when there is only one; -s: a file that vanished mid-run is not an error.
{ grep -HnsE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "${files[@]}" || true; } | awk '
BEGIN {
    # DESIGN.md section 3: the layered library folders, in order, and each one'"'"'s public header.
    n = split("base proto index ranking gpu scheduler conf grpc agg daemon", order, " ")
    for (i = 1; i <= n; i++) rank[order[i]] = i
    order_text = "base < proto < index < ranking < gpu < scheduler < conf < grpc < agg < daemon"
    public["base/base.h"]; public["index/index.h"]; public["ranking/ranking.h"]; public["gpu/gpu.h"]
    public["scheduler/scheduler.h"]; public["conf/conf.h"]; public["agg/agg.h"]
    public["grpc/framing.h"]; public["grpc/server.h"]; public["grpc/client.h"]; public["grpc/stats_endpoint.h"]
    public["grpc/tls.h"]
    # Programs and tests: may include every public header, but sit above no library.
    program["tools"]; program["bench"]; program["tests"]
    # Of those, the ones whose files may also reach into the internals of the one part they exercise
    # (unit tests and micro-benchmarks of a part'"'"'s internals, e.g. the scheduler'"'"'s deques or features).
    white_box["tests"]; white_box["bench"]
    violations = 0
}
function is_public(path) {
    # proto/ has no hand-written header: protoc-c generates proto/NAME.pb-c.h.
    return (path in public) || path ~ /^proto\/[^\/]+\.pb-c\.h$/
}
function public_of(folder,    p, all) {
    all = ""
    for (p in public) if (index(p, folder "/") == 1) all = all (all != "" ? " or " : "") p
    if (all != "") return all
    if (folder == "proto") return "proto/*.pb-c.h"
    return ""
}
function report(why) {
    printf "%s:%s: #include %s: %s\n", file, line, spelled, why
    violations++
}
# "a/b/../c.h" -> "a/c.h"; "./x.h" -> "x.h".
function normalize(path,    parts, n, i, out, k) {
    n = split(path, parts, "/")
    k = 0
    for (i = 1; i <= n; i++) {
        if (parts[i] == "." || parts[i] == "") continue
        if (parts[i] == "..") { if (k > 0) k--; continue }
        out[++k] = parts[i]
    }
    path = ""
    for (i = 1; i <= k; i++) path = path (i > 1 ? "/" : "") out[i]
    return path
}
{
    # grep -Hn: FILE:LINE:TEXT (file names in this tree hold no colon).
    first = index($0, ":"); file = substr($0, 1, first - 1); rest = substr($0, first + 1)
    second = index(rest, ":"); line = substr(rest, 1, second - 1); text = substr(rest, second + 1)
    sub(/^\.\//, "", file)
    if (!match(text, /[<"][^>"]+[>"]/)) next
    spelled = substr(text, RSTART, RLENGTH)
    name = substr(spelled, 2, length(spelled) - 2)
    angle = substr(spelled, 1, 1) == "<"
    folder = file; sub(/\/.*/, "", folder)
    if (folder == file) folder = ""            # a file at the top of the tree
    dir = file; sub(/\/[^\/]*$/, "", dir); if (dir == file) dir = ""
    # "x.h" and "../x.h" are found next to the including file; "folder/x.h" from the root (-I.).
    if (!angle && (name !~ /\// || name ~ /^\.\.?\//)) target = normalize((dir != "" ? dir "/" : "") name)
    else target = normalize(name)
    tfolder = target; sub(/\/.*/, "", tfolder)
    if (tfolder == target) tfolder = ""
    # <...> names a system or library header unless it starts with one of our folders.
    if (angle && !(tfolder in rank) && !(tfolder in program)) next

    if (target ~ /\.(c|cu|cc|cpp)$/) { report("includes a source file; link it (a library or the test'"'"'s sources) instead"); next }
    if (tfolder == folder) next                # a folder'"'"'s own headers
    if (folder in program) {
        if (is_public(target)) next
        if ((folder in white_box) && (tfolder in rank)) {
            # A white-box test reaches into the one part it tests, and no other.
            if (!(file in tested)) { tested[file] = tfolder; next }
            if (tested[file] == tfolder) next
            report("internal header of " tfolder "/, but this test already reaches into " tested[file] \
                   "/; a file of " folder "/ may include the internals of one part (use " (public_of(tfolder) != "" ? public_of(tfolder) : "a public header") ")")
            next
        }
        report("internal header of " tfolder "/" (public_of(tfolder) != "" ? " (include " public_of(tfolder) ")" : \
               (tfolder in program ? " (" tfolder "/ holds programs, not a library)" : " (no public header)")))
        next
    }
    if (!(folder in rank)) {
        report("folder " (folder != "" ? folder "/" : "(top level)") " is not in the layering of DESIGN.md section 3 (" order_text "); add it there and to tools/check-layout.sh")
        next
    }
    if (!(tfolder in rank)) {
        report("includes from " (tfolder != "" ? tfolder "/" : "the top level") ", which no library folder may include (" order_text ")")
        next
    }
    if (rank[tfolder] >= rank[folder]) {
        report("upward include: " folder "/ may include only folders before it in " order_text)
        next
    }
    if (!is_public(target)) {
        p = public_of(tfolder)
        report("internal header of " tfolder "/" (p != "" ? "; include its public header " p : ", which has no public header"))
    }
}
END {
    if (violations) {
        # On stdout after the list, so the summary stays last when both streams share a terminal.
        printf "check-layout: %d include%s break%s the layering of DESIGN.md section 3\n", violations,
               violations == 1 ? "" : "s", violations == 1 ? "s" : ""
        exit 1
    }
}'
