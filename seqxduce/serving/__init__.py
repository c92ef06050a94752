"""`seqxduce serve`: a trained run behind HTTP, with dynamic batching (Starlette on uvicorn, the `serve` extra).

limits.py checks a request (torch- and starlette-free); batching.py forms batches in one worker thread;
service.py is the loaded run as the worker calls it; app.py the HTTP routes; command.py the click command.
"""
