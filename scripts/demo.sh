#!/usr/bin/env bash
# The `make demo` walk-through of weir on a real collection (BEIR SciFact by default):
#   1. build one index with every component (BM25, DeepCT and DeepImpact term weights, a dense faiss index), its
#      lowest-quality passages pruned before anything is encoded, with the cost of each component;
#   2. `weir experiment` over the pipelines that matter (first stages, fusion, LTR and attention reranking) on the test
#      topics: nDCG@10, R@100, latency, index size, significance against BM25, and a plot;
#   3. `weir tune calibration` on the training topics (when the collection has them): hybrid and hybrid>>ltr hits then
#      carry P(relevant), and a caller can cut a ranking where it stops being likely relevant;
#   4. serve the index over gRPC and ask one topic of BM25 and of the best reranking pipeline, side by side;
#   5. how to call the service: `weir query`, five lines of Python, grpcurl.
# A second run reuses the index and the experiment (both are checked to be the ones these settings make).
# DEMO_QUICK=1: the BM25-only walk-through (index, evaluate, serve, one query), for CI and slow machines.
# DEMO_PRUNE=learned:0.25 (estimator:fraction, or "none"), DEMO_DEPTH=20 (attention's reranking depth),
# DEMO_KEEP_SERVING=0 (stop the server at the end instead of serving until Ctrl-C).
set -euo pipefail
COLLECTION=${COLLECTION:-../shared/collections/beir-scifact}
PORT=${PORT:-50051}
PY=${PY:-.venv/bin/python}
name=$(basename "$COLLECTION")
WEIR="$(dirname "$PY")/weir"   # the installed `weir` command of that environment
weir() { "$WEIR" "$@"; }
start=$(date +%s)
elapsed() { echo "($(( $(date +%s) - start )) s since the demo started)"; }

if [ ! -e "$COLLECTION" ]; then
  echo "demo: no collection at $COLLECTION (set COLLECTION=path/to/collection)" >&2
  exit 2
fi
topics="$COLLECTION/queries.tsv"; qrels="$COLLECTION/qrels.txt"
extra=()
case "$name" in *arguana*) extra=(--remove-identical) ;; esac

serve_and_wait() {  # serve_and_wait INDEX [weir serve options...]: start the server, wait until it is SERVING
  local index=$1; shift
  "$WEIR" serve --index "$index" --port "$PORT" "$@" &
  server=$!
  trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
  "$PY" - "$PORT" <<'PYCODE'
import sys, time
from weir.service.client import SearchClient
client = SearchClient(f"127.0.0.1:{sys.argv[1]}")
client.wait_ready(timeout=300)
for _ in range(1500):
    try:
        if client.health() == "SERVING":
            break
    except Exception:
        pass
    time.sleep(0.2)
print("health:", client.health())
PYCODE
}

keep_serving() {
  if [ "${DEMO_KEEP_SERVING:-1}" = "1" ]; then
    echo "== serving $1 on 127.0.0.1:$PORT (Ctrl-C to stop)"
    wait $server
  fi
}

if [ "${DEMO_QUICK:-0}" = "1" ]; then
  index="indexes/$name"
  echo "== 1. index $COLLECTION -> $index (BM25)"
  weir index build --collection "$COLLECTION" --out "$index" --overwrite
  if [ -f "$topics" ] && [ -f "$qrels" ]; then
    echo "== 2. BM25 run over $(wc -l < "$topics") topics, evaluated with ir-measures"
    mkdir -p runs
    weir run --index "$index" --topics "$topics" --out "runs/$name.bm25.trec" "${extra[@]}"
    weir eval --run "runs/$name.bm25.trec" --qrels "$qrels"
  else
    echo "== 2. (no queries.tsv/qrels.txt beside the corpus: evaluation skipped)"
  fi
  echo "== 3. serve $index over gRPC on 127.0.0.1:$PORT"
  serve_and_wait "$index"
  query=$(head -n 1 "$topics" 2>/dev/null | cut -f2)
  query=${query:-information retrieval}
  echo "== 4. one query through the gRPC client: \"$query\""
  weir query --server "127.0.0.1:$PORT" -k 5 "$query"
  keep_serving "$index"
  exit 0
fi

if [ ! -f "$topics" ] || [ ! -f "$qrels" ]; then
  echo "demo: $COLLECTION has no queries.tsv and qrels.txt to evaluate on; DEMO_QUICK=1 indexes and serves it" >&2
  exit 2
