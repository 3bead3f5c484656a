"""`weir index build | verify | upgrade`: a collection in, an index directory out; its components checked against
the manifest; an index of an earlier weir brought up to date."""

from __future__ import annotations

import sys

from weir.cli.options import add_backend_option, add_deprecated, add_ray_address


def cmd_build(args) -> int:
    from weir.indexer.build import build_index

    components = tuple(c.strip() for c in args.with_.split(",") if c.strip())
    dense = None
    if "dense" in components:
        from weir.indexer.dense import DenseConfig

        dense = DenseConfig(index=args.dense_index, model=args.dense_model, device=args.device, backend=args.backend,
                            batch_size=args.batch_size, chunk_size=args.dense_chunk_size, hnsw_m=args.hnsw_m,
                            ef_construction=args.ef_construction, ef_search=args.ef_search, nlist=args.nlist,
                            pq_m=args.pq_m, nbits=args.nbits, on_disk=args.dense_on_disk,
                            nprobe=args.nprobe, rerank=args.dense_rerank, vectors_from=args.dense_vectors_from,
                            shared_pass=not args.dense_own_pass)
        dense.check()
    learned = {"deepct_model": args.deepct_model, "deepimpact_model": args.deepimpact_model, "device": args.device,
               "backend": args.backend, "input": args.pass_input}
    prune = prune_spec(args)
    if args.shard_set is not None:
        return _build_set(args, components, dense, learned, prune)
    manifest = build_index(args.collection, args.out, components=components, overwrite=args.overwrite,
                           skip_empty=args.skip_empty, threads=args.threads, dense=dense, learned=learned,
                           prune=prune, device=args.device, shard=shard_spec(args.shard), ray=ray_options(args))
    counts = manifest["counts"]
    sizes = ", ".join(f"{n} {c['bytes'] / 2**20:.1f} MiB ({c['build_seconds']:.1f}s)"
                      for n, c in manifest["components"].items())
    pruned = ""
    if prune is not None:
        p = manifest["pruning"]
        cost = "cached scores" if p["scoring"]["cached"] else f"scored at {p['scoring']['passages_per_second']:.0f}/s"
        pruned = f", {counts['pruned']} pruned by {p['estimator']} ({cost})"
    print(f"indexed {counts['documents']} documents ({counts['skipped_empty']} empty skipped{pruned}) into "
          f"{args.out} in {manifest['timings']['total_seconds']:.1f}s: {sizes}", file=sys.stderr)
    steps = manifest["timings"].get("steps", [])
    print("steps (wall time; this process's peak RSS, of it anonymous): " + "; ".join(
        f"{s['step']} {s['seconds']:.1f}s {s['peak_rss_mib']:,} MiB ({s['peak_anon_mib']:,})" for s in steps),
        file=sys.stderr)
    return 0


def _build_set(args, components, dense, learned, prune) -> int:
    from pathlib import Path

    from weir.indexer.shard_set import build_shard_set, shard_name
    from weir.core.types import InputError

    if args.shard is not None:
        raise InputError("give --shard I/N (one shard) or --shard-set N (all of them), not both")
    manifests = build_shard_set(args.collection, args.out, args.shard_set, components=components,
                                overwrite=args.overwrite, skip_empty=args.skip_empty, threads=args.threads,
                                dense=dense, learned=learned, prune=prune, device=args.device, ray=ray_options(args))
    paths = [str(Path(args.out) / shard_name(i, args.shard_set)) for i in range(args.shard_set)]
    for path, m in zip(paths, manifests):
        print(f"{path}: {m['counts']['documents']} documents, {', '.join(m['components'])} "
              f"({m['timings']['total_seconds']:.1f}s)", file=sys.stderr)
    print(f"serve them with: weir serve --shards {','.join(paths)}", file=sys.stderr)
    return 0


def shard_spec(text):
    """The shard asked for by --shard I/N (None without it)."""
    if text is None:
        return None
    from weir.indexer.shards import ShardSpec

    return ShardSpec.parse(text)


