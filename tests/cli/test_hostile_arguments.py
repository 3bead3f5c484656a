"""The command line under generated arguments (issue 54, item 4): `weir search` over a tiny index with any query text,
k, depth, pipeline and option values answers (exit 0) or refuses in one ``weir: error:`` line or argparse's usage
(exit 2); never a traceback."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from weir.cli import main

WORDS = st.text(max_size=120)
NUMBER = st.one_of(st.integers(-10, 10**7).map(str), st.sampled_from(["0", "-1", "1e9", "nan", "inf", "", "x"]))
PIPELINE = st.one_of(st.sampled_from(["bm25", "dense", "hybrid", "bm25>>ltr", "bm25>>", "", "deepct", "x>>y"]),
                     st.text(max_size=60))


@pytest.mark.slow  # some hundred generated commands: make test, not the minute before a commit
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=WORDS, k=NUMBER, depth=NUMBER, pipeline=PIPELINE,
       option=st.sampled_from(["--k1", "--b", "--rrf-k", "--nprobe", "--min-relevance"]),
       value=NUMBER)
@example(query="0", k="0", depth="1", pipeline="dense", option="--k1", value="0")  # was faiss's AssertionError (k=0)
def test_generated_search_commands_answer_or_refuse_in_one_line(tiny_index, capsys, query, k, depth, pipeline, option,
                                                               value):
    argv = ["search", "--index", str(tiny_index.path), "-k", k, "--depth", depth, "--pipeline", pipeline, option,
            value, "--", query]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse: a usage line and the error
        code = e.code
    out, err = capsys.readouterr()
    assert code in (0, 2), (argv, code, err[-500:])
    assert "Traceback" not in err and "Traceback" not in out
    if code == 2:
        assert "error:" in err, err[-300:]
