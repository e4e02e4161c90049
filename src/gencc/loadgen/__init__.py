"""The load generator: open-loop Poisson load against a running server, one record per request.

load (run_http, run_inprocess, accounting, summaries, plots), client (a small keep-alive HTTP/1.1 client on
asyncio protocols). `gencc loadtest` is its command.
"""
