"""`weir index build | verify | upgrade`: a collection in, an index directory out; its components checked against
the manifest; an index of an earlier weir brought up to date."""

from __future__ import annotations

import sys


def cmd_build(args) -> int:
    from indexer.build import build_index

    components = tuple(c.strip() for c in args.with_.split(",") if c.strip())
    dense = None
    if "dense" in components:
        from indexer.dense import DenseConfig

        dense = DenseConfig(index=args.dense_index, model=args.dense_model, device=args.device,
                            batch_size=args.batch_size, hnsw_m=args.hnsw_m, ef_construction=args.ef_construction,
                            ef_search=args.ef_search, nlist=args.nlist, pq_m=args.pq_m, nbits=args.nbits,
                            nprobe=args.nprobe)
        dense.check()
    learned = {"deepct_model": args.deepct_model, "deepimpact_model": args.deepimpact_model, "device": args.device}
    manifest = build_index(args.collection, args.out, components=components, overwrite=args.overwrite,
                           skip_empty=args.skip_empty, threads=args.threads, dense=dense, learned=learned)
    counts = manifest["counts"]
    sizes = ", ".join(f"{n} {c['bytes'] / 2**20:.1f} MiB" for n, c in manifest["components"].items())
    print(f"indexed {counts['documents']} documents ({counts['skipped_empty']} empty skipped) into {args.out} "
          f"in {manifest['timings']['total_seconds']:.1f}s: {sizes}", file=sys.stderr)
    return 0


def cmd_verify(args) -> int:
    from indexer.index_dir import verify

    manifest = verify(args.index)
    print(f"{args.index}: {len(manifest['components'])} component(s) match their checksums", file=sys.stderr)
    return 0


def cmd_upgrade(args) -> int:
    from indexer.index_dir import store_postings

    upgraded = store_postings(args.index)
    if upgraded:
        print(f"{args.index}: stored the postings of {', '.join(upgraded)} (in-process search; checksums updated)",
              file=sys.stderr)
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
    b.add_argument("--with", dest="with_", default="bm25", help="components to build, comma-separated (default: bm25)")
    b.add_argument("--overwrite", action="store_true", help="replace an existing index at --out")
    b.add_argument("--skip-empty", action="store_true", help="leave out empty documents instead of failing")
    b.add_argument("--threads", type=int, default=None, help="indexing threads (default: all cores)")
    d = b.add_argument_group("dense component (--with ...,dense)")
    d.add_argument("--dense-index", choices=("flat", "hnsw", "ivfpq"), default="flat",
                   help="faiss index: flat (exact inner product, default), hnsw or ivfpq")
    d.add_argument("--dense-model", default=None,
                   help="encoder: Hugging Face name or local path (default: all-MiniLM-L6-v2, offline copy)")
    d.add_argument("--device", default=None, help="encoding device (default: cuda when available, else cpu)")
    d.add_argument("--batch-size", type=int, default=64, help="passages per forward pass (default 64)")
    d.add_argument("--hnsw-m", type=int, default=32, help="HNSW: neighbours per node M (default 32)")
    d.add_argument("--ef-construction", type=int, default=200, help="HNSW: efConstruction (default 200)")
    d.add_argument("--ef-search", type=int, default=128, help="HNSW: efSearch stored as the default (default 128)")
    d.add_argument("--nlist", type=int, default=None, help="IVF-PQ: inverted lists (default: ~4*sqrt(n))")
    d.add_argument("--pq-m", type=int, default=None, help="IVF-PQ: sub-quantizers m, dividing the dim (default dim/8)")
    d.add_argument("--nbits", type=int, default=8, help="IVF-PQ: bits per sub-quantizer code (default 8)")
    d.add_argument("--nprobe", type=int, default=16, help="IVF-PQ: lists probed, stored as the default (default 16)")
    lw = b.add_argument_group("learned term weighting (--with ...,deepct,deepimpact)")
    lw.add_argument("--deepct-model", default=None,
                    help="trained DeepCT model directory (default: models/deepct-scifact; `weir train deepct`)")
    lw.add_argument("--deepimpact-model", default=None,
                    help="trained DeepImpact model directory (default: models/deepimpact-scifact; `weir train deepimpact`)")
    b.set_defaults(func=cmd_build)

    v = idx.add_parser("verify", help="check an index's components against the checksums of its manifest")
    v.add_argument("index")
    v.set_defaults(func=cmd_verify)

    u = idx.add_parser("upgrade", help="store what an index of an earlier weir lacks (the postings of its Lucene "
                       "components), in place",
                       description="Bring an index built by an earlier weir up to date, in place: each Lucene "
                       "component (bm25, deepct, deepimpact) without stored postings is checked against its manifest "
                       "checksum, its postings are exported for in-process search, and the manifest is replaced "
                       "atomically with the new checksums. Nothing is rebuilt; an up-to-date index is left as it is.")
    u.add_argument("index", help="index directory (built by `weir index build`)")
    u.set_defaults(func=cmd_upgrade)
