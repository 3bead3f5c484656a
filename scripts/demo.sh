#!/usr/bin/env bash
# The `make demo` walk-through: index a collection, evaluate BM25 on its topics, serve it over gRPC and ask it one
# query through the Python client. The server then stays up until Ctrl-C (DEMO_KEEP_SERVING=0 stops it at once).
set -euo pipefail
COLLECTION=${COLLECTION:-../shared/collections/beir-scifact}
PORT=${PORT:-50051}
PY=${PY:-.venv/bin/python}
name=$(basename "$COLLECTION")
index="indexes/$name"
WEIR="$(dirname "$PY")/weir"   # the installed `weir` command of that environment
weir() { "$WEIR" "$@"; }

if [ ! -e "$COLLECTION" ]; then
  echo "demo: no collection at $COLLECTION (set COLLECTION=path/to/collection)" >&2
  exit 2
fi
echo "== 1. index $COLLECTION -> $index"
weir index build --collection "$COLLECTION" --out "$index" --overwrite

topics="$COLLECTION/queries.tsv"; qrels="$COLLECTION/qrels.txt"
if [ -f "$topics" ] && [ -f "$qrels" ]; then
  echo "== 2. BM25 run over $(wc -l < "$topics") topics, evaluated with ir-measures"
  mkdir -p runs
  extra=()
  case "$name" in *arguana*) extra=(--remove-identical) ;; esac
  weir run --index "$index" --topics "$topics" --out "runs/$name.bm25.trec" "${extra[@]}"
  weir eval --run "runs/$name.bm25.trec" --qrels "$qrels"
else
  echo "== 2. (no queries.tsv/qrels.txt beside the corpus: evaluation skipped)"
fi

echo "== 3. serve $index over gRPC on 127.0.0.1:$PORT"
"$WEIR" serve --index "$index" --port "$PORT" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
"$PY" - "$PORT" <<'PYCODE'
import sys, time
from service.client import SearchClient
client = SearchClient(f"127.0.0.1:{sys.argv[1]}")
client.wait_ready(timeout=180)
for _ in range(600):
    try:
        if client.health() == "SERVING":
            break
    except Exception:
        pass
    time.sleep(0.2)
print("health:", client.health())
PYCODE
query=$(head -n 1 "$topics" 2>/dev/null | cut -f2)
query=${query:-information retrieval}
echo "== 4. one query through the gRPC client: \"$query\""
weir query --server "127.0.0.1:$PORT" -k 5 "$query"

if [ "${DEMO_KEEP_SERVING:-1}" = "1" ]; then
  echo "== serving $index on 127.0.0.1:$PORT; try: .venv/bin/weir query --server 127.0.0.1:$PORT \"your query\"  (Ctrl-C to stop)"
  wait $server
fi