def ray_options(args):
    """The distributed build asked for by --ray (None without it)."""
    if args.ray is None:
        return None
    from weir.indexer.distributed import RayOptions

    options = RayOptions(address=args.ray, workers=args.ray_workers, cpus_per_worker=args.ray_cpus_per_worker,
                         block_size=args.ray_block_size, work_dir=args.ray_work_dir, keep_blocks=args.keep_blocks)
    options.check()
    return options


def prune_spec(args):
    """The pruning asked for by --prune / --prune-threshold (None for neither)."""
    from weir.indexer.quality import ESTIMATORS
    from weir.indexer.quality.prune import PruneSpec
    from weir.core.types import InputError

    if args.prune and args.prune_threshold:
        raise InputError("give --prune ESTIMATOR:FRACTION or --prune-threshold ESTIMATOR:SCORE, not both")
    if not (args.prune or args.prune_threshold):
        return None
    spec = PruneSpec.parse(args.prune or args.prune_threshold, threshold=bool(args.prune_threshold),
                           seed=args.prune_seed)
    from pathlib import Path

    if spec.estimator not in ESTIMATORS and not Path(spec.estimator).is_dir():
        raise InputError(f"unknown quality estimator {spec.estimator!r} in --prune; known: {', '.join(ESTIMATORS)}, "
                         "or a model directory written by `weir train quality`")
    return spec


def cmd_verify(args) -> int:
    from weir.indexer.index_dir import verify

    manifest = verify(args.index)
    print(f"{args.index}: {len(manifest['components'])} component(s) match their checksums", file=sys.stderr)
    return 0


def cmd_upgrade(args) -> int:
    from weir.indexer.index_dir import upgrade

    add = tuple(c.strip() for c in (args.with_ or "").split(",") if c.strip())
    upgraded = upgrade(args.index, add, {"backend": args.backend, "device": args.device})
    if upgraded:
        print(f"{args.index}: stored {'; '.join(upgraded)} (checksums updated)", file=sys.stderr)
    else:
        print(f"{args.index}: up to date", file=sys.stderr)
    return 0


def add_parsers(sub) -> None:
    idx = sub.add_parser("index", help="build or check an index directory").add_subparsers(
        dest="index_command", required=True, metavar="ACTION")
    b = idx.add_parser("build", help="index a collection (built aside, renamed into place when complete)",
                       description="Index a collection: a directory with corpus.jsonl (weir or BEIR layout), a JSONL "
                       "file, or an MS MARCO id<TAB>text TSV. The index is built in a temporary sibling of --out and "
                       "renamed into place only when complete, with manifest.json describing it.")
    b.add_argument("--collection", required=True, help="collection directory or corpus file")
    b.add_argument("--out", required=True, help="index directory to create")
    b.add_argument("--with", dest="with_", default="bm25",
                   help="components to build, comma-separated: bm25, dense, deepct, deepimpact, attention (the "
                        "attention reranker's passage states, so that it encodes only the query) (default: bm25)")
    b.add_argument("--overwrite", action="store_true", help="replace an existing index at --out")
    b.add_argument("--skip-empty", action="store_true", help="leave out empty documents instead of failing")
    b.add_argument("--threads", type=int, default=None, help="indexing threads (default: all cores)")
    b.add_argument("--shard", metavar="I/N", default=None,
                   help="build shard I of N (0 <= I < N): only the documents whose ordinal in the corpus is I modulo "
                   "N; the manifest records the shard and the whole collection's document count. Serve all N with "
                   "`weir serve --shards DIR,...` (BM25, DeepCT and dense score as one index over the whole collection; "
                   "DeepImpact needs the shards of one --shard-set build)")
    b.add_argument("--shard-set", metavar="N", type=int, default=None,
                   help="build all N shards in one run, into OUT/shard-I-of-N: the learned weights are computed once "
                   "over the whole collection (its term statistics, one DeepImpact impact scale), so that "
                   "deepimpact and deepimpact+bm25 can be served over the shards as over one index; with --ray the "
                   "workers weigh and encode the whole collection once for all N")
    _add_dense_options(b)
    _add_ray_options(b)
    _add_learned_and_pruning_options(b)
    b.set_defaults(func=cmd_build)

    v = idx.add_parser("verify", help="check an index's components against the checksums of its manifest")
    v.add_argument("index")
    v.set_defaults(func=cmd_verify)

    u = idx.add_parser("upgrade", help="store what an index of an earlier weir lacks (the postings of its Lucene "
                       "components, the document store of bm25), in place; --with attention adds the passage states",
                       description="Bring an index built by an earlier weir up to date, in place: each Lucene "
                       "component (bm25, deepct, deepimpact) without stored postings, and a bm25 component without "
                       "its document store, is checked against its manifest checksum; the postings (in-process "
                       "search) and the documents (titles and texts without Java) are exported beside its Lucene "
                       "files, and the manifest is replaced atomically with the new checksums. Nothing is rebuilt; "
                       "an up-to-date index is left as it is.")
    u.add_argument("index", help="index directory (built by `weir index build`)")
    u.add_argument("--with", dest="with_", default=None, metavar="attention",
                   help="also add these components, computed from the index's stored documents: 'attention' (the "
                        "attention reranker's passage states, one backbone pass over every passage)")
    u.add_argument("--device", default=None, help="the backbone's device (default: cuda when available, else cpu)")
    add_backend_option(u)
    u.set_defaults(func=cmd_upgrade)


