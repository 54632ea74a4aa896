"""Models behind an API: openai_engine.py (an OpenAI-compatible server, e1 serve among them),
client.py (requests, retries, the reply journal), probe.py (what a server can do), replies.py
(the one gate for a reply), hosted.py and vendors.py (Gemini, Claude). The engine front
(e1/engine/__init__.py) names what others use."""
