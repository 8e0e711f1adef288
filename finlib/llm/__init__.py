"""The models both papers call: registry, engine, response store, backends and generic reply reading.

No paper's text lives here: the prompts, the rating parser and the judge templates are their paper's
(`finlib.finbias.prompts`, `finlib.finbias.answers`, `finlib.bizfin.prompts`). Stages 03, 05, 07 and 08
send their calls through the same engine.

- spec.py         ModelSpec: one model record as the code holds it
- registry.py     params/models.yaml: validated model records (keys only by env-var name)
- backends.py     one declared record per backend: its capabilities, its sender, its store-key fields
- store.py        content-addressed SQLite response store (resume, dedup, durable)
- local_backend.py transformers: SmolLM2 / any HF causal LM; label scoring and generation
- openai_backend.py AsyncOpenAI: bounded concurrency, rate limits, retries, streaming to the store
- batch_api.py    OpenAI Batch API (half price): JSONL, submit, poll, collect into the store
- engine.py       chat(...) / send_pending(...): one entry for every backend record (store first, then the calls)
- llamacpp.py     the embedded llama.cpp server (xllamacpp) behind the OpenAI-compatible client
- precision.py    dtype auto: the fastest precision measured once per machine
- progress.py     done/total, rate, ETA and cost of a run of calls (finlib.core.progress_feed)
- context.py      the output room a prompt leaves in a model's context window
- interrupt.py    Ctrl-C while calls are sent: stop spending, keep what is stored
- loop.py         the senders' event loop, also inside Jupyter (a worker thread)
- replies.py      reading any reply: reasoning blocks, cut-off reasoning, JSON objects in text

Scale-out is the server's job. To run the paper's open models, serve them with vLLM, e.g.
`vllm serve Qwen/Qwen2.5-14B-Instruct --tensor-parallel-size 2 --port 8000` (add
`--pipeline-parallel-size` for models that do not fit one node; run several replicas behind one
load balancer URL for throughput), set `base_url` of the registry records to that URL and raise
`concurrency` to keep the server's batch full; then list the models in `inference.models`.
Nothing else changes: the stage, the store and the artifacts are the same.
"""
