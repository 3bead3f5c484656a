"""A shard replica killed under load, for a whole run of calls (issue 54, item 2): the sharded service over a
collection's 2 BM25 shards, 8 callers asking ``bm25`` k=10 over its test topics for ``--seconds``, one replica
``ray.kill``ed 2 s in; every OK answer compared with a single server's over the whole index. Two scenarios: shards of
2 replicas (a replica of shard 0 killed: the other one answers) and of 1 (shard 1's only replica killed: UNAVAILABLE
naming the shard until Ray Serve has restarted it). `tests/collections/test_sharded_service.py` asserts the same over
calls that stop 2 s after the restart; this asks for the whole ``--seconds``.

    python bench/replica_kill.py [--collection ../shared/collections/beir-scifact] [--seconds 30]

Runs `tests/collections/sharded_harness.py` in a loopback-only network namespace where one can be made (Ray binds
the machine's address otherwise); the indexes are built once under ``$WEIR_CACHE/replica-kill``.

Measured (2026-12-07, 2-core Intel Xeon, SciFact, 30 s, 8 callers; about 100 s a run), two runs:

    shard replicas                calls         OK            UNAVAILABLE   OK unlike the single  whole again (Info)
    2 (one of shard 0's killed)   7,074; 7,740  7,074; 7,740  0; 0          0; 0                  8.3 s; 8.5 s
    1 (shard 1's only one)        6,661; 7,532  6,314; 7,164  347; 368      0; 0                  4.1 s; 3.4 s

In the first run's single-replica case, every UNAVAILABLE named shard 1 ("shard 1 has no replica running (1 asked;
Ray Serve is restarting it); try again shortly") and began -0.02 to 3.93 s after the kill; health was NOT_SERVING
from about 1.3 s to 4.1 s; every call after it was answered as the single server answers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collection", type=Path, default=ROOT.parent / "shared" / "collections" / "beir-scifact")
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()

    from tests.collections.sharded_harness import recovered_after
    from tests.conftest import in_loopback_namespace
    from weir.core.runtime import cache_dir
    from weir.indexer.build import build_index
    from weir.indexer.collections import Collection
    from weir.indexer.shards import ShardSpec

    root = cache_dir("replica-kill") / args.collection.name
    whole, shards = root / "whole", [root / f"shard-{i}-of-2" for i in range(2)]
    for out, shard in [(whole, None), *[(s, ShardSpec(i, 2)) for i, s in enumerate(shards)]]:
        if not (out / "manifest.json").is_file():
            build_index(args.collection, out, components=("bm25",), shard=shard, overwrite=True)
    topics = [q.text for q in Collection.open(args.collection).topics("test")]
    ray = {"num_cpus": 2, "shard_num_cpus": 0.25, "reranker_num_cpus": 0.5}
    warm = {"pipeline": "bm25", "k": 10, "depth": 0, "queries": topics[:5], "include_text": False,
            "concurrent_calls": 0}
    kill = {"pipeline": "bm25", "k": 10, "queries": topics, "kill_after": 2, "seconds": args.seconds,
            "whole_time": True}
    common = {"whole": str(whole), "shards": [str(s) for s in shards], "pipelines": [warm], "errors": []}
    plan = {"num_cpus": 2, "scenarios": [
        {**common, "ray": {**ray, "shard_replicas": 2}, "kill": {**kill, "deployment": "shard-0"}},
        {**common, "ray": ray, "kill": {**kill, "deployment": "shard-1"}}]}
    (root / "plan.json").write_text(json.dumps(plan))
    command, where = in_loopback_namespace([sys.executable, "-m", "tests.collections.sharded_harness",
                                            str(root / "plan.json"), str(root / "out.json")])
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode:
        print(f"the harness failed ({where}), exit {done.returncode}:\n{done.stderr[-3000:]}", file=sys.stderr)
        return 1
    print(f"in {where}\n\n| shard replicas | calls | codes | OK unlike the single server | whole again (Info) |")
    print("|---:|---:|---|---:|---:|")
    for replicas, scenario in zip((2, 1), json.loads((root / "out.json").read_text())["scenarios"]):
        calls, codes = scenario["kill"]["calls"], {}
        for _, code, _, _ in calls:
            codes[code] = codes.get(code, 0) + 1
        unlike = sum(1 for _, code, same, _ in calls if code == "OK" and not same)
        whole_again = recovered_after(scenario["kill"])
        again = f"{whole_again:.1f} s" if whole_again is not None else "not within the run"
        print(f"| {replicas} | {len(calls)} | {codes} | {unlike} | {again} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