fi
PRUNE=${DEMO_PRUNE:-learned:0.25}
DEPTH=${DEMO_DEPTH:-20}
COMPONENTS=bm25,deepct,deepimpact,dense,attention
index="indexes/$name-demo"
experiment="runs/$name-demo"
PIPELINES="bm25,deepct,deepimpact,deepimpact+bm25,dense,hybrid,bm25>>ltr,hybrid>>ltr,bm25>>attention[depth=$DEPTH]"
SERVED="bm25,deepct,deepimpact,deepimpact+bm25,dense,hybrid,bm25>>ltr,hybrid>>ltr,bm25>>attention"
prune_args=()
[ "$PRUNE" != "none" ] && prune_args=(--prune "$PRUNE")

echo "== 1. index $COLLECTION -> $index: $COMPONENTS$([ "$PRUNE" != none ] && echo ", pruned by $PRUNE")"
if "$PY" scripts/demo_state.py index "$index" "$COMPONENTS" "$PRUNE"; then
  echo "   (the index these settings make is already there: reused; rm -r $index to build it again)"
else
  weir index build --collection "$COLLECTION" --out "$index" --with "$COMPONENTS" "${prune_args[@]}" --overwrite
fi
"$PY" scripts/demo_state.py cost "$index"
echo "   $(elapsed)"

echo "== 2. weir experiment: $(grep -c . "$topics") topics, pipelines $PIPELINES"
if "$PY" scripts/demo_state.py experiment "$experiment" "$index" "$PIPELINES"; then
  echo "   (the experiment over this index is already there: reused; rm -r $experiment to run it again)"
else
  weir experiment --index "$index" --topics "$topics" --qrels "$qrels" --pipelines "$PIPELINES" \
    --measures nDCG@10,R@100 --out "$experiment" "${extra[@]}" > /dev/null
fi
cat "$experiment/results.md"
echo "   runs, per-query values and JSON: $experiment/; the plot: $experiment/effectiveness-latency.png" \
     "and $experiment/effectiveness-index-size.png"
echo "   $(elapsed)"

train_topics="$COLLECTION/queries.train.tsv"; train_qrels="$COLLECTION/qrels.train.txt"
CALIBRATED="hybrid,hybrid>>ltr"
if [ -f "$train_topics" ] && [ -f "$train_qrels" ]; then
  echo "== 3. weir tune calibration: $CALIBRATED fitted on the training topics, their hits then carry P(relevant)"
  if "$PY" scripts/demo_state.py calibrated "$index" "$CALIBRATED"; then
    echo "   (the index holds these calibrations already: reused)"
  else
    weir tune calibration --index "$index" --pipelines "$CALIBRATED" --topics "$train_topics" --qrels "$train_qrels" \
      "${extra[@]}"
  fi
else
  echo "== 3. (no queries.train.tsv/qrels.train.txt beside the corpus: no calibration)"
fi

best=$("$PY" scripts/demo_state.py best-reranking "$experiment")
echo "== 4. serve $index over gRPC on 127.0.0.1:$PORT, one topic asked of bm25 and of $best (the best reranking row)"
serve_and_wait "$index" --pipelines "$SERVED"
echo "   serving $(elapsed)"
"$PY" scripts/demo_compare.py --server "127.0.0.1:$PORT" --experiment "$experiment" --topics "$topics" \
  --qrels "$qrels" --first bm25 --reranked "$best" -k 5

cat <<HOWTO
== 5. how to call it (reflection and health are on; the contract is proto/weir/v1/search.proto)
   the command line:  $WEIR query --server 127.0.0.1:$PORT --pipeline "hybrid>>ltr" -k 5 "statins and heart disease"
                      ... --min-relevance 0.5 --explain   (only the likely relevant hits, and why each is there)
   Python:
       from weir.service.client import SearchClient
       with SearchClient("127.0.0.1:$PORT") as client:
           answer = client.search("statins and heart disease", k=5, pipeline="hybrid>>ltr")
           for hit in answer.hits:
               print(hit.rank, hit.doc_id, round(hit.score, 3), hit.relevance if hit.HasField("relevance") else "")
   grpcurl:  grpcurl -plaintext -d '{"query": "statins and heart disease", "k": 5, "pipeline": "hybrid>>ltr"}' \\
                 127.0.0.1:$PORT weir.v1.SearchService/Search
             grpcurl -plaintext 127.0.0.1:$PORT weir.v1.SearchService/Info
HOWTO
keep_serving "$index"