def _add_dense_options(b) -> None:
    """`index build`'s options of the dense component."""
    from weir.indexer.dense import INDEX_TYPES

    d = b.add_argument_group("dense component (--with ...,dense)")
    d.add_argument("--dense-index", choices=INDEX_TYPES, default="auto",
                   help="faiss index: auto (default: flat up to 1M passages, ivfpq above), flat (exact inner product, "
                   "4 bytes a dimension in memory), hnsw, ivfflat (exact vectors in nlist lists, nprobe searched) or "
                   "ivfpq (compressed codes, the top candidates re-scored exactly from the stored vectors)")
    d.add_argument("--dense-on-disk", action="store_true",
                   help="IVF indexes: keep the inverted lists in index.ivfdata, memory-mapped at search, so that "
                   "neither the build nor the server holds all vectors in memory (for indexes larger than memory)")
    d.add_argument("--dense-model", default=None,
                   help="encoder: Hugging Face name or local path (default: all-MiniLM-L6-v2, offline copy)")
    d.add_argument("--device", default=None, help="encoding device (default: cuda when available, else cpu)")
    add_backend_option(d)
    d.add_argument("--batch-size", type=int, default=64, help="passages per forward pass (default 64)")
    d.add_argument("--dense-chunk-size", type=int, default=1024,
                   help="passages encoded (and held in memory) at a time (default 1024); the embeddings depend on it "
                   "in their last bits, since passages are batched by length within a chunk")
    d.add_argument("--hnsw-m", type=int, default=32, help="HNSW: neighbours per node M (default 32)")
    d.add_argument("--ef-construction", type=int, default=200, help="HNSW: efConstruction (default 200)")
    d.add_argument("--ef-search", type=int, default=128, help="HNSW: efSearch stored as the default (default 128)")
    d.add_argument("--nlist", type=int, default=None, help="IVF: inverted lists (default: ~4*sqrt(n))")
    d.add_argument("--pq-m", type=int, default=None, help="IVF-PQ: sub-quantizers m, dividing the dim (default dim/8)")
    d.add_argument("--nbits", type=int, default=8, help="IVF-PQ: bits per sub-quantizer code (default 8)")
    d.add_argument("--nprobe", type=int, default=16, help="IVF: lists probed, stored as the default (default 16)")
    d.add_argument("--dense-rerank", type=int, default=None, metavar="N",
                   help="IVF-PQ: candidates re-scored exactly from the stored float16 vectors (default 1000; 0: rank "
                   "by the compressed codes' scores, which do not compare across shards)")
    d.add_argument("--dense-vectors-from", metavar="INDEX", default=None,
                   help="reuse the vectors of INDEX (same corpus file, a flat dense component of the same encoder) "
                   "for the documents it has, encoding only the others: a rebuild with other pruning or another "
                   "faiss index type without encoding again")
    d.add_argument("--dense-own-pass", action="store_true",
                   help="encode the passages in a pass of their own even when deepct or deepimpact run the same "
                   "backbone (by default such a build runs it once per passage: each passage's dense vector is its "
                   "first term-weighting window, whole words without punctuation, pooled; the manifest counts the "
                   "passages whose input differs from their own pass)")


