"""The vLLM backend: vllm_engine.py (VLLMEngine), processor.py (the runner V1 logits processor),
v2_processor.py, v2_slots.py and held.py (runner V2), compat.py (the supported vLLM range and
what moved between its releases). The engine front (e1/engine/__init__.py) names what others use."""
