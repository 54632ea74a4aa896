"""The transformers backend: hf_engine.py (HFEngine, one batched KV-cache decode loop; loading a
model and its tokenizer), kv_cache.py (its cache, grown in buckets) and sampling.py (token
draws from a batch of logits). The engine front (e1/engine/__init__.py) names what others use."""