def _add_ray_options(b) -> None:
    """`index build`'s options of a distributed build on Ray."""
    r = b.add_argument_group(
        "distributed build on Ray (--ray)",
        "The per-document steps (quality scoring for --prune, DeepCT / DeepImpact term weighting, dense encoding) "
        "run on Ray workers, block by block, into block files; the components are then built from them as in one "
        "process, giving the same index. An interrupted build run again with the same arguments computes only the "
        "blocks without a file; a worker that dies has its block retried. The corpus must be readable at the same "
        "path on every node.")
    add_ray_address(r, "the build")
    r.add_argument("--ray-workers", type=int, default=2, help="workers (Ray actors) running the steps (default 2)")
    r.add_argument("--ray-cpus-per-worker", type=float, default=None,
                   help="CPUs (and torch threads) per worker (default: this machine's cores / workers; with GPUs in "
                   "the cluster each worker takes one GPU instead)")
    r.add_argument("--ray-block-size", type=int, default=None,
                   help="documents per block (and block file), a multiple of the steps' batches (default 1024)")
    r.add_argument("--ray-work-dir", metavar="DIR", default=None,
                   help="where the block files are kept until the index is in place (default: OUT.blocks beside it)")
    r.add_argument("--keep-blocks", action="store_true", help="keep the work directory after a successful build")
    add_deprecated(r, "--keep-shards", "--keep-blocks", "keep_blocks", flag=True)


def _add_learned_and_pruning_options(b) -> None:
    """`index build`'s options of learned term weighting and static pruning."""
    from weir.indexer.document_pass import DEFAULT_INPUT, PASS_INPUTS

    lw = b.add_argument_group("learned term weighting (--with ...,deepct,deepimpact)")
    lw.add_argument("--deepct-model", default=None,
                    help="trained DeepCT model directory (default: the shipped weir/models/deepct)")
    lw.add_argument("--deepimpact-model", default=None,
                    help="trained DeepImpact model directory (default: the shipped weir/models/deepimpact)")
    lw.add_argument("--pass-input", choices=PASS_INPUTS, default=DEFAULT_INPUT,
                    help="what the document pass's backbone reads of a passage: 'text', its own text (punctuation "
                         "included: what a separate dense encoder and the attention reranker read), 'words', its runs "
                         "of letters and digits only (the term weighting heads' training input; the dense vector then "
                         "pooled from the heads' pass), or 'auto', words for the heads and text for the dense vector "
                         "and the passage states, in a second pass over the first windows where there are heads "
                         f"(default: {DEFAULT_INPUT})")
    q = b.add_argument_group("static pruning (passage quality; scored before any component is built)")
    q.add_argument("--prune", metavar="ESTIMATOR:FRACTION", default=None,
                   help="leave out the lowest-scored FRACTION of the documents (0 <= FRACTION < 1), scored by "
                   "ESTIMATOR: learned, surface, length, entropy, stopwords, punctuation, duplicates, random, or a "
                   "model directory from `weir train quality`; e.g. learned:0.25")
    q.add_argument("--prune-threshold", metavar="ESTIMATOR:SCORE", default=None,
                   help="leave out the documents ESTIMATOR scores below SCORE (see the quantiles `weir quality score` "
                   "prints)")
    q.add_argument("--prune-seed", type=int, default=0, help="seed of the random estimator (default 0)")
