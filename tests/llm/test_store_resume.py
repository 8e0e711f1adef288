"""The resume check reads keys only and answers exactly "which of these have a stored answer"."""
from __future__ import annotations

from finlib.llm import store as store_mod
from finlib.llm.store import ResponseStore, Result


def _result(key: str, ok: bool) -> Result:
    return Result(key=key, model="m", backend="openai", mode="generate", status="ok" if ok else "error",
                  raw_text="Bullish" if ok else None, error=None if ok else "HTTP 503")


def test_answered_spans_query_chunks_and_leaves_out_errors_and_unknown_keys(tmp_path):
    n = 2 * store_mod.ANSWERED_CHUNK + 7           # three queries, the last one partial
    keys = [f"k{i:05d}" for i in range(n)]
    with ResponseStore(tmp_path / "s.sqlite") as st:
        st.put_many(_result(k, ok=i % 5 != 0) for i, k in enumerate(keys))
        asked = keys + ["never-stored"]
        got = st.answered(asked)
        assert got == {k for i, k in enumerate(keys) if i % 5 != 0}
        # the same answer as reading whole rows and keeping the ok ones
        assert got == {k for k, row in st.get(asked).items() if row["status"] == "ok"}
        # an error replaced by a later answer counts as answered
        st.put_many([_result(keys[0], ok=True)])
        assert keys[0] in st.answered([keys[0]])
        assert st.answered([]) == set()
