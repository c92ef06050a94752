"""`seqxduce serve`: a trained run behind HTTP, with dynamic batching (Starlette on uvicorn, the `serve` extra).

Read in this order: command.py (the click command), limits.py (checks a request; torch- and starlette-free),
batching.py (forms batches in one worker thread), service.py (the loaded run as the worker calls it; ct2_service.py
the same over a CTranslate2 export, engine_service.py over any engine's decode(): each engine names its own,
Engine.service), app.py (the HTTP routes), connections.py (the connection cap).
"""
